"""A mutation fuzzer for the parsers, shared by tests/test_fuzz_parsers.py (a bounded run) and benchmarks/fuzz.py
(a long one that prints counts).

A case is a seed (a small well-formed Kineto trace or Ascend rank folder) and a number for ``random.Random``: the
mutator damages one file of a copy of the seed (JSON-level: a field set to a hostile value, removed, nested deep;
byte-level: flipped bytes, truncation, inserted text, a corrupt gzip stream; CSV cells; SQLite values and pages),
puts it in a job folder beside one intact rank, and ingests the folder. The oracle: nothing escapes but
paradiag's documented errors (:class:`~paradiag.cache.JobError`), no problem reads "internal error", and the
intact rank always loads.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import gzip
import io
import json
import random
import re
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paradiag import cache, ingest
from tests.helpers import kineto_trace, make_prof, write_trace

REPO = Path(__file__).resolve().parents[1]
OUT = "ASCEND_PROFILER_OUTPUT"

HOSTILE: list[Any] = [
    0, -1, 1, 2**31 - 1, 2**31, -(2**31) - 1, 2**32 - 1, 2**53 + 1, 2**63 - 1, 2**63, -(2**63) - 1, 10**20, 10**40,
    1e30, -1e30, 1e300, -1e300, 1e308, -1e308, 0.5, -0.0, 5e-324, "", "x", "0", "-1", "1e20", "1e308", "-1e308", "inf",
    "NaN", "4294967295", "12.5.3", "\u0000\u00e9",
    "ProfilerStep#100000000000000000000", "ProfilerStep#-1", None, True, False, [], {}, [1, "a", None], {"a": {"b": 1}},
]  # fmt: skip
KINETO_FIELDS = ("ph", "name", "cat", "pid", "tid", "ts", "dur", "args", "id")
KINETO_ARGS = (
    "External id", "correlation", "device", "stream", "Collective name", "In msg nelems", "Out msg nelems", "dtype",
    "Process Group Name", "Process Group Ranks", "Rank",
)  # fmt: skip
KINETO_TOP = ("distributedInfo", "baseTimeNanoseconds", "traceEvents", "host_name", "deviceProperties")
INFO_KEYS = ("rank", "world_size", "backend", "pg_config", "nccl_version")
SQL_VALUES = ("'soon'", "NULL", "-1", "9223372036854775807", "-9223372036854775808", "4294967295", "1e300",
              "0.5", "X'FFFE00'", "''", "'99999999999999999999'")  # fmt: skip


def hostile(rng: random.Random) -> Any:
    """A value no field expects: out of range, of another type, deeply nested or very long."""
    roll = rng.random()
    if roll < 0.05:
        return (
            f"{DEEP}{rng.choice((50, 2_000, 50_000))}{DEEP}"  # written as that many nested lists by dumps()
        )
    if roll < 0.08:
        return "n" * rng.choice((1_000, 70_000))
    return copy.deepcopy(rng.choice(HOSTILE))


DEEP = "\u0001deep"
_DEEP_TEXT = re.compile(r'"\\u0001deep(\d+)\\u0001deep"')


def dumps(doc: Any) -> bytes:
    """JSON text, with each deep-nesting marker replaced by that many nested lists (json.dumps would recurse)."""
    text = json.dumps(doc)
    return _DEEP_TEXT.sub(lambda m: "[" * int(m[1]) + "1" + "]" * int(m[1]), text).encode()


# --- byte-level ------------------------------------------------------------------------------------------------


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """Flip, cut, insert or repeat bytes somewhere in ``data``."""
    if not data:
        return b"{"
    out = bytearray(data)
    kind = rng.randrange(5)
    pos = rng.randrange(len(out))
    if kind == 0:
        for _ in range(rng.randint(1, 8)):
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    elif kind == 1:
        del out[pos:]
    elif kind == 2:
        out[pos:pos] = rng.choice((b" " * rng.randint(1, 300_000), b"\x00\xff", b"]}", b"{[", b'"', b"\\u00"))
    elif kind == 3:
        end = min(len(out), pos + rng.randint(1, 4096))
        out[pos:pos] = out[pos:end] * rng.randint(1, 4)
    else:
        out[pos] = rng.randrange(256)
    return bytes(out)


# --- Kineto ----------------------------------------------------------------------------------------------------


def mutate_kineto_doc(doc: dict[str, Any], rng: random.Random) -> None:
    """One to three JSON-level changes to a Kineto document."""
    for _ in range(rng.randint(1, 3)):
        events = doc.get("traceEvents") if isinstance(doc.get("traceEvents"), list) else None
        kind = rng.randrange(6)
        if kind <= 1 and events:
            event = rng.choice(events)
            if isinstance(event, dict):
                event[rng.choice(KINETO_FIELDS)] = hostile(rng)
        elif kind == 2 and events:
            event = rng.choice(events)
            if isinstance(event, dict):
                args = event.setdefault("args", {})
                if isinstance(args, dict):
                    args[rng.choice(KINETO_ARGS)] = hostile(rng)
        elif kind == 3:
            info = doc.setdefault("distributedInfo", {})
            if isinstance(info, dict):
                info[rng.choice(INFO_KEYS)] = hostile(rng)
        elif kind == 4:
            doc[rng.choice(KINETO_TOP)] = hostile(rng)
        elif events:
            event = rng.choice(events)
            if isinstance(event, dict):
                event.pop(rng.choice(KINETO_FIELDS), None)


def kineto_case(folder: Path, rng: random.Random, seed_doc: dict[str, Any]) -> None:
    """Write the damaged rank (rank 1) beside an intact rank 0."""
    write_trace(folder / "rank0.pt.trace.json.gz", kineto_trace(0, world=2))
    doc = copy.deepcopy(seed_doc)
    if rng.random() < 0.7:
        mutate_kineto_doc(doc, rng)
    data = dumps(doc)
    gz = rng.random() < 0.5
    if gz:
        data = gzip.compress(data, 1)
    if rng.random() < 0.4 or data == dumps(seed_doc):
        data = mutate_bytes(data, rng)
    (folder / ("rank1.json.gz" if gz else "rank1.json")).write_bytes(data)


# --- Ascend ----------------------------------------------------------------------------------------------------


def _json_paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths to every value in a (small) JSON document, up to a few hundred."""
    found = [path]
    if isinstance(value, dict):
        items: list[tuple[Any, Any]] = list(value.items())
    elif isinstance(value, list):
        items = list(enumerate(value))[:50]
    else:
        return found
    for key, child in items:
        found.extend(_json_paths(child, (*path, key)))
        if len(found) > 400:
            break
    return found


def mutate_json_doc(doc: Any, rng: random.Random) -> Any:
    """Set one to three values anywhere in the document (the root included) to hostile values."""
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(_json_paths(doc))
        if not path:
            return hostile(rng)
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        if rng.random() < 0.2 and isinstance(parent, dict):
            parent.pop(path[-1], None)
        elif rng.random() < 0.15 and isinstance(parent[path[-1]], list):
            del parent[path[-1]][rng.randrange(len(parent[path[-1]]) + 1) :]  # a list cut short
        else:
            parent[path[-1]] = hostile(rng)
    return doc


def mutate_trace_view(events: Any, rng: random.Random) -> Any:
    """Hostile values on a few events of an Ascend trace_view.json (ts is a string of microseconds there), or the
    timeline cut after some event (valid JSON, a profile stopped early: processes named, their events missing)."""
    if not isinstance(events, list) or not events:
        return mutate_json_doc(events, rng)
    if rng.random() < 0.2:
        return events[: rng.randrange(len(events))]
    for _ in range(rng.randint(1, 4)):
        event = rng.choice(events)
        if not isinstance(event, dict):
            continue
        key = rng.choice((*KINETO_FIELDS, "bp", "args"))
        if key == "args" and isinstance(event.get("args"), dict) and event["args"]:
            event["args"][rng.choice(list(event["args"]))] = hostile(rng)
        else:
            event[key] = hostile(rng)
    return events


def mutate_csv(data: bytes, rng: random.Random) -> bytes:
    rows = list(csv.reader(io.StringIO(data.decode("utf-8", "replace"))))
    if len(rows) < 2 or rng.random() < 0.3:
        return mutate_bytes(data, rng)
    for _ in range(rng.randint(1, 5)):
        row = rng.choice(rows[1:])
        if row:
            row[rng.randrange(len(row))] = str(hostile(rng))[:100_000]
    out = io.StringIO()
    csv.writer(out).writerows(rows)
    return out.getvalue().encode()


def mutate_db(path: Path, rng: random.Random) -> None:
    """Hostile values in a few columns of a few tables (SQLite keeps any type anywhere), or a damaged page."""
    if rng.random() < 0.25:
        path.write_bytes(mutate_bytes(path.read_bytes(), rng))
        return
    with contextlib.closing(sqlite3.connect(path)) as conn:
        names = [r[0] for r in conn.execute("select name from sqlite_master where type = 'table'")]
        for _ in range(rng.randint(1, 3)):
            table = rng.choice(names)
            columns = [r[1] for r in conn.execute(f"pragma table_info({table})")]
            if not columns:
                continue
            column = rng.choice(columns)
            value = rng.choice(SQL_VALUES)
            with contextlib.suppress(sqlite3.DatabaseError):  # a typed (STRICT) column refuses: fine
                conn.execute(
                    f"update {table} set {column} = {value} where abs(random()) % {rng.randint(1, 5)} = 0"
                )
        if rng.random() < 0.1:
            conn.execute(f"drop table {rng.choice(names)}")
        conn.commit()


def ascend_case(folder: Path, rng: random.Random, seed_dir: Path, intact: Path) -> None:
    """A damaged copy of ``seed_dir`` beside an intact copy of another rank."""
    for src in (intact, seed_dir):
        dst = folder / src.name
        shutil.copytree(src, dst)
        for p in dst.rglob("*"):  # the shared traces are read-only
            p.chmod(0o755 if p.is_dir() else 0o644)
    rank = folder / seed_dir.name
    files = sorted(p for p in rank.rglob("*") if p.is_file())
    target = rng.choice(files)
    data = target.read_bytes()
    if target.suffix == ".db":
        mutate_db(target, rng)
        return
    if target.suffix == ".csv":
        target.write_bytes(mutate_csv(data, rng))
        return
    if target.suffix == ".json" and rng.random() < 0.7:
        doc = json.loads(data)
        timeline = target.name == "trace_view.json" or target.name.startswith("msprof_")
        doc = mutate_trace_view(doc, rng) if timeline else mutate_json_doc(doc, rng)
        target.write_bytes(dumps(doc))
        return
    target.write_bytes(mutate_bytes(data, rng))


# --- running a case --------------------------------------------------------------------------------------------


@dataclass
class Seed:
    name: str
    write: Callable[[Path, random.Random], None]


def kineto_seeds() -> list[Seed]:
    docs = {"kineto:helper": kineto_trace(1, world=2)}
    sample = sorted((REPO / "sample_traces" / "gpu_moe_expert_imbalance").glob("rank1.*.json.gz"))
    if sample:
        doc = json.loads(gzip.decompress(sample[0].read_bytes()))
        doc["traceEvents"] = doc["traceEvents"][:400]  # small: many cases per second
        docs["kineto:sample"] = doc
    return [Seed(name, lambda folder, rng, d=doc: kineto_case(folder, rng, d)) for name, doc in docs.items()]


# The seeds of each reader paradiag.discover.parsers() registers: every one is fuzzed (tests/test_fuzz_parsers.py
# checks that none is left out). The db seeds need the shared traces; the others are built from bundled samples.
SEEDS_OF = {
    "paradiag.parsers.kineto": ("kineto:helper", "kineto:sample"),
    "paradiag.parsers.ascend": ("ascend:text", "ascend:db"),
    "paradiag.parsers.mindspore": ("ascend:mindspore", "ascend:mindspore_db"),
    "paradiag.parsers.msprof": ("ascend:msprof",),
    "paradiag.parsers.ascend_legacy": ("ascend:legacy",),
}


def ascend_seeds(shared_npu: Path | None, work: Path | None = None) -> list[Seed]:
    """torch_npu text (a bundled sample) and db (shared traces); with ``work``, a folder to build them in, also
    MindSpore text and db (the ranks renamed ``*_ascend_ms``), msprof (PROF_ folders made from a shared rank, else
    from the sample's) and the legacy layouts paradiag names but does not read (beside an intact sample rank)."""
    seeds = []
    sample = sorted((REPO / "sample_traces" / "npu_slow_link").glob("*_ascend_pt"))
    if len(sample) >= 2:
        seeds.append(Seed("ascend:text", lambda folder, rng: ascend_case(folder, rng, sample[1], sample[0])))
        if work is not None:
            ms = [work / "mindspore" / p.name.replace("_ascend_pt", "_ascend_ms") for p in sample[:2]]
            for src, dst in zip(sample, ms, strict=False):
                shutil.copytree(src, dst, dirs_exist_ok=True)
            seeds.append(Seed("ascend:mindspore", lambda folder, rng: ascend_case(folder, rng, ms[1], ms[0])))
            legacy = _legacy_folders(work / "legacy", sample[1])

            def legacy_case(folder: Path, rng: random.Random) -> None:
                ascend_case(folder, rng, rng.choice(legacy), sample[0])

            seeds.append(Seed("ascend:legacy", legacy_case))
    text_job = shared_npu / "msinsight_alexnet_dp8_text_level1" if shared_npu else None
    text_ranks = (
        [text_job / f"rank{r}_ascend_pt" for r in (0, 1)]
        if text_job is not None and (text_job / "rank1_ascend_pt").is_dir()
        else sample[:2]
    )
    if work is not None and len(text_ranks) == 2:
        profs = [
            make_prof(work / "msprof", rank, f"PROF_00000{r}_20250109155803704_ABCDEFG{r}")
            for r, rank in enumerate(text_ranks)
        ]
        seeds.append(Seed("ascend:msprof", lambda folder, rng: ascend_case(folder, rng, profs[1], profs[0])))
    db_job = shared_npu / "msinsight_alexnet_dp8_db_level1" if shared_npu else None
    if db_job is not None and (db_job / "rank1_ascend_pt").is_dir():
        seeds.append(
            Seed(
                "ascend:db",
                lambda folder, rng: ascend_case(
                    folder, rng, db_job / "rank1_ascend_pt", db_job / "rank0_ascend_pt"
                ),
            )
        )
        if work is not None:
            msdb = [
                _mindspore_db(db_job / f"rank{r}_ascend_pt", work / "mindspore_db" / f"rank{r}_ascend_ms")
                for r in (0, 1)
            ]
            seeds.append(
                Seed("ascend:mindspore_db", lambda folder, rng: ascend_case(folder, rng, msdb[1], msdb[0]))
            )
    return seeds


def _mindspore_db(rank: Path, dst: Path) -> Path:
    """A torch_npu db rank as MindSpore writes it: ``*_ascend_ms`` holding ``ascend_mindspore_profiler_{rank}.db``."""
    shutil.copytree(rank, dst, dirs_exist_ok=True)
    for db in (dst / OUT).glob("ascend_pytorch_profiler*.db"):
        db.rename(db.with_name(db.name.replace("ascend_pytorch_profiler", "ascend_mindspore_profiler")))
    return dst


def _legacy_folders(work: Path, rank: Path) -> list[Path]:
    """A MindSpore <= 2.2 ``profiler/`` folder and a CANN <= 6.3 ``PROF_`` collection, their files taken from a
    torch_npu rank (the readers only recognise them)."""
    out = rank / OUT
    mindspore = work / "profiler"
    mindspore.mkdir(parents=True, exist_ok=True)
    shutil.copy(out / "trace_view.json", mindspore / "ascend_timeline_display_1.json")
    (mindspore / "step_trace_raw_1_detail_time.csv").write_text("step_num,start_point,end_point\n1,100,200\n")
    cann = work / "PROF_000001_20250109155803704_OLDCANNX" / "device_1"
    (cann / "timeline").mkdir(parents=True, exist_ok=True)
    (cann / "data").mkdir(exist_ok=True)
    shutil.copy(out / "trace_view.json", cann / "timeline" / "task_time_1.json")
    (cann / "data" / "ts_track.data.1.slice_0").write_bytes(bytes(range(256)))
    return [mindspore, cann.parent]


def run_case(seed: Seed, number: int, work: Path) -> list[str]:
    """Build and ingest one case; return the kinds of problem it raised (AssertionError when the oracle fails)."""
    shutil.rmtree(work, ignore_errors=True)
    folder = work / "job"
    folder.mkdir(parents=True)
    seed.write(folder, random.Random(number))
    try:
        job = ingest.ingest(folder, work / "cache", workers=1)
    except cache.JobError as exc:
        raise AssertionError(f"{seed.name} #{number}: the intact rank did not load: {exc}") from exc
    internal = [str(p) for p in job.problems if "internal error" in p.message]
    assert not internal, f"{seed.name} #{number}: {internal}"
    assert job.events().num_rows > 0
    return [problem_kind(p.severity, p.message) for p in job.problems] or ["none"]


def problem_kind(severity: str, message: str) -> str:
    """A problem's message without its numbers, values and file names: what kind of problem it is."""
    text = re.sub(r"^[\w./-]+\.(json|csv|db|gz)(\.gz)?: ", "", message)
    text = re.sub(r"\(.*", "", text)
    text = re.sub(r"'[^']*'|\"[^\"]*\"|\b[\w#.+-]*\d[\w#.+-]*\b", "N", text)
    return f"{severity}: {text.strip()[:90]}"
