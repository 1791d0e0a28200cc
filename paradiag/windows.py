"""Profiling windows: which of a folder's trace files belong together, and which belong to an older run.

A job folder may hold several *windows* of one run (each ``torch.profiler`` cycle when ``repeat > 1``, torchtitan's
``iteration_N/`` folders, paradiag.torch's ``rank{R}.window{W}.pt.trace.json``) and files of older runs (a rerun
into the same folder). A window is one file per rank profiled together; a job is opened for one window (the latest
by default). Windows are found, in this order, from:

1. folder names (``iteration_10/``, ``window_2/``, ``step-100/``): every folder is a window;
2. file names ``...window{W}...`` (``rank3.window1.pt.trace.json``);
3. otherwise the content, when a rank has several files in one folder (``tensorboard_trace_handler``'s
   ``{worker}.{time_ns}.pt.trace.json``): each file's process id, host, ``ProfilerStep`` numbers and wall-clock
   start are read (a text scan, no parse). Within one run the process stays and the step numbers go on from cycle
   to cycle; a rerun is a new process whose steps start again. The files of a rank split into runs there; the
   latest run is the one whose files start last (on the wall clock; the last of each rank without one), and the
   others are set aside with a warning naming them. The latest run's files are grouped into windows by their step
   numbers (the ranks of one run profile the same steps), or else by their start times.

With a run manifest (paradiag_run.json, written at the start of a run), a file that starts before the run did
is from an older run and is set aside too. File names alone decide nothing about runs.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import statistics
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paradiag.discover import Source
from paradiag.parsers.base import MAX_RANK, rank_from_name

FOLDER_WINDOW = re.compile(r"^(?:iteration|iter|window|step|cycle)[_-]?(\d+)$", re.IGNORECASE)
NAME_WINDOW = re.compile(r"(?:^|[._-])window[_-]?(\d+)(?=[._-])", re.IGNORECASE)
TB_NAME = re.compile(
    r"^(?P<worker>.+)\.(?P<time>\d{16,})\.pt\.trace\.json(?:\.gz)?$"
)  # tensorboard_trace_handler
DEFAULT_WORKER = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)$")  # its default worker name: {hostname}_{pid}
HEAD_BYTES = (
    256 * 1024
)  # the metadata Kineto writes before traceEvents (distributedInfo, baseTimeNanoseconds)
CHUNK = 8 * 1024 * 1024
EPOCH_US = 1e14  # timestamps beyond this (about 1973 in microseconds) are on the wall clock
KINETO = "paradiag.parsers.kineto"
_UNREADABLE = (
    OSError,
    EOFError,
    zlib.error,
    ValueError,
)  # a peek never fails: the file's parse names its problem

_RANK = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*(\d+)\s*[,}]')
_WORLD = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"world_size"\s*:\s*(\d+)\s*[,}]')
_BASE = re.compile(rb'"baseTimeNanoseconds"\s*:\s*(\d+)')
_HOST = re.compile(rb'"host_name"\s*:\s*"([^"\\]{1,200})"')
_EVENTS = re.compile(rb'"traceEvents"\s*:\s*\[')
_TS = re.compile(rb'"ts"\s*:\s*(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)')
_PID = re.compile(rb'"pid"\s*:\s*(\d+)\s*,')
_STEP = re.compile(rb'"ProfilerStep#(\d+)"')


@dataclass
class Peek:
    """What a text scan of one Kineto file tells of the run it belongs to (None: not known)."""

    rank: int | None = None
    world_size: int | None = None
    host: str | None = None
    pid: int | None = None
    start_ns: int | None = None  # wall clock
    end_ns: int | None = None  # wall clock: the last event's start (a full peek only)
    steps: tuple[int, ...] = ()
    name_ns: int | None = None  # the time in a tensorboard_trace_handler file name
    first_ts: bytes | None = None  # the first event's timestamp as written
    mtime_ns: int = 0


@dataclass
class Window:
    """One profiling window of the job: a file (source) per rank."""

    index: int
    label: str
    sources: list[Source]
    steps: tuple[int, ...] = ()
    start_ns: int | None = None

    def describe(self, root: Path) -> dict[str, Any]:
        base = root if root.is_dir() else root.parent
        files = sorted(str(s.path.relative_to(base)) if s.path != base else s.path.name for s in self.sources)
        return {
            "index": self.index,
            "label": self.label,
            "steps": list(self.steps),
            "start_ns": self.start_ns,
            "files": files,
        }


@dataclass
class Plan:
    """The windows of a folder (oldest first) and the files set aside (older runs, outside every window)."""

    windows: list[Window]
    set_aside: list[tuple[Source, str]] = field(default_factory=list)  # (source, why)
    notes: list[str] = field(default_factory=list)  # warnings on the whole folder

    def pick(self, window: int | None) -> Window:
        """The window ``window`` (its index), the latest when None; ValueError when there is none such."""
        if window is None:
            return self.windows[-1]
        if not 0 <= window < len(self.windows):
            count = len(self.windows)
            which = "only window 0" if count == 1 else f"windows 0-{count - 1}"
            raise ValueError(f"no window {window}: the job has {which}")
        return self.windows[window]


def plan(root: Path, sources: Sequence[Source], run_started_ns: int | None = None) -> Plan:
    """The windows of ``sources`` (every source of the folder ``root``)."""
    if not sources:
        return Plan([Window(0, "all", [])])
    base = root if root.is_dir() else root.parent
    set_aside: list[tuple[Source, str]] = []
    if run_started_ns is not None:
        sources = _after(sources, run_started_ns, set_aside)
    keyed = {s: _key(s, base) for s in sources}
    if any(k is not None for k in keyed.values()):
        result = _keyed(base, keyed, set_aside)
    else:
        result = _by_content(base, list(sources), set_aside)
    return result


def _after(sources: Sequence[Source], started_ns: int, set_aside: list[tuple[Source, str]]) -> list[Source]:
    """The sources that did not start before the run manifest's run (the others are set aside)."""
    kept = []
    for s in sources:
        peek = head_peek(s) if s.parser == KINETO else None
        if peek is not None and peek.start_ns is not None and peek.start_ns < started_ns:
            set_aside.append((s, "profiled before the run that paradiag_run.json describes (an older run)"))
        else:
            kept.append(s)
    return kept


def _key(source: Source, base: Path) -> tuple[str, int, str] | None:
    """(folder, number, label) of the window a folder or file name states, or None."""
    rel = source.path.relative_to(base) if source.path != base else Path(source.path.name)
    parts = rel.parts[:-1]  # the folders above the file (or the rank's folder)
    for i in range(len(parts) - 1, -1, -1):
        match = FOLDER_WINDOW.match(parts[i])
        if match:
            folder = str(Path(*parts[: i + 1]))
            return str(Path(*parts[:i])), int(match.group(1)), folder
    match = NAME_WINDOW.search(rel.name)
    if match:
        folder = str(rel.parent)
        return (
            folder,
            int(match.group(1)),
            f"window {int(match.group(1))}" + ("" if folder == "." else f" of {folder}"),
        )
    return None


def _keyed(
    base: Path, keyed: dict[Source, tuple[str, int, str] | None], set_aside: list[tuple[Source, str]]
) -> Plan:
    windows: dict[tuple[int, str], list[Source]] = {}
    labels: dict[tuple[int, str], str] = {}
    for source, key in keyed.items():
        if key is None:
            set_aside.append(
                (source, "outside every profiling window (the folder's windows are named by folder or file)")
            )
            continue
        folder, number, label = key
        windows.setdefault((number, folder), []).append(source)
        labels[(number, folder)] = label
    found = []
    for i, at in enumerate(sorted(windows)):
        members = windows[at]
        first = head_peek(members[0]) if members[0].parser == KINETO else None
        found.append(Window(i, labels[at], members, (), first.start_ns if first else None))
    return Plan(found, set_aside)


def _who(source: Source, peek: Peek) -> str:
    """Which rank (or, without one, which process) a file is of."""
    if peek.rank is not None:
        return f"rank {peek.rank}"
    named = rank_from_name(source.path)
    if named is not None:
        return f"rank {named}"
    tb = TB_NAME.match(source.path.name)
    return f"worker {tb.group('worker')}" if tb else f"file {source.path}"


def _by_content(base: Path, sources: list[Source], set_aside: list[tuple[Source, str]]) -> Plan:
    peeks = {s: head_peek(s) if s.parser == KINETO else Peek() for s in sources}
    by_who: dict[str, list[Source]] = {}
    for s in sources:
        by_who.setdefault(_who(s, peeks[s]), []).append(s)
    if all(len(files) == 1 for files in by_who.values()):
        return Plan([Window(0, "all", sources, (), _earliest(peeks.values()))], set_aside)
    for s in sources:  # a rank has several files: read their process, steps and start
        if s.parser == KINETO:
            full_peek(s, peeks[s])
    segments = {who: _runs([(s, peeks[s]) for s in files]) for who, files in by_who.items()}
    latest = _latest_run(segments, peeks)
    kept: list[tuple[str, list[Source]]] = []
    for who, runs in segments.items():
        chosen = latest.get(who)
        if chosen is None:
            for run in runs:
                set_aside.extend((s, _older_why(who)) for s in run)
            continue
        for i, run in enumerate(runs):
            if i != chosen:
                set_aside.extend((s, _older_why(who)) for s in run)
        kept.append((who, runs[chosen]))
    windows = _cycles(kept, peeks)
    notes = []
    if set_aside:
        names = ", ".join(sorted(_shown(s.path, base) for s, _ in set_aside)[:6]) + (
            ", ..." if len(set_aside) > 6 else ""
        )
        notes.append(
            f"{len(set_aside)} file(s) of an older profiling run in the same folder were set aside: {names}"
        )
    return Plan(windows, set_aside, notes)


def _older_why(who: str) -> str:
    return f"an older profiling run of {who} (another process, or its steps start again); the latest run is analysed"


def _earliest(peeks: Any) -> int | None:
    starts = [p.start_ns for p in peeks if p.start_ns is not None]
    return min(starts) if starts else None


def _order(item: tuple[Source, Peek]) -> tuple[int, int, int, str]:
    source, peek = item
    return (peek.start_ns or 0, peek.name_ns or 0, peek.mtime_ns, source.path.name)


def _runs(files: list[tuple[Source, Peek]]) -> list[list[Source]]:
    """One rank's (or process's) files split into runs, oldest first. Consecutive files are one run unless their
    processes or hosts differ, or the steps start again; a copy (same steps, same start, same process) stays
    with its original (the ranks' assignment then names both)."""
    timed = all(p.start_ns is not None for _, p in files)
    ordered = sorted(files, key=_order if timed else lambda f: (0, *_order(f)[1:]))
    runs: list[list[Source]] = []
    prev: Peek | None = None
    for source, peek in ordered:
        if prev is None or _new_run(prev, peek):
            runs.append([])
        runs[-1].append(source)
        prev = peek
    return runs


def _new_run(prev: Peek, peek: Peek) -> bool:
    if prev.pid is not None and peek.pid is not None and prev.pid != peek.pid:
        return True
    if prev.host is not None and peek.host is not None and prev.host != peek.host:
        return True
    if prev.steps and peek.steps and peek.steps == prev.steps and peek.start_ns == prev.start_ns:
        return False  # the same window twice: a copy
    return bool(prev.steps and peek.steps and min(peek.steps) <= max(prev.steps))


def _latest_run(segments: dict[str, list[list[Source]]], peeks: dict[Source, Peek]) -> dict[str, int | None]:
    """who -> the index of its run that belongs to the latest run of the job (None: it has none). On the wall clock,
    the latest run begins about when the last of the ranks' last runs does: a rank's last run that ended (its last
    file began) more than a cycle before that belongs to an older run. Without a wall clock, each one's last run."""
    last = {who: runs[-1] for who, runs in segments.items()}
    starts = {who: [peeks[s].start_ns for s in run] for who, run in last.items()}
    if not all(t is not None for ts in starts.values() for t in ts):
        return {who: len(runs) - 1 for who, runs in segments.items()}
    begin = max(min(t for t in ts if t is not None) for ts in starts.values())
    durations = [
        p.end_ns - p.start_ns
        for run in last.values()
        for p in (peeks[s] for s in run)
        if p.end_ns is not None and p.start_ns is not None
    ]
    margin = statistics.median(durations) if durations else 10**9
    chosen: dict[str, int | None] = {}
    for who, runs in segments.items():
        ends = [peeks[s].start_ns or 0 for s in runs[-1]]
        chosen[who] = len(runs) - 1 if max(ends) >= begin - margin else None
    return chosen


def _cycles(kept: list[tuple[str, list[Source]]], peeks: dict[Source, Peek]) -> list[Window]:
    """The latest run's files grouped into windows: files whose step numbers meet are one window (the ranks of a
    run profile the same steps); without step numbers, by the order of each rank's files."""
    files = [(who, i, s) for who, run in kept for i, s in enumerate(run)]
    if all(peeks[s].steps for _, _, s in files):
        groups: list[tuple[set[int], list[Source]]] = []
        for _, _, s in files:
            steps = set(peeks[s].steps)
            meeting = [g for g in groups if g[0] & steps]
            merged = (steps.union(*(g[0] for g in meeting)), [s, *(m for g in meeting for m in g[1])])
            groups = [g for g in groups if not g[0] & steps] + [merged]
        ordered = sorted(groups, key=lambda g: min(g[0]))
        windows = []
        for i, (steps, members) in enumerate(ordered):
            label = f"steps {min(steps)}-{max(steps)}" if len(steps) > 1 else f"step {min(steps)}"
            windows.append(
                Window(
                    i,
                    label,
                    sorted(members, key=lambda s: str(s.path)),
                    tuple(sorted(steps)),
                    _earliest(peeks[m] for m in members),
                )
            )
        return windows
    by_position: dict[int, list[Source]] = {}
    for _, i, s in files:
        by_position.setdefault(i, []).append(s)
    return [
        Window(i, f"cycle {i}", by_position[i], (), _earliest(peeks[m] for m in by_position[i]))
        for i in sorted(by_position)
    ]


def _shown(path: Path, base: Path) -> str:
    return str(path.relative_to(base)) if path.is_relative_to(base) and path != base else path.name


# --- reading a Kineto file's identity without parsing it ---------------------------------------------------------


def _chunks(path: Path, limit: int | None = None) -> Iterator[bytes]:
    opener: Any = gzip.open if path.name.endswith(".gz") else open
    read = 0
    with opener(path, "rb") as f:
        while limit is None or read < limit:
            block = f.read(CHUNK if limit is None else min(CHUNK, limit - read))
            if not block:
                return
            read += len(block)
            yield block


def head_peek(source: Source) -> Peek:
    """Rank, world size, host and wall-clock start from the head of a Kineto file (its first 256 KB), and the
    time its name states; an unreadable file gives what its name says (its parse names the problem)."""
    path = source.path
    peek = Peek()
    tb = TB_NAME.match(path.name)
    if tb:
        peek.name_ns = int(tb.group("time"))
        worker = DEFAULT_WORKER.match(tb.group("worker"))
        if worker and int(worker.group("pid")) <= MAX_RANK:
            peek.pid = int(worker.group("pid"))
    with contextlib.suppress(OSError):
        peek.mtime_ns = os.stat(path).st_mtime_ns
    head = b""
    with contextlib.suppress(*_UNREADABLE):
        head = b"".join(_chunks(path, HEAD_BYTES))
    events = _EVENTS.search(head)
    meta = head[: events.start()] if events else head
    peek.rank = _small_int(_RANK.search(meta))
    peek.world_size = _small_int(_WORLD.search(meta))
    host = _HOST.search(meta)
    peek.host = host.group(1).decode(errors="replace") if host else None
    base = _small_int(_BASE.search(meta), 2**62)
    if base is None and not path.name.endswith(
        ".gz"
    ):  # written after the events (older Kineto, other writers)
        base = _tail_base(path)
    if events:
        ts = _TS.search(head, events.end())
        if ts:
            peek.first_ts = ts.group(1)
            peek.start_ns = _wall_ns(ts.group(1), base)
    return peek


def _tail_base(path: Path) -> int | None:
    with contextlib.suppress(*_UNREADABLE), open(path, "rb") as f:
        f.seek(max(0, os.stat(path).st_size - 64 * 1024))
        return _small_int(_BASE.search(f.read()), 2**62)
    return None


def full_peek(source: Source, peek: Peek) -> None:
    """``peek`` completed from the whole file: its process id (the first event's, when the name does not say),
    its ProfilerStep numbers, and its last event's start as its end."""
    steps: set[int] = set()
    tail = b""
    pid: int | None = None
    base = None
    try:
        for block in _chunks(source.path):
            text = tail + block
            steps.update(int(m.group(1)) for m in _STEP.finditer(text) if len(m.group(1)) < 10)
            if pid is None and peek.pid is None:
                events = _EVENTS.search(text)
                found = _PID.search(text, events.end() if events else 0)
                pid = int(found.group(1)) if found and len(found.group(1)) < 10 else None
            if base is None:
                base = _small_int(_BASE.search(text), 2**62)
            tail = text[-4096:]
    except _UNREADABLE:
        return
    peek.steps = tuple(sorted(steps))
    if peek.start_ns is None and peek.first_ts is not None:
        peek.start_ns = _wall_ns(peek.first_ts, base)
    if peek.pid is None:
        peek.pid = pid
    stamps = _TS.findall(tail)
    end = _wall_ns(stamps[-1], base) if stamps else None
    peek.end_ns = end if end is not None and peek.start_ns is not None and end >= peek.start_ns else None


def _small_int(match: re.Match[bytes] | None, limit: int = MAX_RANK) -> int | None:
    if match is None or len(match.group(1)) > 19:
        return None
    value = int(match.group(1))
    return value if value <= limit else None


def _wall_ns(text: bytes, base: int | None) -> int | None:
    """A Kineto timestamp (microseconds) as wall-clock nanoseconds, or None when the trace's clock is relative."""
    try:
        us = float(text)
    except ValueError:
        return None
    if base is not None:
        return base + int(us * 1000)
    return int(us * 1000) if us > EPOCH_US else None
