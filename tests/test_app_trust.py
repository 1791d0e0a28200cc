"""What the team server believes of what a user sends, against the real thing (the image's gunicorn command on
loopback, two workers, two users): no name an upload carries becomes a file outside the user's upload folder, no
cache entry is read back as code, and an upload that claims to be a paradiag cache is only ever the trace files
the server parses itself. Then the same rules for caches the command line opens."""

from __future__ import annotations

import io
import json
import pickle
import re
import shutil
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from paradiag.app.store import MAGIC
from tests.conftest import REPO
from tests.helpers import kineto_trace
from tests.teamserver import post_upload, signed_in, team_server, wait_parsed

pytestmark = pytest.mark.slow
SAMPLE = REPO / "sample_traces" / "gpu_moe_expert_imbalance"
TRACE = json.dumps(kineto_trace(0, world=1)).encode()  # one rank: never mistaken for the 8-rank sample


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("trust")
    with team_server(root) as url:
        yield url, root


def upload(s: requests.Session, url: str, files: list[tuple[str, bytes]]) -> dict[str, Any]:
    r = post_upload(s, url, files)
    assert r.status_code == 200, r.text
    return {**wait_parsed(s, url, r.json()["id"]), "id": r.json()["id"]}


def every_file(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if not p.is_dir()}


def facts(s: requests.Session, url: str, token: str) -> str:
    """The header's summary facts of ``token`` (the summary callback, as the page asks for it)."""
    body: dict[str, Any] = {
        "output": "..summary-facts.children...findings.children..",
        "outputs": [
            {"id": "summary-facts", "property": "children"},
            {"id": "findings", "property": "children"},
        ],
        "inputs": [{"id": "selection-job", "property": "data", "value": {"job": token}}],
        "changedPropIds": ["selection-job.data"],
    }
    r = s.post(url + "/_dash-update-component", json=body, timeout=60)
    assert r.status_code == 200, (r.status_code, r.text[:300])
    assert "Traceback" not in r.text
    return r.text


def ranks_in(text: str) -> int:
    reply = json.loads(text)
    spans = reply["response"]["summary-facts"]["children"]
    found = {s["props"]["children"][0]["props"]["children"].strip(): s["props"]["children"][1] for s in spans}
    return int(found["ranks"])


def hostile_names(root: Path, bob_files: Path, tag: str) -> list[str]:
    """Names that, joined naively to the upload folder, land outside it: in a folder of the host, in bob's
    upload, in the aggregate cache."""
    outside = root / "outside"
    return [
        "/" + str(outside / f"{tag}-slash2.json"),  # //host/path
        str(outside / f"{tag}-slash1.json"),
        str(outside / f"{tag}-back.json").replace("/", "\\"),
        "\\\\" + str(outside / f"{tag}-unc.json").lstrip("/").replace("/", "\\"),
        "\\\\?\\C:" + str(outside / f"{tag}-device.json").replace("/", "\\"),
        "C:" + str(outside / f"{tag}-drive.json"),
        "/" + str(bob_files / f"{tag}-planted.pt.trace.json"),
        "/" + str(root / "app-cache" / "aggregates" / ("0" * 64)),
        f"../../bob/{tag}.json",
        f"a/..\\..\\..\\{tag}.json",
        f"x\0/../../{tag}.json",
        "\uff0e\uff0e/\uff0e\uff0e/" + tag,
    ]


def test_no_name_in_an_upload_lands_outside_its_folder(server: tuple[str, Path]) -> None:
    url, root = server
    alice, bob = signed_in(url, "alice"), signed_in(url, "bob")
    bobs = upload(bob, url, [("rank0.pt.trace.json", TRACE)])
    bob_files = root / "uploads" / "bob" / bobs["id"] / "files"
    before = every_file(root) - every_file(root / "uploads" / "alice") - every_file(root / "cache")

    plain = upload(
        alice,
        url,
        [("rank0.pt.trace.json", TRACE), *((n, TRACE) for n in hostile_names(root, bob_files, "multipart"))],
    )
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("job/rank0.pt.trace.json", TRACE)
        for name in hostile_names(root, bob_files, "zip"):
            z.writestr(zipfile.ZipInfo(name), TRACE)  # ZipInfo keeps the name as given
        link = zipfile.ZipInfo("job/link")
        link.external_attr = 0o120777 << 16  # a symbolic link (to /etc/passwd)
        z.writestr(link, "/etc/passwd")
    zipped_state = upload(alice, url, [("job.zip", zipped.getvalue())])
    tarred = io.BytesIO()
    with tarfile.open(fileobj=tarred, mode="w:gz", format=tarfile.GNU_FORMAT) as t:
        for name in ["job/rank0.pt.trace.json", *hostile_names(root, bob_files, "tar")]:
            info = tarfile.TarInfo(name)
            info.size = len(TRACE)
            t.addfile(info, io.BytesIO(TRACE))
        for name, kind, target in (
            ("job/etc", tarfile.SYMTYPE, "/etc"),
            ("job/passwd", tarfile.LNKTYPE, "/etc/passwd"),
            ("job/tty", tarfile.CHRTYPE, ""),
        ):
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, target
            t.addfile(info)
        info = tarfile.TarInfo("job/etc/passwd")  # through the link, had it been made
        info.size = 4
        t.addfile(info, io.BytesIO(b"root"))
    tarred_state = upload(alice, url, [("job.tar.gz", tarred.getvalue())])

    for state in (plain, zipped_state, tarred_state):
        assert state["state"] == "done" and state["ranks"] == 1, state
        assert any("skipped, the name" in p for p in state["problems"]), state["problems"]
    assert any("symbolic link" in p for p in zipped_state["problems"])
    assert {"symbolic link", "hard link", "device or FIFO"} <= {
        k
        for p in tarred_state["problems"]
        for k in ("symbolic link", "hard link", "device or FIFO")
        if k in p
    }
    after = every_file(root) - every_file(root / "uploads" / "alice") - every_file(root / "cache")
    new = {
        p
        for p in after - before
        if p.parent not in (root, root / "uploads" / ".parse-slots")
        and not p.is_relative_to(root / "app-cache")
    }
    assert not new, new  # nothing outside alice's uploads (bob's upload, the host, a cache) was written
    assert not (root / "outside").exists() and not list(bob_files.glob("*planted*"))
    assert not (root / "app-cache" / "aggregates" / ("0" * 64)).exists()
    alices = root / "uploads" / "alice"
    assert not [p for p in alices.rglob("*") if p.is_symlink()] and not [
        p for p in every_file(alices) if not p.is_file()
    ]
    landed = alices / plain["id"] / "files" / str(root / "outside").lstrip("/") / "multipart-slash2.json"
    assert landed.is_file()  # a //host/path name is neutralised: it lands inside, under its own name


def crafted_cache(tmp: Path, **changes: Any) -> list[tuple[str, bytes]]:
    """The files of a real paradiag cache of the sample, its manifest changed by ``changes`` (``sources``: a
    function of the sources list), as an upload would send them."""
    from paradiag import ingest

    cache = tmp / "real-cache"
    if not cache.is_dir():
        ingest.ingest(SAMPLE, cache, workers=1)
    manifest = json.loads((cache / "manifest.json").read_text())
    for key, value in changes.items():
        manifest[key] = value(manifest[key]) if callable(value) else value
    files = [
        (str(p.relative_to(cache)), p.read_bytes())
        for p in sorted(cache.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    ]
    return [("manifest.json", json.dumps(manifest).encode()), *files]


def server_cache_of(root: Path, files: Path) -> dict[str, Any]:
    found = [json.loads(m.read_text()) for m in (root / "cache").glob("*/manifest.json")]
    mine = [m for m in found if m["source"] == str(files.resolve())]
    assert len(mine) == 1, [m["source"] for m in found]
    return mine[0]


def test_an_upload_that_claims_to_be_a_cache_is_only_its_traces(
    server: tuple[str, Path], tmp_path: Path
) -> None:
    url, root = server
    bob = signed_in(url, "bob")
    bobs = upload(bob, url, [(p.name, p.read_bytes()) for p in sorted(SAMPLE.iterdir()) if p.is_file()])
    assert bobs["state"] == "done" and bobs["ranks"] == 8
    bob_files = root / "uploads" / "bob" / bobs["id"] / "files"
    bob_events = next((root / "cache").glob("files-*/events/part-00000.parquet"))
    from paradiag import dataset

    sample_hash = dataset.open_job(SAMPLE).content_hash
    absolute = lambda sources: [{**s, "events_file": str(bob_events)} for s in sources]  # noqa: E731
    crafted: dict[str, dict[str, Any]] = {
        "bob's folder": {"source": str(bob_files)},
        "/etc": {"source": "/etc"},
        "an absolute events_file": {"sources": absolute},
        "a sample's content_hash": {"content_hash": sample_hash, "source": str(SAMPLE)},
        "broken entries": {"sources": lambda s: [{"rank": "x"}, None], "files": 7},
    }
    # One upload holds every crafted cache: the first at its top (what paradiag.open saw as a cache), the others
    # in folders of their own; once with a trace beside them, once without.
    caches = [
        (name if i == 0 else f"{i}/{name}", data)
        for i, changes in enumerate(crafted.values())
        for name, data in crafted_cache(tmp_path, **changes)
    ]
    alice = signed_in(url, "alice")  # now: a connection idle while the caches were made may have been closed
    only = upload(alice, url, caches)  # the caches alone: no trace to parse
    assert only["state"] == "error" and re.search("no trace (found|could be read)", only["message"]), only
    assert "bob" not in only["message"] and "/etc" not in only["message"] and str(root) not in only["message"]
    state = upload(alice, url, [*caches, ("rank0.pt.trace.json", TRACE)])
    assert state["state"] == "done" and state["ranks"] == 1, state
    files = root / "uploads" / "alice" / state["id"] / "files"
    made = server_cache_of(root, files)  # the server's own cache, of the files it parsed
    assert made["content_hash"] not in (sample_hash, json.loads(caches[0][1])["content_hash"])
    assert all(not Path(s["events_file"]).is_absolute() for s in made["sources"])
    for session in (alice, signed_in(url, "alice")):  # both workers, likely
        assert ranks_in(facts(session, url, f"upload:{state['id']}")) == 1
    # The sample, and bob's upload, still show their own facts to everyone (no aggregate was stood in for).
    bob = signed_in(url, "bob")
    assert ranks_in(facts(bob, url, "sample:gpu_moe_expert_imbalance")) == 8
    assert ranks_in(facts(bob, url, f"upload:{bobs['id']}")) == 8
    assert ranks_in(facts(alice, url, "sample:gpu_moe_expert_imbalance")) == 8


def test_an_upload_is_opened_from_its_parse_never_parsed_in_the_web_worker(server: tuple[str, Path]) -> None:
    url, root = server
    alice = signed_in(url, "alice")
    state = upload(alice, url, [("rank0.pt.trace.json", TRACE)])
    files = root / "uploads" / "alice" / state["id"] / "files"
    token = f"upload:{state['id']}"
    assert ranks_in(facts(alice, url, token)) == 1
    cache = next(
        m.parent
        for m in (root / "cache").glob("*/manifest.json")
        if json.loads(m.read_text())["source"] == str(files.resolve())
    )
    stamp = (cache / "manifest.json").stat().st_mtime_ns
    (files / "rank1.pt.trace.json").write_bytes(
        json.dumps(kineto_trace(1, world=2)).encode()
    )  # the folder changed
    for session in (alice, signed_in(url, "alice"), signed_in(url, "alice")):
        assert ranks_in(facts(session, url, token)) == 1  # what its parse made: not parsed again here
    assert (cache / "manifest.json").stat().st_mtime_ns == stamp
    again = upload(alice, url, [("rank0.pt.trace.json", TRACE)])
    files = root / "uploads" / "alice" / again["id"] / "files"
    cache = next(
        m.parent
        for m in (root / "cache").glob("*/manifest.json")
        if json.loads(m.read_text())["source"] == str(files.resolve())
    )
    shutil.rmtree(cache)  # its cache gone before it was opened: a notice, never a parse here nor a 500
    for session in (alice, signed_in(url, "alice")):
        text = facts(session, url, f"upload:{again['id']}")
        assert "upload it again" in text and "not yours to open" in text, text[:300]
    assert not cache.exists()


class Marker:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        import os

        return (os.system, (f"touch {self.path}",))


def test_a_planted_cache_entry_is_never_unpickled(server: tuple[str, Path]) -> None:
    url, root = server
    bob = signed_in(url, "bob")
    token = "sample:gpu_moe_expert_imbalance"
    assert ranks_in(facts(bob, url, token)) == 8
    entries = [p for p in (root / "app-cache" / "aggregates").iterdir() if not p.name.startswith(".")]
    assert entries
    marker = root / "pwned"
    for entry in entries:  # as if a write anywhere had planted them (Flask-Caching's layout: expiry, pickle)
        entry.write_bytes((2**31).to_bytes(4, "little") + pickle.dumps(Marker(marker)))
    for session in (bob, signed_in(url, "alice"), signed_in(url, "alice")):
        assert ranks_in(facts(session, url, token)) == 8
    assert not marker.exists()
    assert any(
        e.read_bytes().startswith(MAGIC) for e in entries if e.exists()
    )  # those asked for: computed again


# The same rules where the command line opens a cache folder itself.


def cache_with(tmp_path: Path, **changes: Any) -> Path:
    folder = tmp_path / f"cache-{len(list(tmp_path.glob('cache-*')))}"
    folder.mkdir()
    for name, data in crafted_cache(tmp_path, **changes):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        (
            {"sources": lambda s: [{**s[0], "events_file": "/etc/passwd"}, *s[1:]]},
            "'/etc/passwd' leads outside",
        ),
        (
            {"sources": lambda s: [{**s[0], "events_file": "../../x.parquet"}, *s[1:]]},
            "names a parent folder",
        ),
        ({"sources": lambda s: [{**s[0], "extra_files": {"links": "//etc/x"}}, *s[1:]]}, "leads outside"),
        (
            {"sources": lambda s: [{**s[0], "rank_tables": {"t": "a/../../../x"}}, *s[1:]]},
            "names a parent folder",
        ),
        ({"sources": lambda s: [{**s[0], "rank": "0"}]}, "'rank' is str, not int"),
        ({"sources": lambda s: [None]}, "no object"),
        ({"files": [{"path": "/etc/passwd", "size": 1, "mtime_ns": 1, "hash": "x"}]}, "relative"),
        ({"problems": [{"source": "x", "severity": "error", "message": "m", "extra": 1}, 3]}, "no object"),
        ({"content_hash": None}, "'content_hash' is NoneType"),
    ],
)
def test_a_crafted_cache_opened_by_path_is_a_clear_error(
    tmp_path: Path, changes: dict[str, Any], named: str
) -> None:
    from paradiag.cache import JobError
    from paradiag.dataset import open_job

    folder = cache_with(tmp_path, **changes)
    with pytest.raises(JobError, match="not a readable paradiag cache") as refused:
        open_job(folder)
    assert named in str(refused.value) or (named == "relative" and "passwd" not in str(refused.value)), (
        refused.value
    )


def test_a_cache_link_out_of_its_folder_or_missing_table_is_a_clear_error(tmp_path: Path) -> None:
    from paradiag.cache import JobError
    from paradiag.dataset import open_job

    folder = cache_with(tmp_path)
    (folder / "events" / "part-00000.parquet").unlink()
    (folder / "events" / "part-00000.parquet").symlink_to(
        tmp_path / "real-cache" / "events" / "part-00000.parquet"
    )
    with pytest.raises(JobError, match="leads outside"):
        open_job(folder)
    folder = cache_with(tmp_path)
    (folder / "ranks.parquet").write_bytes(b"not parquet")
    with pytest.raises(JobError, match="not a readable paradiag cache"):
        open_job(folder)


def test_a_caches_source_is_followed_only_by_the_rule(tmp_path: Path) -> None:
    from paradiag.cache import JobError
    from paradiag.dataset import followed_source, open_job

    real = tmp_path / "job"
    shutil.copytree(SAMPLE, real)
    for source, followed in (("/etc-does-not-exist", False), ("relative/path", False), (str(real), True)):
        folder = cache_with(tmp_path, source=source)
        job = open_job(folder)  # opened as it is where its source is not followed
        assert (followed_source(job, folder) is not None) is followed, source
    inside = cache_with(tmp_path)
    assert followed_source(open_job(inside, refresh=False), inside) == SAMPLE  # the sample is where it says
    nested = cache_with(tmp_path, source=str(tmp_path))  # a source that holds the cache folder itself
    assert followed_source(open_job(nested), nested) is None
    with pytest.raises(JobError, match="cannot be parsed again"):
        open_job(nested, refresh=True)
    # As a source (how the server parses uploads) a cache folder is trace files only: here, none.
    with pytest.raises(JobError, match=r"no trace (found|could be read)"):
        open_job(cache_with(tmp_path, source=str(real)), tmp_path / "its-cache", as_source=True)
