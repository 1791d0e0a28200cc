"""A job: the canonical tables of a trace folder, parsed once and cached as Parquet.

Cache layout (one folder per job)::

    manifest.json             written last: source files (size, mtime, hash), versions, sources, problems
    ranks.parquet             one row per rank, with the clock offset applied on load
    steps.parquet             per rank and step, on the aligned clock
    groups.parquet            communication groups
    events/part-NNNNN.parquet one file per rank, rows sorted by start time (rank's own clock)
    extra/<table>/part-NNNNN.parquet   format-specific tables (e.g. NPU link traffic)
    analysis/<table>/part-NNNNN.arrow  the per-rank part of the analysis (diagnose.rank_tables), computed where
                              the rank was parsed (by the analysis version the manifest names), Arrow IPC files
    diagnosis/                the analysis of the job (paradiag.analysis.diagnosis_types), computed at ingest
    strategy.parquet, .json   side inputs found beside the traces (paradiag.side_inputs)

A cache is built in a temporary sibling folder and renamed into place, so a killed ingest never leaves a
folder that opens as a valid cache. Nothing is ever written inside the source folder. The ranks are parsed in
this process, in a pool of local worker processes, or on a Dask cluster (paradiag.distributed), whose workers
write into the same temporary folder (on storage they all reach); this process alone renames it.

Below this module: ``paradiag.cache`` (the cache's format, versions, folders, scratch names, JobError) and
``paradiag.parse_worker`` (the parse of one source, wherever it runs); ``paradiag.remote`` (a cache at a URL) and
``paradiag.distributed`` (Dask) stand on those, not on this module. Their names are read here as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import hashlib
import importlib
import json
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from multiprocessing import get_context
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from paradiag import __version__, align, remote, run_manifest, safepath, schema, windows
from paradiag.cache import (  # the cache's names, read here as before
    CACHE_FORMAT as CACHE_FORMAT,
)
from paradiag.cache import (
    MANIFEST as MANIFEST,
)
from paradiag.cache import (
    PARSER_VERSION as PARSER_VERSION,
)
from paradiag.cache import (
    JobError as JobError,
)
from paradiag.cache import (
    alive as alive,
)
from paradiag.cache import (
    cache_dir_for as cache_dir_for,
)
from paradiag.cache import (
    cached_window as cached_window,
)
from paradiag.cache import (
    default_cache_root as default_cache_root,
)
from paradiag.cache import (
    is_cache as is_cache,
)
from paradiag.cache import (
    remove_stale as remove_stale,
)
from paradiag.cache import (
    scratch_name as scratch_name,
)
from paradiag.cache import (
    window_cache as window_cache,
)
from paradiag.cache import (
    window_url as window_url,
)
from paradiag.discover import (
    PARSER_MODULES,
    Source,
    SourceResult,
    discover,
    file_hash,
    group_table,
)
from paradiag.parse_worker import (  # the map's names, read here as before
    FRAMES as FRAMES,
)
from paradiag.parse_worker import (
    IN_PROCESS_BYTES as IN_PROCESS_BYTES,
)
from paradiag.parse_worker import (
    Parsed as Parsed,
)
from paradiag.parse_worker import (
    ProgressCallback as ProgressCallback,
)
from paradiag.parse_worker import (
    failed_parse as failed_parse,
)
from paradiag.parse_worker import (
    largest_first as largest_first,
)
from paradiag.parse_worker import (
    parse_and_upload as parse_and_upload,
)
from paradiag.parse_worker import (
    parse_in_worker as parse_in_worker,
)
from paradiag.parse_worker import (
    parse_rank as parse_rank,
)
from paradiag.parse_worker import (
    part_files as part_files,
)
from paradiag.parsers.base import ParsedRank, rank_from_name
from paradiag.side_inputs import store_side_inputs

if TYPE_CHECKING:
    from paradiag.analysis.diagnosis_types import Diagnosis
    from paradiag.frames import Frames


@dataclass
class Problem:
    """Something wrong with one source: ``error`` means it was skipped, ``warning`` that it loaded anyway."""

    source: str
    severity: str
    message: str

    def __str__(self) -> str:
        return f"{self.severity}: {self.source}: {self.message}"


def _holds(manifest: dict[str, Any], window: int | None) -> bool:
    """Whether a cache of ``manifest`` is the one asked for ``window`` (None: the latest)."""
    index, asked = cached_window(manifest)
    return asked is None if window is None else window in (index, asked) or (index is None and window == 0)


def _stat_entry(path: Path, root: Path) -> dict[str, Any]:
    st = path.stat()
    rel = str(path.relative_to(root)) if path != root else path.name
    return {"path": rel, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _source_files(root: Path, sources: Sequence[Source], others: Sequence[Path]) -> list[Path]:
    files = {f for s in sources for f in s.files} | set(others)
    return sorted(files)


def _is_current(manifest: dict[str, Any], root: Path, verify: bool = False) -> bool:
    """Whether the cached source files are exactly those in ``root`` now. A file whose size and mtime are
    unchanged is taken as unchanged (hashed only when its mtime differs), unless ``verify`` hashes every file:
    a rewrite that keeps both (a copy with ``cp -p`` or ``rsync -t`` of other content) is only noticed then."""
    if manifest.get("format") != CACHE_FORMAT or manifest.get("parser_version") != PARSER_VERSION:
        return False
    if manifest.get("schema_version") != schema.SCHEMA_VERSION:
        return False
    sources, others = discover(root)
    now = _source_files(root, sources, others)
    cached = {f["path"]: f for f in manifest.get("files", [])}
    if len(now) != len(cached):
        return False
    base = root if root.is_dir() else root.parent
    for path in now:
        entry = _stat_entry(path, base)
        old = cached.get(entry["path"])
        if old is None or old["size"] != entry["size"]:
            return False
        if (verify or old["mtime_ns"] != entry["mtime_ns"]) and old["hash"] != file_hash(path):
            return False
    return True


@dataclass
class Job:
    """A parsed job. Tables are Arrow; ``events()`` reads the per-rank Parquet parts lazily."""

    cache_dir: Path
    manifest: dict[str, Any]
    ranks: pa.Table
    steps: pa.Table
    groups: pa.Table
    problems: list[Problem] = field(default_factory=list)
    _events: pa.Table | None = field(default=None, repr=False)
    _diagnosis: Diagnosis | None = field(default=None, repr=False)
    # rank -> its per-rank analysis tables, as the ingest that built the job got them (nothing to read back)
    _rank_tables: dict[int, dict[str, pa.Table]] = field(default_factory=dict, repr=False)
    _sources: dict[int, dict[str, Any]] | None = field(default=None, repr=False)  # rank -> manifest entry
    _offsets: dict[int, int] | None = field(default=None, repr=False)  # rank -> clock offset
    url: str | None = (
        None  # the URL of a cache at a URL (without userinfo); cache_dir is then its local mirror
    )
    # rank -> the file of its device events' frame, as the ingest that built the job got it from the map (in the
    # ingest's temporary folder: removed before the cache is moved into place)
    _work_frames: dict[int, Path] = field(default_factory=dict, repr=False)

    def diagnosis(self) -> Diagnosis:
        """The analysis of the job: stored in the cache at ingest, read on first use."""
        if self._diagnosis is None:
            from paradiag.analysis.diagnose import stored_or_computed

            self._diagnosis = stored_or_computed(self)
        return self._diagnosis

    @property
    def frames(self) -> Frames:
        """pandas DataFrames of the job's tables and Diagnosis (needs ``paradiag[pandas]``)."""
        from paradiag.frames import Frames

        return Frames(self)

    @property
    def source(self) -> str:
        return str(self.manifest.get("source", ""))

    @property
    def window(self) -> int:
        """The profiling window this job holds (index into :attr:`windows`)."""
        return cached_window(self.manifest)[0] or 0

    @property
    def windows(self) -> list[dict[str, Any]]:
        """Every profiling window of the job's folder, oldest first: index, label, steps (when read), start_ns
        (wall clock, when known) and files; open another with ``paradiag.open(path, window=N)``."""
        return list(
            self.manifest.get("windows")
            or [
                {
                    "index": 0,
                    "label": "all",
                    "steps": [],
                    "start_ns": None,
                    "files": [s["source"] for s in self.manifest["sources"]],
                }
            ]
        )

    @property
    def content_hash(self) -> str:
        """Identifies the job's content (the source files' hashes): equal folders share cached work."""
        return str(self.manifest["content_hash"])

    @property
    def rank_ids(self) -> list[int]:
        return [int(r) for r in self.ranks.column("rank").to_pylist()]

    def by_rank(self, column: str) -> dict[int, Any]:
        """rank -> its value in the ranks table's ``column`` (host, device_type, clock_offset_ns, ...)."""
        return dict(
            zip(self.ranks.column("rank").to_pylist(), self.ranks.column(column).to_pylist(), strict=True)
        )

    def cpu_ranks(self) -> frozenset[int]:
        """The ranks with no device activity, whose compute threads are their device (device type ``cpu``)."""
        return frozenset(r for r, kind in self.by_rank("device_type").items() if kind == "cpu")

    def group_members(self) -> dict[str, list[int]]:
        """Communication group id -> its member ranks."""
        return {
            g: list(m)
            for g, m in zip(
                self.groups.column("group").to_pylist(), self.groups.column("ranks").to_pylist(), strict=True
            )
        }

    def _source_of(self, rank: int) -> dict[str, Any] | None:
        """The manifest's entry of ``rank`` (indexed once: a job of many ranks asks rank by rank)."""
        if self._sources is None:
            self._sources = {s["rank"]: s for s in self.manifest["sources"] if s.get("rank") is not None}
        return self._sources.get(rank)

    def _parts(self, ranks: Iterable[int]) -> dict[int, tuple[str, int, int]]:
        """rank -> (events file, clock offset, longest event) of those of ``ranks`` that have events."""
        if self._offsets is None:
            self._offsets = self.by_rank("clock_offset_ns")
        offsets, found = self._offsets, {r: self._source_of(r) for r in ranks}
        return {
            r: (s["events_file"], int(offsets.get(r, 0)), int(s["max_dur_ns"]))
            for r, s in found.items()
            if s and s.get("events_file")
        }

    def events(
        self,
        ranks: Iterable[int] | None = None,
        start_ns: int | None = None,
        end_ns: int | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """Events of ``ranks`` (all by default) overlapping [start_ns, end_ns) on the aligned clock."""
        if (
            ranks is None
            and start_ns is None
            and end_ns is None
            and columns is None
            and self._events is not None
        ):
            return self._events
        parts = self._parts(self.rank_ids if ranks is None else ranks)
        wanted = sorted(parts) if ranks is None else [r for r in ranks if r in parts]
        tables = [self._read_part(r, *parts[r], start_ns, end_ns, columns) for r in wanted]
        # One dictionary per column across ranks, so that group_by / filters on names work on the whole table.
        table = pa.concat_tables(tables).unify_dictionaries() if tables else schema.empty(schema.EVENTS)
        if columns is not None and not tables:
            table = table.select(list(columns))
        if ranks is None and start_ns is None and end_ns is None and columns is None:
            self._events = table
        return table

    def _read_part(
        self,
        rank: int,
        file: str,
        offset: int,
        max_dur: int,
        start_ns: int | None,
        end_ns: int | None,
        columns: Sequence[str] | None,
    ) -> pa.Table:
        filters: list[tuple[str, str, int]] = []
        if start_ns is not None:
            filters.append(("start_ns", ">=", start_ns - offset - max_dur))
        if end_ns is not None:
            filters.append(("start_ns", "<", end_ns - offset))
        read_cols = None if columns is None else sorted(set(columns) | {"start_ns", "dur_ns"})
        table = pq.read_table(
            self.cache_dir / file, columns=read_cols, filters=filters or None, memory_map=True
        )
        if offset:
            index = table.schema.get_field_index("start_ns")
            start = pc.add(table.column("start_ns"), pa.scalar(offset, pa.int64()))
            table = table.set_column(
                index, table.schema.field(index), start
            )  # keeps the field's not-null flag
        if "rank" in table.column_names:
            table = table.set_column(
                table.schema.get_field_index("rank"),
                "rank",
                pa.array(np.full(table.num_rows, rank, dtype=np.int32)),
            )
        if start_ns is not None:
            table = table.filter(
                pc.greater(pc.add(table.column("start_ns"), table.column("dur_ns")), pa.scalar(start_ns))
            )
        if columns is not None:
            table = table.select(list(columns))
        return table

    def rank_tables(self, rank: int, names: Sequence[str]) -> dict[str, pa.Table] | None:
        """The per-rank analysis tables ``names`` of ``rank`` stored at ingest; None when the cache lacks one or
        another version of the analysis computed them (then they are computed again from the events)."""
        from paradiag.analysis.diagnosis_types import analysis_version

        held = self._rank_tables.get(rank, {})
        if all(name in held for name in names):
            return {name: held[name] for name in names}
        stored: dict[str, str] = (self._source_of(rank) or {}).get("rank_tables", {})
        if self.manifest.get("analysis_version") != analysis_version() or any(
            name not in stored for name in names
        ):
            return None
        return {name: schema.read_arrow_file(self.cache_dir / stored[name]) for name in names}

    def work_frame_file(self, rank: int) -> Path | None:
        """The file of ``rank``'s work frame from the map (paradiag.analysis.diagnose.read_frame), while the ingest
        that parsed it runs; None otherwise (the frame is then built from the events)."""
        return self._work_frames.get(rank)

    def extra(self, name: str) -> pa.Table | None:
        """A format-specific table (e.g. ``links`` from NPU communication matrices), all ranks concatenated."""
        files = [
            (s["rank"], s["extra_files"][name])
            for s in self.manifest["sources"]
            if name in s.get("extra_files", {})
        ]
        if not files:
            return None
        tables = [pq.read_table(self.cache_dir / f) for _, f in files]
        return pa.concat_tables(tables, promote_options="permissive")

    def formats(self) -> list[str]:
        return sorted(set(self.ranks.column("format").cast(pa.string()).to_pylist()))


def _load(cache_dir: Path) -> Job:
    """The cache in ``cache_dir`` as it is. Its manifest is checked first (paradiag.safepath): every file it
    names must lie inside ``cache_dir``, and every entry be of its type, so a crafted or broken manifest is a
    JobError naming what is wrong, never a read elsewhere or a crash later."""
    try:
        manifest = json.loads((cache_dir / MANIFEST).read_text())
        _check_manifest(manifest, cache_dir)
        problems = [
            Problem(str(p["source"]), str(p["severity"]), str(p["message"]))
            for p in manifest.get("problems", [])
        ]
        tables = {
            name: pq.read_table(safepath.inside(cache_dir, f"{name}.parquet"))
            for name in ("ranks", "steps", "groups")
        }
        for name, fields in (("ranks", schema.RANKS), ("steps", schema.STEPS)):
            absent = [f.name for f in fields if f.name not in tables[name].column_names]
            if absent:
                raise ValueError(f"{name}.parquet lacks column(s) {', '.join(absent)}")
    except (
        OSError,
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
        pa.ArrowException,
        safepath.UnsafeName,
    ) as exc:
        raise JobError(f"{cache_dir}: not a readable paradiag cache ({type(exc).__name__}: {exc})") from exc
    return Job(
        cache_dir=cache_dir,
        manifest=manifest,
        ranks=tables["ranks"],
        steps=tables["steps"],
        groups=tables["groups"],
        problems=problems,
    )


def _check_manifest(manifest: Any, cache_dir: Path) -> None:
    """ValueError unless ``manifest`` has the shape _finish writes and names files inside ``cache_dir`` only."""
    if not isinstance(manifest, dict) or manifest.get("format") != CACHE_FORMAT:
        raise ValueError(f"{MANIFEST} is not a {CACHE_FORMAT} manifest")
    _typed(manifest, {"content_hash": str, "source": str, "sources": list, "files": list, "problems": list})
    for entry in manifest["files"]:
        _typed(entry, {"path": str, "size": int, "mtime_ns": int, "hash": str})
        safepath.inside(
            cache_dir, entry["path"], exact=True
        )  # relative to the source: never read here, never absolute
    for entry in manifest["problems"]:
        _typed(entry, {"source": str, "severity": str, "message": str})
    for entry in manifest["sources"]:
        _typed(entry, {"rank": int, "max_dur_ns": int, "extra_files": dict})
        tables = entry.get("rank_tables", {})  # absent in a cache written before the per-rank tables existed
        if not isinstance(tables, dict):
            raise ValueError(f"entry 'rank_tables' is {type(tables).__name__}, not dict")
        files = [entry.get("events_file"), *entry["extra_files"].values(), *tables.values()]
        for file in files:
            if file is not None:
                if not isinstance(file, str):
                    raise ValueError(f"source {entry['rank']}: a file name that is no text: {file!r}")
                try:
                    safepath.inside(cache_dir, file, exact=True)
                except safepath.UnsafeName as exc:
                    raise ValueError(f"source {entry['rank']}: {file!r} {exc}") from None


def _typed(entry: Any, fields: dict[str, type]) -> None:
    if not isinstance(entry, dict):
        raise ValueError(f"an entry that is no object: {str(entry)[:80]!r}")
    for name, kind in fields.items():
        value = entry.get(name)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ValueError(f"entry {name!r} is {type(value).__name__}, not {kind.__name__}")


def load_cache(cache_dir: Path, source: Path | None = None) -> Job:
    """The cache in ``cache_dir``, read as it is: never parsed again, whatever its source says (how the team
    server opens an upload, which its limited parse process cached). JobError when there is no valid cache there,
    when this version of paradiag wrote another layout, or when it is not the cache of ``source``."""
    if not is_cache(cache_dir):
        raise JobError(f"{cache_dir}: no paradiag cache")
    job = _load(cache_dir)
    m = job.manifest
    if m.get("parser_version") != PARSER_VERSION or m.get("schema_version") != schema.SCHEMA_VERSION:
        raise JobError(f"{cache_dir}: a cache written by another version of paradiag")
    if source is not None and job.source != str(source.resolve()):
        raise JobError(f"{cache_dir}: not the cache of {source}")
    return job


def followed_source(job: Job, cache_dir: Path) -> Path | None:
    """The source folder of the cache ``cache_dir`` that opening it by its path may parse again when changed, or
    None. The rule: a cache's ``source`` is only ever followed when its caller opened the cache folder itself
    (the command line, the library: the caller reads the source with its own rights, for itself), never for a
    folder opened as a source (``as_source``: the team server's uploads) nor by :func:`load_cache`; and only
    when it names an existing folder or file by an absolute path that neither is nor holds nor lies inside the
    cache folder (an ingest never writes a cache into its source)."""
    text = job.source
    if not text or not os.path.isabs(text) or "\0" in text:
        return None
    origin = Path(text)
    if not origin.exists():
        return None
    here, there = cache_dir.resolve(), origin.resolve()
    if here == there or here in there.parents or there in here.parents:
        return None
    return origin


def open_job(
    path: str | os.PathLike[str],
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    strict: bool = False,
    workers: int | None = None,
    refresh: bool = False,
    progress: ProgressCallback | None = None,
    verify: bool = False,
    dask: str | None = None,
    window: int | None = None,
    as_source: bool = False,
) -> Job:
    """Open a trace folder (or one trace file, or a cache folder): read the cache when it is current,
    otherwise parse and cache. ``strict`` turns any problem with a source into a :class:`JobError`;
    ``verify`` hashes every source file to decide whether the cache is current (see :func:`_is_current`);
    ``dask`` parses on a Dask cluster (see :func:`ingest`). ``path`` may also be the URL of a cache, and
    ``cache_dir`` one to read or write (``s3://bucket/job``; paradiag.remote). ``window``: the profiling window
    to open (:attr:`Job.windows`; default the latest), each cached on its own (:func:`window_cache`).
    ``as_source``: ``path`` is a folder of traces, never taken for a cache whatever it holds (a manifest in it is
    no trace and is left out), its cache ``cache_dir`` or the default one (how the team server parses an upload)."""
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 0):
        raise JobError(f"window {window!r}: a window is a number from 0 (see Job.windows)")
    options: dict[str, Any] = {
        "strict": strict,
        "workers": workers,
        "progress": progress,
        "dask": dask,
        "window": window,
    }
    if remote.is_url(path):
        if cache_dir is not None:
            raise JobError(
                f"{remote.shown(str(path))}: a cache's URL is opened as it is: give no other cache (-o {cache_dir})"
            )
        return _open_url(str(path), refresh, verify, options)
    if remote.is_url(cache_dir):
        return _open_with_url(Path(path), window_url(str(cache_dir), window), refresh, verify, options)
    target = Path(path)
    if not target.exists():
        raise JobError(f"{target}: no such file or folder")
    if not as_source and target.is_dir() and is_cache(target):
        job = _load(target)
        origin = followed_source(job, target)
        if window is not None and not _holds(
            job.manifest, window
        ):  # another window: its own cache beside this one
            if origin is None:
                raise JobError(
                    f"{target}: this cache holds window {job.window} of {job.source!r}, which is not here to read window {window} from"
                )
            return open_job(
                origin,
                window_cache(target, window),
                strict=strict,
                workers=workers,
                refresh=refresh,
                progress=progress,
                verify=verify,
                dask=dask,
                window=window,
            )
        if refresh and origin is None:
            raise JobError(
                f"{target}: cannot be parsed again: its source {job.source!r} is no folder it may be rebuilt from (see followed_source)"
            )
        if origin is not None and (
            refresh or not _is_current(job.manifest, origin, verify)
        ):  # the window it was made for
            return ingest(origin, target, **{**options, "window": cached_window(job.manifest)[1]})
        return _check_strict(job, strict)
    cache = Path(cache_dir) if cache_dir is not None else cache_dir_for(target)
    if (
        not refresh and window is not None and is_cache(cache)
    ):  # the default cache may hold that window already
        with contextlib.suppress(JobError):  # a broken cache is built again
            job = _load(cache)
            if (
                cached_window(job.manifest)[0] == window
                and job.source == str(target.resolve())
                and _is_current(job.manifest, target, verify)
            ):
                return _check_strict(job, strict)
    cache = window_cache(cache, window)
    if not refresh and is_cache(cache):
        with contextlib.suppress(JobError):  # a broken cache is built again
            job = _load(cache)
            if (
                job.source == str(target.resolve())
                and _holds(job.manifest, window)
                and _is_current(job.manifest, target, verify)
            ):
                return _check_strict(job, strict)
    return ingest(target, cache, **options)


def _open_url(url: str, refresh: bool, verify: bool, options: dict[str, Any]) -> Job:
    """The cache at ``url``, from its local mirror; ingested again into ``url`` when its source folder is here
    and changed (as a cache folder is)."""
    job = replace(_load(remote.mirror(remote.connect(url))), url=remote.shown(url))
    origin = followed_source(job, job.cache_dir)
    window = options["window"]
    if window is not None and not _holds(
        job.manifest, window
    ):  # another window of the job: its own cache beside this one
        if origin is None:
            raise JobError(
                f"{remote.shown(url)}: this cache holds window {job.window} of {job.source!r}, which is not here to read window {window} from"
            )
        return _open_with_url(origin, window_url(url, window), refresh, verify, options)
    if origin is not None and (
        refresh or not _is_current(job.manifest, origin, verify)
    ):  # the window it was made for
        return ingest(origin, url, **{**options, "window": cached_window(job.manifest)[1]})
    return _check_strict(job, options["strict"])


def _open_with_url(target: Path, url: str, refresh: bool, verify: bool, options: dict[str, Any]) -> Job:
    """A trace folder whose cache is at ``url``: its committed manifest (one small read) tells whether it is
    current; if so the mirror is opened, otherwise the folder is ingested into ``url``."""
    if not target.exists():
        raise JobError(f"{target}: no such file or folder")
    if not refresh:
        store = remote.connect(url)
        pointer = remote.read_pointer(store, required=False)
        if pointer is not None:
            manifest = remote.read_manifest(store, pointer)
            if (
                Path(manifest.get("source", "")) == target.resolve()
                and _holds(manifest, options["window"])
                and _is_current(manifest, target, verify)
            ):
                return _check_strict(
                    replace(_load(remote.mirror(store, pointer)), url=store.name), options["strict"]
                )
    return ingest(target, url, **options)


def _check_strict(job: Job, strict: bool) -> Job:
    if strict and job.problems:
        raise JobError("; ".join(str(p) for p in job.problems))
    return job


_STARTED: Any = None  # in a worker process: per source, 1 once a worker of the pool began parsing it


def _worker_init(owner: int, started: Any) -> None:
    global _STARTED
    _STARTED = started
    # The objects inherited from the parent stay shared: a collection would write to every one of them and copy
    # their pages into this worker (about 30 MB for two workers).
    gc.freeze()
    # The system allocator hands memory back between slices; Arrow's default (mimalloc) kept ~20% more resident.
    pa.set_memory_pool(pa.system_memory_pool())
    _die_with(owner)


PR_SET_PDEATHSIG = 1


def _die_with(owner: int) -> None:
    """End this worker when the ingest process ``owner`` dies, even by SIGKILL: otherwise it blocks forever
    writing its result to a pipe nobody reads, holding its memory. Under fork, Linux kills the worker with its
    parent (prctl). Under forkserver the parent is the fork server, which outlives the ingest as long as a worker
    holds its liveness pipe; so a thread also polls the owner."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if not alive(owner):  # it died before the signal was armed
        os._exit(1)
    threading.Thread(target=_watch, args=(owner,), daemon=True).start()


def _watch(owner: int) -> None:
    while alive(owner):
        time.sleep(0.5)
    os._exit(1)


RETRIES = 1  # a parse that fails for another reason than its input (a storage error, a killed worker) runs once more


def _parse_all(
    sources: list[Source],
    root: Path,
    tmp: Path,
    workers: int | None,
    progress: ProgressCallback | None,
    dask: str | None,
    upload: remote.Upload | None = None,
) -> list[Parsed]:
    if dask is not None:
        from paradiag import distributed

        return distributed.parse_all(dask, sources, root, tmp, progress, upload)
    total_bytes = sum(s.size() for s in sources)
    n_workers = workers if workers is not None else min(os.cpu_count() or 1, len(sources))
    results: list[Parsed | None] = [None] * len(sources)

    finished = iter(range(1, len(sources) + 1))

    def done(i: int, parsed: Parsed) -> None:
        results[i] = parsed
        if progress:
            progress(next(finished), len(sources), parsed.result.source)

    if n_workers <= 1 or len(sources) == 1 or total_bytes < IN_PROCESS_BYTES:
        for i, src in enumerate(sources):
            done(i, _parse_here(src, root, tmp, i, upload))
    else:
        _parse_in_pool(sources, root, tmp, n_workers, done, upload)
    return [r for r in results if r is not None]


def _parse_here(
    source: Source, root: Path, tmp: Path, index: int, upload: remote.Upload | None = None
) -> Parsed:
    """parse_rank in this process, run once more when writing the cache fails (a bad file never raises: its
    parse is a problem of its own); failing again, a problem naming the source."""
    for _ in range(RETRIES + 1):
        try:
            return parse_and_upload(source, root, tmp, index, upload)
        except OSError as exc:
            error: BaseException = exc
    return failed_parse(
        source, root, tmp, index, f"its parse failed twice (retried once); last error: {_why(error)}"
    )


def _parse_in_pool(
    sources: list[Source],
    root: Path,
    tmp: Path,
    workers: int,
    done: Callable[[int, Parsed], None],
    upload: remote.Upload | None = None,
) -> None:
    """Parse ``sources`` in local worker processes. A killed worker breaks its pool: the ranks that had not started
    go to a new pool, those it was parsing (and those whose parse raised an OSError) run once more, each alone in
    a pool of its own (so that a second death is that rank's own); failing again, a problem naming the source."""
    todo, failed = largest_first(sources), dict[int, BaseException]()
    while todo:
        left, failures = _pool_round(sources, root, tmp, workers, todo, done, upload)
        if len(left) == len(todo):  # the pool broke before it started any (a worker that cannot start)
            failures.update({i: BrokenProcessPool() for i in left})
            left = []
        todo = left
        failed.update(failures)
    for i, error in failed.items():
        left, failures = _pool_round(sources, root, tmp, 1, [i], done, upload)
        if left or failures:
            why = f"its parse failed twice (retried once); last error: {_why(failures.get(i, error))}"
            done(i, failed_parse(sources[i], root, tmp, i, why))


def _pool_round(
    sources: list[Source],
    root: Path,
    tmp: Path,
    workers: int,
    todo: list[int],
    done: Callable[[int, Parsed], None],
    upload: remote.Upload | None = None,
) -> tuple[list[int], dict[int, BaseException]]:
    """One pool over ``todo``: the sources it did not start (its worker killed, the pool broke) and those whose
    parse failed (source -> error)."""
    ctx = _pool_context()
    started = ctx.RawArray("b", len(sources))
    not_started: list[int] = []
    failed: dict[int, BaseException] = {}
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=ctx, initializer=_worker_init, initargs=(os.getpid(), started)
    ) as pool:
        futures = {pool.submit(_parse_tracked, sources[i], root, tmp, i, upload): i for i in todo}
        for future in as_completed(futures):
            i, error = futures[future], future.exception()
            if error is None:
                done(i, future.result())
            elif isinstance(error, BrokenProcessPool) and not started[i]:
                not_started.append(i)
            elif isinstance(error, BrokenProcessPool | OSError):
                failed[i] = error
            else:
                raise error
    return not_started, failed


# What a worker imports on its first rank besides the parsers: the per-rank analysis (parse_rank imports it) and
# Arrow's query engine (Table.group_by loads pyarrow.acero and pyarrow.dataset). Imported before the workers
# start, as the parsers are, so that they share them instead of each importing them (about 0.15 CPU-second per
# worker, and their objects then sit outside gc.freeze()). Under fork the parent, which needs them for the reduce
# anyway, imports them; under forkserver the fork server does.
WORKER_MODULES = ("paradiag.analysis.diagnose", "pyarrow.acero")


def _pool_context() -> BaseContext:
    """fork shares the parent's imported modules with the workers (no extra process, least memory); from a
    threaded parent (the web app) forking is unsafe, so a forkserver starts the workers there (see _forkable)."""
    if _forkable():
        for name in WORKER_MODULES:
            importlib.import_module(name)
        return get_context("fork")
    ctx = get_context("forkserver")
    # pyarrow imports pandas, when installed, in any process that converts Python values (pa.array asks whether
    # they are pandas objects): imported once in the fork server, every worker shares it (+40 MB and 0.2
    # CPU-seconds per worker otherwise). A module that is not installed is skipped.
    ctx.set_forkserver_preload(["paradiag.discover", *PARSER_MODULES, *WORKER_MODULES, "pandas"])
    return ctx


def _forkable() -> bool:
    """No thread but the main one, or only fsspec's: its I/O thread and its event loop's executor threads
    (``asyncio_N``), which an ingest to a cache at a URL starts (paradiag.remote) and which wait idle between
    transfers. fsspec resets its loop and its file systems in a forked child (os.register_at_fork), so a fork is
    safe there; a forkserver would cost each worker its own import of the store's client (at 256 ranks to s3://:
    20 against 14 CPU-seconds, 410 against 290 MB, benchmarks/remote_cache.py)."""
    names = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    return all(n == "fsspecIO" or (n.startswith("asyncio_") and "fsspecIO" in names) for n in names)


def _parse_tracked(
    source: Source, root: Path, out_dir: Path, index: int, upload: remote.Upload | None = None
) -> Parsed:
    """parse_in_worker, marked as started (for the pool to know which ranks a killed worker took with it)."""
    _STARTED[index] = 1
    return parse_in_worker(source, root, out_dir, index, upload)


def _why(error: BaseException) -> str:
    if isinstance(error, BrokenProcessPool):
        return "its worker process died (killed, or out of memory)"
    return f"{type(error).__name__}: {error}"


def ingest(
    path: str | os.PathLike[str],
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    strict: bool = False,
    workers: int | None = None,
    progress: ProgressCallback | None = None,
    dask: str | None = None,
    window: int | None = None,
) -> Job:
    """Parse every source of profiling window ``window`` (default the latest; paradiag.windows) under ``path``
    and write the cache atomically; return the job. ``dask`` parses the
    sources on a Dask cluster instead of local processes: a scheduler address (``tcp://host:8786``) or
    ``local:N`` (a local cluster of N worker processes); see paradiag.distributed. ``cache_dir`` may be an fsspec
    URL (``s3://bucket/job``): the cache is then written as a new generation there and committed by its pointer,
    this machine keeping a local mirror (paradiag.remote)."""
    if remote.is_url(path):
        raise JobError(
            f"{remote.shown(str(path))}: the trace folder must be a path (only the cache may be a URL)"
        )
    root = Path(path).resolve()
    url = str(cache_dir) if remote.is_url(cache_dir) else None
    cache = Path(cache_dir) if cache_dir is not None and url is None else cache_dir_for(root)
    if url is None and (cache.resolve() == root or root in cache.resolve().parents):
        raise JobError(f"{cache}: the cache must not be inside the source folder (it is never modified)")
    skipped: list[tuple[Path, str]] = []
    sources, others = discover(root, skipped)
    base = root if root.is_dir() else root.parent
    problems = [Problem(_shown(path, base), "error", why) for path, why in skipped]
    run, broken = run_manifest.read(root)
    if broken:
        problems.append(
            Problem(run_manifest.shown(root), "warning", f"{broken}; the run manifest is ignored")
        )
    if not sources:
        hint = ""
        if root.is_dir() and any(root.rglob("cluster_step_trace_time.csv")):
            hint = (
                "; it holds msprof-analyze's aggregated cluster output (cluster_step_trace_time.csv), not per-rank"
                " traces: open the *_ascend_pt folders it was computed from"
            )
        raise JobError(
            f"{root}: no trace found (looked for PyTorch profiler *.json[.gz] files and Ascend *_ascend_pt folders){hint}"
        )
    plan = windows.plan(root, sources, run.started_ns if run else None)
    try:
        chosen = plan.pick(window)
    except ValueError as exc:
        raise JobError(f"{root}: {exc}") from None
    problems.extend(Problem(_shown(s.path, base), "warning", why) for s, why in plan.set_aside)
    problems.extend(Problem(".", "warning", note) for note in plan.notes)
    if not chosen.sources:
        raise JobError(
            f"{root}: no trace of the run's latest window (every trace was set aside: "
            + "; ".join(str(p) for p in problems)
            + ")"
        )
    context = _Context(run, plan, chosen, window)
    everything, sources = sources, chosen.sources
    writer = (
        remote.Writer.start(url, root) if url else None
    )  # the store reached and writable, or a JobError now
    if writer:
        cache = writer.mirror  # the folder built here becomes the local mirror of the new generation
    cache.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(cache.parent)
    tmp = cache.parent / scratch_name(cache, "tmp")
    tmp.mkdir()
    try:
        parsed = _parse_all(sources, root, tmp, workers, progress, dask, writer.upload if writer else None)
        results = [p.result for p in parsed]
        problems.extend(
            Problem(r.source, "warning", f"not a trace: skipped ({r.error})")
            if r.not_trace
            else Problem(r.source, "error", r.error)
            for r in results
            if r.error
        )
        if strict and problems:
            raise JobError("; ".join(str(p) for p in problems))
        job = _finish(root, base, tmp, everything, others, parsed, problems, context)
        if strict and job.problems:
            raise JobError("; ".join(str(p) for p in job.problems))
        store_side_inputs(root, tmp)
        if progress:
            progress(len(sources), len(sources), "analysing")
        job.diagnosis()  # computed once here and stored in the cache, inside the same atomic build
        shutil.rmtree(tmp / FRAMES, ignore_errors=True)  # read by the reduce just run; no part of the cache
        if writer:
            writer.commit(tmp, [f for p in parsed for f in p.uploaded], _pointer(job))
        _replace(tmp, cache)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if writer:
            writer.abandon()
        raise
    if writer:
        writer.clean()
        return replace(_load(cache), url=writer.store.name)
    return _load(cache)


def _pointer(job: Job) -> dict[str, Any]:
    """What a cache at a URL's pointer says beside its generation: the versions that wrote it (a reader of
    another cache format stops at the pointer) and the source folder."""
    m = job.manifest
    keys = ("schema_version", "parser_version", "analysis_version", "paradiag_version", "source", "created")
    return {"cache_format": m["format"], **{k: m[k] for k in keys}}


def _shown(path: Path, base: Path) -> str:
    return str(path.relative_to(base)) if path.is_relative_to(base) and path != base else str(path)


def _replace(tmp: Path, cache: Path) -> None:
    """Move the finished cache into place; the old one (if any) is removed only after the new one is there."""
    old = None
    if cache.exists():
        old = cache.parent / scratch_name(cache, "old")
        cache.rename(old)
    tmp.rename(cache)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@dataclass
class _Kept:
    """A parsed source that made it into the job, with its final rank id."""

    result: SourceResult
    parsed: ParsedRank
    rank: int
    analysis: Parsed  # for the per-rank analysis tables


@dataclass
class _Context:
    """What the ingest knows beyond the sources it parsed: the run manifest, the folder's windows and the one
    parsed (and the window asked for: None for the latest)."""

    run: run_manifest.RunManifest | None
    plan: windows.Plan
    window: windows.Window
    asked: int | None

    def manifest(self, root: Path) -> dict[str, Any]:
        return {
            "window": {"index": self.window.index, "asked": self.asked, "count": len(self.plan.windows)},
            "windows": [w.describe(root) for w in self.plan.windows],
            "run_manifest": self.run.describe() if self.run else None,
        }


def _missing_ranks(kept: list[_Kept], failed: set[int | None], context: _Context) -> str | None:
    """Which ranks of the world have no trace (the run manifest's world size, else the largest one a rank states);
    a rank whose file is there but failed (``failed``: their ranks) has its own problem already."""
    stated = [k.parsed.world_size for k in kept if k.parsed.world_size]
    world = context.run.world_size if context.run else max(stated, default=0)
    have = {k.rank for k in kept} | {r for r in failed if r is not None}
    missing = [r for r in range(world) if r not in have]
    if not missing:
        return None
    where = (
        f" in window {context.window.index} ({context.window.label})" if len(context.plan.windows) > 1 else ""
    )
    named = ", ".join(map(str, missing[:16])) + (", ..." if len(missing) > 16 else "")
    return f"{len(missing)} of the world size's {world} ranks have no trace{where}: rank{'s' if len(missing) > 1 else ''} {named}"


def _rank_of(source: Source) -> int | None:
    """The rank a source that could not be parsed was of, as far as its head or its name tell."""
    peek = windows.head_peek(source) if source.parser == windows.KINETO else None
    return peek.rank if peek is not None and peek.rank is not None else rank_from_name(source.path)


def _assign_ranks(results: list[Parsed], problems: list[Problem]) -> list[_Kept]:
    """Keep one source per rank (duplicates are errors naming both), give unnamed sources free rank ids."""
    kept: list[_Kept] = []
    owner: dict[int, str] = {}
    unnamed: list[tuple[SourceResult, ParsedRank, Parsed]] = []
    for p in results:
        r = p.result
        if r.parsed is None:
            continue
        if r.parsed.rank is None:
            unnamed.append((r, r.parsed, p))
            continue
        rank = r.parsed.rank
        if rank in owner:
            problems.append(
                Problem(
                    r.source,
                    "error",
                    f"rank {rank} is also claimed by {owner[rank]}; this source was skipped",
                )
            )
            continue
        owner[rank] = r.source
        kept.append(_Kept(r, r.parsed, rank, p))
    free = (i for i in range(10**9) if i not in owner)
    for r, parsed, p in unnamed:
        parsed.rank = next(free)
        parsed.rank_from = "assigned"
        owner[parsed.rank] = r.source
        kept.append(_Kept(r, parsed, parsed.rank, p))
    for k in kept:
        problems.extend(Problem(k.result.source, "warning", w) for w in k.parsed.warnings)
    mixed = _mixed_runs(kept)
    if mixed:
        problems.append(Problem(".", "warning", mixed))
    return sorted(kept, key=lambda k: k.rank)


RUN_GAP_NS = 10 * 60 * 10**9  # ranks of one run are profiled together: their windows lie closer than this
EPOCH_NS = 10**17  # times beyond this (1973) are wall-clock; relative clocks say nothing about the run


def _mixed_runs(kept: list[_Kept]) -> str | None:
    """Why the kept sources look like two or more profiling runs in one folder, or None: different run ids,
    time windows far apart on the wall clock, or groups of ranks with no step id in common."""
    runs = {k.parsed.run_id for k in kept if k.parsed.run_id}
    if len(runs) > 1:
        return f"the folder mixes {len(runs)} profiling runs ({', '.join(sorted(runs)[:4])})"
    windows = sorted(
        (k.result.min_start_ns, k.result.max_end_ns or k.result.min_start_ns, k.rank)
        for k in kept
        if k.result.min_start_ns is not None and k.result.min_start_ns > EPOCH_NS
    )
    clusters: list[list[int]] = []
    end = None
    for start, stop, rank in windows:
        if end is None or start - end > RUN_GAP_NS:
            clusters.append([])
        clusters[-1].append(rank)
        end = stop if end is None else max(end, stop)
    if len(clusters) > 1:
        starts = [time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(w[0] / 1e9)) for w in windows]
        first = {rank: t for (_, _, rank), t in zip(windows, starts, strict=True)}
        parts = [f"ranks {_ranks_text(c)} from {first[c[0]]} UTC" for c in clusters[:4]]
        gap = f"more than {RUN_GAP_NS // 60_000_000_000} minutes apart"
        return f"the folder seems to mix {len(clusters)} profiling runs, profiled {gap}: " + "; ".join(parts)
    return _disjoint_steps(kept)


def _disjoint_steps(kept: list[_Kept]) -> str | None:
    """Groups of ranks whose step ids do not meet (one run's steps 1-5, another's 101-105)."""
    groups: list[tuple[set[int], list[int]]] = []  # (step ids, ranks)
    for k in kept:
        steps = set(k.parsed.steps.column("step").to_pylist())
        if not steps:
            continue
        meeting = [g for g in groups if g[0] & steps]
        merged = (steps.union(*(g[0] for g in meeting)), [k.rank, *(r for g in meeting for r in g[1])])
        groups = [g for g in groups if not g[0] & steps] + [merged]
    if len(groups) < 2:
        return None
    parts = [f"ranks {_ranks_text(sorted(r))} have steps {min(s)}-{max(s)}" for s, r in groups[:4]]
    return f"the folder seems to mix {len(groups)} profiling runs (no step id in common): " + "; ".join(parts)


def _ranks_text(ranks: list[int]) -> str:
    shown = ", ".join(str(r) for r in sorted(ranks)[:8])
    return shown + (", ..." if len(ranks) > 8 else "")


def _finish(
    root: Path,
    base: Path,
    tmp: Path,
    sources: list[Source],
    others: list[Path],
    parsed: list[Parsed],
    problems: list[Problem],
    context: _Context,
) -> Job:
    from paradiag.analysis.diagnosis_types import analysis_version

    kept = _assign_ranks(parsed, problems)
    results = [p.result for p in parsed]
    if not kept:
        raise JobError(f"{root}: no trace could be read: " + "; ".join(str(p) for p in problems))
    errors = {r.source for r in results if r.error}
    failed = {_rank_of(s) for s in context.window.sources if _shown(s.path, base) in errors}
    missing = _missing_ranks(kept, failed, context)
    if missing:
        problems.append(Problem(".", "warning", missing))
    domain: dict[int, object] = {k.rank: (k.parsed.host or f"rank{k.rank}") for k in kept}
    comm = {k.rank: k.result.comm for k in kept if k.result.comm is not None}
    alignment = align.estimate(comm, domain)
    ranks = _ranks_table(kept, alignment, context.run)
    steps = _steps_table(kept, alignment)
    groups = group_table({k.rank: k.parsed.groups for k in kept}, context.run.groups if context.run else ())
    pq.write_table(ranks, tmp / "ranks.parquet")
    pq.write_table(steps, tmp / "steps.parquet")
    pq.write_table(groups, tmp / "groups.parquet")
    kept_names = {k.result.source for k in kept}
    for p in parsed:  # parts of skipped duplicates are not part of the cache
        if p.result.source not in kept_names:
            for file in [p.result.events_file, *p.files.values(), p.frame_file]:
                if file:
                    (tmp / file).unlink(missing_ok=True)
    hashed = {
        Path(p): h for r in results for p, h in r.file_hashes.items()
    }  # the workers hashed their sources
    files = [
        dict(_stat_entry(f, base), hash=hashed.get(f) or file_hash(f))
        for f in _source_files(root, sources, others)
    ]
    # The window's files (and the folder's other files): two windows of one folder are two jobs to cached work.
    aside = {
        _shown(p, base)
        for w in context.plan.windows
        if w is not context.window
        for p in _source_files(root, w.sources, [])
    }
    aside |= {_shown(p, base) for s, _ in context.plan.set_aside for p in s.files}
    content = hashlib.sha256(
        json.dumps([(f["path"], f["hash"]) for f in files if f["path"] not in aside]).encode()
    ).hexdigest()
    manifest = {
        "format": CACHE_FORMAT,
        "schema_version": schema.SCHEMA_VERSION,
        "parser_version": PARSER_VERSION,
        "paradiag_version": __version__,
        "source": str(root),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "content_hash": content,
        "files": files,
        "sources": [_source_entry(k) for k in kept],
        "alignment": {"instances": alignment.instances},
        "analysis_version": analysis_version(),  # of the per-rank analysis tables (sources' "rank_tables")
        "problems": [p.__dict__ for p in problems],
        **context.manifest(root),
    }
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
    frames = {k.rank: tmp / k.analysis.frame_file for k in kept if k.analysis.frame_file}
    return Job(
        tmp,
        manifest,
        ranks,
        steps,
        groups,
        problems,
        _rank_tables={k.rank: k.analysis.tables for k in kept},
        _work_frames=frames,
    )


def _source_entry(k: _Kept) -> dict[str, Any]:
    r = k.result
    return {
        "source": r.source,
        "format": k.parsed.format,
        "rank": k.rank,
        "rank_from": k.parsed.rank_from,
        "events_file": r.events_file,
        "extra_files": r.extra_files,
        "rank_tables": k.analysis.files,
        "num_events": r.num_events,
        "min_start_ns": r.min_start_ns,
        "max_end_ns": r.max_end_ns,
        "max_dur_ns": r.max_dur_ns,
    }


def _ranks_table(
    kept: list[_Kept], alignment: align.Alignment, run: run_manifest.RunManifest | None = None
) -> pa.Table:
    """One row per rank; the run manifest's world size and mesh coordinates where the trace states none."""
    rows: dict[str, list[Any]] = {f.name: [] for f in schema.RANKS}
    for k in kept:
        p = k.parsed
        rows["rank"].append(k.rank)
        rows["host"].append(p.host)
        rows["device"].append(p.device)
        rows["device_type"].append(p.device_type)
        rows["world_size"].append(p.world_size or (run.world_size if run else None))
        coords = p.parallel or (run.coords.get(k.rank, {}) if run else {})
        for axis in ("dp", "tp", "pp", "ep"):
            rows[axis].append(coords.get(axis))
        rows["clock_offset_ns"].append(alignment.offset_ns.get(k.rank, 0))
        rows["clock_uncertainty_ns"].append(alignment.uncertainty_ns.get(k.rank))
        rows["format"].append(p.format)
        rows["source"].append(k.result.source)
        rows["num_events"].append(k.result.num_events)
    return schema.build(schema.RANKS, rows, len(kept))


def _steps_table(kept: list[_Kept], alignment: align.Alignment) -> pa.Table:
    tables = []
    for k in kept:
        steps = k.parsed.steps
        if steps.num_rows == 0:
            continue
        offset = pa.scalar(alignment.offset_ns.get(k.rank, 0), pa.int64())
        cols = {name: steps.column(name) for name in steps.column_names}
        cols["rank"] = pa.array(np.full(steps.num_rows, k.rank, dtype=np.int32))
        for name in ("start_ns", "end_ns", "device_start_ns", "device_end_ns"):
            cols[name] = pc.add(cols[name], offset)
        tables.append(schema.build(schema.STEPS, cols, steps.num_rows))
    return pa.concat_tables(tables) if tables else schema.empty(schema.STEPS)
