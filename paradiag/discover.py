"""Finding the per-rank sources in a job folder and parsing each one (in a worker process)."""

from __future__ import annotations

import contextlib
import errno
import importlib
import os
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import xxhash

from paradiag import schema
from paradiag.parsers.base import Group, ParsedRank, TraceError, release_memory

# Parser modules, most specific first: folder formats are tried before single-file ones.
PARSER_MODULES = (
    "paradiag.parsers.ascend",
    "paradiag.parsers.msprof",
    "paradiag.parsers.mindspore",
    "paradiag.parsers.ascend_legacy",  # recognised to be reported in one line, not read
    "paradiag.parsers.kineto",
)
# Files in a job folder that are not traces of a rank (profiler metadata outside a rank folder, our ground truth).
NOT_TRACES = frozenset(
    {"ground_truth.json", "manifest.json", "README.md", "profiler_metadata.json", "paradiag_run.json"}
)
# Folders of results derived from traces (msprof-analyze's output), not traces themselves.
DERIVED_FOLDERS = frozenset({"cluster_analysis_output"})
# How a parser's TraceError begins for valid JSON that holds no trace (parsers.kineto): a stray file, a warning.
NOT_A_TRACE = "not a PyTorch profiler trace"
ROW_GROUP_ROWS = 128 * 1024
PARQUET_COMPRESSION = (
    "lz4"  # decodes ~1.5x faster than zstd for ~40% more disk: the cache is read far more than written
)
# Row-group statistics only where reads filter (Job.events on start_ns; step ranges): on every column (names'
# min/max strings included) they took half of the write time.
STATISTICS = ["start_ns", "step"]
# Parquet dictionary pages only for the dictionary columns: by default Parquet tries one on every column, hashing
# every number of the events (half of the write); plain numbers compress smaller with lz4 (a 200k-event rank:
# write 39 -> 18 ms, read 15 -> 10 ms, 3.6 -> 2.9 MB).
EVENT_DICTIONARIES = [f.name for f in schema.EVENTS if pa.types.is_dictionary(f.type)]


def parsers() -> list[ModuleType]:
    """The parser modules of this build (a missing optional one is skipped)."""
    found = []
    for name in PARSER_MODULES:
        try:
            found.append(importlib.import_module(name))
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
    return found


@dataclass(frozen=True)
class Source:
    """One rank's trace: a file or a folder, and the parser that reads it."""

    path: Path
    parser: str  # module name
    files: tuple[Path, ...]  # every file that belongs to the source (for the cache manifest)

    def size(self) -> int:
        total = 0
        for f in self.files:
            with contextlib.suppress(OSError):  # gone since discovery: its parser says so
                total += f.stat().st_size
        return total


def _is_hidden(path: Path) -> bool:
    return path.name.startswith(".")


def unreadable(path: Path) -> str | None:
    """Why ``path`` cannot be read (a broken or looping symbolic link, no permission), or None."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return (
            "a broken symbolic link (its target does not exist)"
            if path.is_symlink()
            else "the file disappeared"
        )
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link loop"
        return f"cannot be read ({exc.strerror or exc})"
    if not os.access(path, os.R_OK):
        return "cannot be read (permission denied)"
    return None


def _walk_error(root: Path, skipped: list[tuple[Path, str]]) -> Callable[[OSError], None]:
    def note(exc: OSError) -> None:
        path = Path(exc.filename) if exc.filename else root
        skipped.append((path, f"folder cannot be read ({exc.strerror or exc}); its files were skipped"))

    return note


def _folder_files(folder: Path, skipped: list[tuple[Path, str]]) -> tuple[Path, ...]:
    """The readable files under a source folder; the others are noted in ``skipped``."""
    files = []
    for dirpath, _, filenames in os.walk(folder, onerror=_walk_error(folder, skipped)):
        for name in filenames:
            path = Path(dirpath) / name
            why = unreadable(path)
            if why is None:
                files.append(path)
            else:
                skipped.append((path, why))
    return tuple(sorted(files))


def discover(root: Path, skipped: list[tuple[Path, str]] | None = None) -> tuple[list[Source], list[Path]]:
    """Sources under ``root`` (a folder or one trace file), and the other files found (not traces). Files and
    folders that cannot be read are left out and, with the reason, appended to ``skipped``."""
    skipped = [] if skipped is None else skipped
    modules = parsers()
    if root.is_file():
        for module in modules:
            if module.detect(root):
                return [Source(root, module.__name__, (root,))], []
        return [], [root]
    owner = next((m for m in modules if m.detect(root)), None)
    if owner is not None:  # one rank's folder (``*_ascend_pt``, ``PROF_*``): a one-rank job
        return [Source(root, owner.__name__, tuple(sorted(p for p in root.rglob("*") if p.is_file())))], []
    sources: list[Source] = []
    others: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=_walk_error(root, skipped)):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if not _is_hidden(Path(d)) and d not in DERIVED_FOLDERS)
        kept = []
        for d in dirnames:
            sub = here / d
            owner = next((m for m in modules if m.detect(sub)), None)
            if owner is None:
                kept.append(d)
            else:
                sources.append(Source(sub, owner.__name__, _folder_files(sub, skipped)))
        dirnames[:] = kept
        for name in sorted(filenames):
            path = here / name
            if _is_hidden(path):
                continue
            why = unreadable(path)
            if why is not None:
                skipped.append((path, why))
                continue
            owner = None
            if name not in NOT_TRACES and not name.startswith(("profiler_info_", "parallel_strategy_")):
                owner = next((m for m in modules if m.detect(path)), None)
            if owner is None:
                others.append(path)
            else:
                sources.append(Source(path, owner.__name__, (path,)))
    return sources, others


@dataclass
class SourceResult:
    """What a worker sends back: everything but the events, which it wrote to Parquet."""

    source: str
    parser: str
    error: str | None = None
    parsed: ParsedRank | None = None  # events replaced by an empty table
    events_file: str | None = None
    num_events: int = 0
    min_start_ns: int | None = None
    max_end_ns: int | None = None
    max_dur_ns: int = 0
    comm: pa.Table | None = None  # device collectives, for clock alignment
    extra_files: dict[str, str] = field(default_factory=dict)
    file_hashes: dict[str, str] = field(default_factory=dict)  # path -> xxh3-128 of each file of the source
    not_trace: bool = False  # the file is valid JSON of another kind (a stray file, not a broken trace)


COMM_COLUMNS = ("collective", "group", "group_ranks", "peer", "step", "seq", "start_ns", "dur_ns")


def file_hash(path: Path) -> str:
    """The file's xxh3-128, read into one reused buffer: a new bytes object per block cost as much as the hash."""
    h = xxhash.xxh3_128()
    block = bytearray(1024 * 1024)
    with open(path, "rb", buffering=0) as f, memoryview(block) as view:
        while size := f.readinto(block):
            h.update(view[:size])
    return h.hexdigest()


def parse_source(source: Source, root: Path, out_dir: Path, index: int) -> SourceResult:
    """Parse one source and write its events (sorted by start time) to ``out_dir``; never raises. The source's
    files are hashed here too (for the cache manifest), in parallel with the other workers."""
    return parse_and_keep(source, root, out_dir, index, ())[0]


def parse_and_keep(
    source: Source, root: Path, out_dir: Path, index: int, columns: Sequence[str]
) -> tuple[SourceResult, pa.Table | None]:
    """parse_source, and ``columns`` of the events it wrote (sorted, as written; None when nothing was): the
    per-rank analysis runs on them where they are, instead of decoding them back from the Parquet part. They are
    columns of the table that was written, so they cost no memory beyond what the write held already."""
    shown = str(source.path.relative_to(root)) if source.path != root else source.path.name
    result = SourceResult(source=shown, parser=source.parser)
    with contextlib.suppress(OSError):
        result.file_hashes = {str(f): file_hash(f) for f in source.files}
    try:
        module = importlib.import_module(source.parser)
        parsed: ParsedRank = module.parse(
            source.path, root if root.is_dir() and source.path != root else root.parent
        )
    except TraceError as exc:  # named by the file inside a folder source that has the problem
        inner = exc.source.removeprefix(shown + os.sep) if exc.source.startswith(shown + os.sep) else None
        result.error = f"{inner}: {exc.problem}" if inner else exc.problem
        result.not_trace = exc.problem.startswith(NOT_A_TRACE)
        return result, None
    except MemoryError:
        result.error = "out of memory while parsing"
        return result, None
    except OSError as exc:  # the file went away or became unreadable after discovery, a disk error
        name = Path(exc.filename).name if exc.filename else shown
        result.error = f"cannot read {name} ({exc.strerror or exc})"
        return result, None
    except Exception as exc:  # a parser bug must not take the rest of the folder down
        result.error = f"internal error while parsing ({type(exc).__name__}: {exc}); please report it"
        result.error += "\n" + traceback.format_exc(limit=3)
        return result, None
    _check_ranges(parsed)
    release_memory()  # what the parse freed, before the events are sorted and written
    events = parsed.events
    order = pc.sort_indices(events, sort_keys=[("start_ns", "ascending")])
    events = events.take(order)
    parsed.events = events.schema.empty_table()  # the unsorted copy goes now, not after the write
    name = f"part-{index:05d}.parquet"
    (out_dir / "events").mkdir(parents=True, exist_ok=True)
    pq.write_table(
        events,
        out_dir / "events" / name,
        row_group_size=ROW_GROUP_ROWS,
        compression=PARQUET_COMPRESSION,
        write_statistics=STATISTICS,
        use_dictionary=EVENT_DICTIONARIES,
    )
    for key, table in parsed.extra.items():
        (out_dir / "extra" / key).mkdir(parents=True, exist_ok=True)
        pq.write_table(table, out_dir / "extra" / key / name, compression=PARQUET_COMPRESSION)
        result.extra_files[key] = f"extra/{key}/{name}"
    result.events_file = f"events/{name}"
    result.num_events = events.num_rows
    if events.num_rows:
        _time_range(result, events)
    is_comm = schema.in_values(events.column("kind"), [schema.COMMUNICATION]) & (
        events.column("device").to_numpy() >= 0
    )
    result.comm = events.filter(pa.array(is_comm)).select(list(COMM_COLUMNS))
    parsed.extra = {}
    result.parsed = parsed
    kept = events.select(list(columns)) if columns else None
    del events
    release_memory()  # the columns of the written events that are not kept
    return result, kept


def _time_range(result: SourceResult, events: pa.Table) -> None:
    start = events.column("start_ns").to_numpy()
    dur = events.column("dur_ns").to_numpy()
    result.min_start_ns = int(start.min())
    result.max_end_ns = int((start + dur).max())
    result.max_dur_ns = int(dur.max())


# What the ranks table can hold: a parser's value outside these is dropped with a warning, not a failed job.
_RANGES = {"rank": (0, 2**31 - 1), "world_size": (1, 2**31 - 1), "device": (0, 2**15 - 1)}
_PARALLEL_RANGE = (0, 2**15 - 1)


def _check_ranges(parsed: ParsedRank) -> None:
    for name, (lo, hi) in _RANGES.items():
        value = getattr(parsed, name)
        if value is not None and not (isinstance(value, int) and lo <= value <= hi):
            parsed.warnings.append(f"{name} {str(value)[:40]} is out of range; ignored")
            setattr(parsed, name, None)
    for axis, value in list(parsed.parallel.items()):
        if not (isinstance(value, int) and _PARALLEL_RANGE[0] <= value <= _PARALLEL_RANGE[1]):
            parsed.warnings.append(f"{axis} coordinate {str(value)[:40]} is out of range; ignored")
            del parsed.parallel[axis]
    parsed.groups = [g for g in parsed.groups if all(isinstance(r, int) and 0 <= r < 2**31 for r in g.ranks)]


def group_table(reported: dict[int, list[Group]], stated: Sequence[Group] = ()) -> pa.Table:
    """The ``groups`` table from the groups every rank reported (rank -> its groups; first description wins).
    A group whose members no trace lists (HCCL without metadata) gets the ranks that reported it, but only when
    all its members were profiled (their number is the group's size); otherwise its member list stays empty.
    ``stated``: the groups of the job's run manifest (global members, paradiag.run_manifest): one a rank reported
    (same id) gets their members if it lists fewer; one that no rank reported under its id or its description
    and members (a DeviceMesh slice named ``mesh_dp[0,2]``) is added."""
    merged: dict[str, Group] = {}
    reporters: dict[str, set[int]] = {}
    for rank, groups in reported.items():
        for g in groups:
            reporters.setdefault(g.group, set()).add(rank)
            known = merged.get(g.group)
            if known is None:
                merged[g.group] = Group(g.group, list(g.ranks), g.description, g.backend, g.size)
            elif len(g.ranks) > len(known.ranks):
                known.ranks = list(g.ranks)
    for name, g in merged.items():
        if not g.ranks and g.size is not None and len(reporters[name]) == g.size:
            g.ranks = sorted(reporters[name])
    seen = {(g.description, tuple(sorted(g.ranks))) for g in merged.values()}
    for g in stated:
        known = merged.get(g.group)
        if known is not None:
            if len(known.ranks) < len(g.ranks):
                known.ranks = list(g.ranks)
            known.description = known.description or g.description
        elif (g.description, tuple(sorted(g.ranks))) not in seen:
            merged[g.group] = Group(g.group, list(g.ranks), g.description)
    rows = sorted(merged.values(), key=lambda g: (len(g.ranks), g.group))
    return schema.build(
        schema.GROUPS,
        {
            "group": [g.group for g in rows],
            "description": [g.description for g in rows],
            "backend": [g.backend for g in rows],
            "ranks": [g.ranks for g in rows],
        },
        len(rows),
    )


def as_int_list(values: Any) -> list[int]:
    return [int(v) for v in np.asarray(values).tolist()]
