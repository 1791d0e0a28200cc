"""The read API of a job: :class:`Job`, the canonical tables of a trace folder as its cache holds them
(paradiag.cache's layout), read lazily; and the reading of a cache folder, whose manifest is checked before any
file it names is read.

Opening a trace folder (the cache current or built again) is ``paradiag.dataset.open_job``; building a cache is
``paradiag.ingest``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from paradiag import safepath, schema
from paradiag.cache import CACHE_FORMAT, MANIFEST, PARSER_VERSION, JobError, cached_window, is_cache

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


def read_cache(cache_dir: Path) -> Job:
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
    job = read_cache(cache_dir)
    m = job.manifest
    if m.get("parser_version") != PARSER_VERSION or m.get("schema_version") != schema.SCHEMA_VERSION:
        raise JobError(f"{cache_dir}: a cache written by another version of paradiag")
    if source is not None and job.source != str(source.resolve()):
        raise JobError(f"{cache_dir}: not the cache of {source}")
    return job
