"""The shared aggregate store (app/store.py) reads back data only, and only what the server wrote: a planted pickle,
a forged or altered entry, an entry moved to another key's name are never used (nor unpickled), the value is
computed again; every aggregate the pages ask for survives the round trip as it was."""

from __future__ import annotations

import functools
import importlib.util
import math
import os
import pickle
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from paradiag.app import store
from paradiag.app.config import Config

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


@pytest.fixture
def bound(tmp_path: Path) -> Any:
    config = Config(
        upload_dir=tmp_path / "uploads", app_cache_dir=tmp_path / "app-cache", secret_key="server-key"
    )
    store.init_cache(None, config)
    yield store._bound[0]
    store._bound.clear()


def Job(folder: Path, content_hash: str = "c0ffee") -> Any:
    """What the store needs of a job (its scope)."""
    return SimpleNamespace(cache_dir=folder, content_hash=content_hash, url=None)


def counted(calls: list[int], value: Any) -> Any:
    calls.append(1)
    return value


class Marker:
    """A pickle whose loading writes a file: proof that something unpickled it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.path}",))


def same(a: Any, b: Any) -> bool:
    """Equal and of one type, all the way down (arrays and tables by value, NaN equal to NaN); a NumPy scalar in
    ``b`` is the Python number it holds (as the store gives it back)."""
    if isinstance(b, np.generic):
        b = b.item()
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        return (
            a.dtype == b.dtype
            and a.shape == b.shape
            and (
                np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
                if not a.dtype.hasobject
                else a.tolist() == b.tolist()
            )
        )
    if isinstance(a, pa.Table):
        return a.equals(b, check_metadata=True)
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def test_values_of_every_kind_round_trip(bound: Any, tmp_path: Path) -> None:
    value = {
        "text": "é",
        "n": 2**63,
        "f": float("nan"),
        "inf": -math.inf,
        "none": None,
        "flag": True,
        "tuple": (1, (2, "3")),
        "ints": {1: "a", (2, 3): [4]},
        "set": {1, 2},
        "\0t": "a key like a tag",
        "np": np.arange(6, dtype=np.int32).reshape(2, 3),
        "f32": np.float32(1.5),
        "objects": np.array(["a", None], dtype=object),
        "table": pa.table(
            {"a": pa.array([1, None], pa.int64()), "s": pa.array(["x", "y"]).dictionary_encode()}
        ),
    }
    calls: list[int] = []
    job = Job(tmp_path)
    first = store.memo("kind", job, [1], lambda: counted(calls, value))
    second = store.memo("kind", job, [1], lambda: counted(calls, value))
    assert len(calls) == 1 and first is value
    assert same(second, value), second


def test_a_value_with_no_data_encoding_is_computed_each_time_never_pickled(
    bound: Any, tmp_path: Path
) -> None:
    calls: list[int] = []
    for _ in range(2):
        store.memo("kind", Job(tmp_path), 1, lambda: counted(calls, {"x": object()}))
    assert len(calls) == 2 and not [p for p in bound.folder.iterdir() if not p.name.startswith(".")]


def entry_of(bound: Any, kind: str, job: Any, params: Any, compute: Any) -> Path:
    """The file of the entry ``store.memo(kind, job, params, compute)`` keeps (``compute``: a lambda of the same
    function as the memo's, so of the same code)."""
    return store._path(bound, store.memo_key(kind, job, params, compute))


def test_a_planted_pickle_is_never_unpickled_and_the_value_is_computed(bound: Any, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    job = Job(tmp_path)
    entry = entry_of(bound, "overview", job, 2, lambda: None)
    for planted in (
        pickle.dumps(Marker(marker)),  # Flask-Caching's own layout: expiry, then the pickle
        (2**31).to_bytes(4, "little") + pickle.dumps(Marker(marker)),
        store.MAGIC + b"\0" * 32 + pickle.dumps(Marker(marker)),  # our magic, a made-up MAC
    ):
        entry.write_bytes(planted)
        assert store.memo("overview", job, 2, lambda: {"answer": 42}) == {"answer": 42}
        assert not marker.exists()
        assert store.memo("overview", job, 2, lambda: {"answer": 0}) == {
            "answer": 42
        }  # the real entry took its place
        entry.unlink()


def test_forged_moved_altered_or_linked_entries_are_not_used(bound: Any, tmp_path: Path) -> None:
    job, other = Job(tmp_path / "a"), Job(tmp_path / "b")
    store.memo("report", job, 1, lambda: {"facts": "job a"})
    store.memo("report", other, 1, lambda: {"facts": "job b"})
    a, b = entry_of(bound, "report", job, 1, lambda: None), entry_of(bound, "report", other, 1, lambda: None)
    # Another key's entry under this key's name (its MAC binds it to its key): not used.
    b.write_bytes(a.read_bytes())
    assert store.memo("report", other, 1, lambda: {"facts": "computed"}) == {"facts": "computed"}
    # One byte changed.
    data = bytearray(a.read_bytes())
    data[-3] ^= 1
    a.write_bytes(bytes(data))
    assert store.memo("report", job, 1, lambda: {"facts": "again"}) == {"facts": "again"}
    # An entry written with another server's key.
    foreign = store._Store(bound.folder, b"another key", bound.timeout_s)
    store.put(foreign, store.memo_key("report", job, 1, lambda: None), {"facts": "forged"})
    assert store.memo("report", job, 1, lambda: {"facts": "mine"}) == {"facts": "mine"}
    # A link in its place, to a file the server wrote for another key.
    a.unlink()
    a.symlink_to(b)
    assert store.memo("report", job, 1, lambda: {"facts": "not through a link"}) == {
        "facts": "not through a link"
    }


def test_expired_entries_are_computed_again_and_the_store_keeps_a_cap(
    bound: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = Job(tmp_path)
    short = store._Store(bound.folder, bound.mac_key, -1)  # written already expired
    store._bound[:] = [short]
    store.memo("k", job, 1, lambda: [1])
    assert store.memo("k", job, 1, lambda: [2]) == [2]
    monkeypatch.setattr(store, "MAX_ENTRIES", 10)
    monkeypatch.setattr(store, "PRUNE_EVERY", 1)
    store._bound[:] = [bound]
    for i in range(30):
        store.memo("k", job, i, lambda: [0])
    assert len([p for p in bound.folder.iterdir() if store._ENTRY.match(p.name)]) <= 10


def test_the_cache_may_not_lie_in_the_uploads(tmp_path: Path) -> None:
    for uploads, cache in (
        (tmp_path / "u", tmp_path / "u" / "app"),
        (tmp_path / "x" / "uploads", tmp_path / "x"),
    ):
        with pytest.raises(ValueError, match="must not lie"):
            store.init_cache(None, Config(upload_dir=uploads, app_cache_dir=cache, secret_key="k"))
    store._bound.clear()


def test_every_aggregate_of_the_pages_round_trips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """warm() computes what the pages ask for; each value stored must read back exactly as computed (a hit)."""
    from paradiag.app.factory import create_app
    from paradiag.app.warm import warm

    stored: dict[str, int] = {}
    unstorable: list[str] = []
    put, get = store.put, store.get

    def checked_put(s: Any, key: str, value: Any) -> None:
        try:
            back = store.loads(store.dumps(value))
        except store.Unstorable as exc:
            unstorable.append(f"{key.split(':')[2]}: {exc}")
            return
        assert same(back, value), key
        stored[key] = stored.get(key, 0) + 1
        put(s, key, value)

    hits: list[str] = []
    monkeypatch.setattr(store, "put", checked_put)

    def counted_get(s: Any, key: str) -> Any:
        value = get(s, key)
        if value is not None:
            hits.append(key)
        return value

    monkeypatch.setattr(store, "get", counted_get)
    for sample in ("npu_pangu_pipeline_stage_imbalance", "gpu_llm_slow_rank"):
        app = create_app(
            Config.from_env(
                job=str(SAMPLES / sample),
                upload_dir=tmp_path / "uploads",
                app_cache_dir=tmp_path / "app-cache",
            )
        )
        warm(app, "served").join()
    assert not unstorable, unstorable
    kinds = {k.split(":")[2] for k in stored}
    assert {
        "overview",
        "marey-step",
        "flow",
        "timeline-step",
        "detail",
        "operator-totals",
        "comm-view",
    } <= kinds, kinds
    hits.clear()
    before = dict(stored)
    warm(app, "served").join()  # the second time, every aggregate is read back: nothing is computed or stored
    assert hits and stored == before
    store._bound.clear()


def _load(folder: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Module ``paradiag.<name>`` from ``folder`` (which stands for paradiag's own), loaded as a new server process
    would run it: its sources hashed afresh."""
    store._module_hash.cache_clear()
    store._imported.cache_clear()
    store._file_digest.cache_clear()
    spec = importlib.util.spec_from_file_location(f"paradiag.{name}", folder / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_a_changed_compute_function_gets_a_new_key_an_unchanged_one_reuses_its_entry(
    bound: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key follows the code: the module that defines the compute function and the paradiag modules it imports
    (here ``paradiag.probe`` and its helper, in a folder standing for paradiag's); no number is bumped by hand."""
    code = tmp_path / "code"
    code.mkdir()
    monkeypatch.setattr(store, "_PACKAGE", code)
    probe = "from paradiag.probe_helper import BASE\n\n\ndef compute(calls):\n    calls.append(1)\n    return BASE + {n}\n"
    (code / "probe.py").write_text(probe.format(n=2))
    (code / "probe_helper.py").write_text("BASE = 40\n")
    calls: list[int] = []
    job = Job(tmp_path)

    def answer() -> tuple[Any, int]:
        _load(code, "probe_helper", monkeypatch)
        module = _load(code, "probe", monkeypatch)
        return store.memo("probe", job, None, functools.partial(module.compute, calls)), len(calls)

    assert answer() == (42, 1)
    assert answer() == (42, 1)  # the same code, loaded again: its entry is used, nothing is computed
    (code / "probe.py").write_text(probe.format(n=3))  # the compute function changed
    assert answer() == (43, 2)
    (code / "probe_helper.py").write_text("BASE = 50\n")  # a module it imports changed
    assert answer() == (53, 3)
    (code / "probe_helper.py").write_text("BASE = 40\n")  # as it was: that code's entry is there still
    assert answer() == (43, 3)


def test_the_code_hashed_is_what_the_compute_function_reaches() -> None:
    """An aggregate's sources: its module, what it imports and what those import (the analysis, the dataset), and
    nothing of the web extra (the view data import no Dash, nor does hashing them import anything)."""
    sources = store.sources_of("paradiag.app.data.comm")
    assert {
        "paradiag.app.data.comm",
        "paradiag.app.data.common",
        "paradiag.analysis.comm",
        "paradiag.job",
        "paradiag.schema",
    } <= set(sources)
    assert not {
        m
        for m in sources
        if m.startswith(("paradiag.app.views", "paradiag.app.callbacks", "paradiag.app.context"))
    }
    assert all(path.is_file() for path in sources.values())
    live = store.sources_of("paradiag.app.views.timeline.live")
    assert {
        "paradiag.app.views.timeline.static",
        "paradiag.app.data.timeline",
        "paradiag.app.boundary",
    } <= set(live)
    # Two functions of one module: two keys.
    assert store.code_version(
        test_the_code_hashed_is_what_the_compute_function_reaches
    ) != store.code_version(_load)
