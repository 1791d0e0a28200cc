"""Parsing one source of a job into the cache being built (``paradiag.ingest``'s map): where the ingest
runs it (in this process, a local worker pool, a Dask worker of ``paradiag.distributed``), the parse, the per-rank
part of the analysis, the rank's files and, for a cache at a URL, their upload.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from paradiag import remote, schema
from paradiag.discover import Source, SourceResult, parse_and_keep

ProgressCallback = Callable[[int, int, str], None]  # (done, total, source just finished)

IN_PROCESS_BYTES = (
    16 * 1024 * 1024
)  # below this much input, parsing in worker processes costs more than it saves
FRAMES = "frames"  # the map's frames for the reduce, in the ingest's temporary folder only (never in a cache)


@dataclass
class Parsed:
    """What parsing one source gives the ingest: the parse's result and the per-rank part of the analysis."""

    result: SourceResult
    files: dict[str, str] = field(default_factory=dict)  # per-rank analysis table -> its file in the cache
    tables: dict[str, pa.Table] = field(
        default_factory=dict
    )  # the same tables (small), so the reduce reads none back
    uploaded: list[str] = field(
        default_factory=list
    )  # the rank's files its parse uploaded to a cache at a URL
    frame_file: str | None = (
        None  # the rank's work frame for the reduce (removed before the cache is in place)
    )

    def rank_files(self) -> list[str]:
        """Every file of the cache this parse wrote (relative to the cache folder)."""
        r = self.result
        return [f for f in [r.events_file, *r.extra_files.values(), *self.files.values()] if f]


def parse_rank(source: Source, root: Path, out_dir: Path, index: int) -> Parsed:
    """parse_source, then the per-rank part of the analysis on the columns it needs of the events just written
    (kept in memory: decoding them back from the Parquet part cost about 15 ms per 200k events, and the tables
    are the same), its tables written beside them. The device events' frame the map builds is written for the
    reduce too (FRAMES), which would otherwise read the events back and build it again."""
    from paradiag.analysis.breakdown import default_convention
    from paradiag.analysis.diagnose import EVENT_COLUMNS, rank_tables, work_frame
    from paradiag.analysis.frame import device_frame, save_frame

    result, events = parse_and_keep(source, root, out_dir, index, EVENT_COLUMNS)
    if result.parsed is None or events is None:
        return Parsed(result)
    frame = device_frame(events)
    kind = result.parsed.device_type
    tables = rank_tables(
        events, result.parsed.steps.sort_by("step"), default_convention(kind), frame, host_lanes=kind == "cpu"
    )
    frame_file = f"{FRAMES}/part-{index:05d}.arrow"
    (out_dir / FRAMES).mkdir(exist_ok=True)
    save_frame(work_frame(frame), out_dir / frame_file)
    del frame
    parsed = Parsed(result, tables=tables, frame_file=frame_file)
    for name, table in parsed.tables.items():
        (out_dir / "analysis" / name).mkdir(parents=True, exist_ok=True)
        parsed.files[name] = f"analysis/{name}/part-{index:05d}.arrow"
        schema.write_arrow_file(
            table, out_dir / parsed.files[name]
        )  # 5 per rank: 1024 ranks open in 0.7 s, not 4
    return parsed


def part_files(out_dir: Path, index: int) -> list[Path]:
    """Every file the parse of source ``index`` may have written into ``out_dir`` (to drop a failed one's)."""
    name = f"part-{index:05d}.parquet"
    arrow = f"part-{index:05d}.arrow"
    return [
        out_dir / "events" / name,
        *out_dir.glob(f"extra/*/{name}"),
        *out_dir.glob(f"analysis/*/{arrow}"),
        out_dir / FRAMES / arrow,
    ]


def parse_in_worker(
    source: Source, root: Path, out_dir: Path | None, index: int, upload: remote.Upload | None = None
) -> Parsed:
    """parse_rank, then hand the freed memory back to the system before the worker takes the next rank. A full
    garbage collection takes tens of milliseconds in a worker: after a small rank it would cost more than the
    parse did, and a small rank leaves little to collect. With ``upload`` (a cache at a URL) the rank's files
    are uploaded from where they were written: ``out_dir``, or without one (a Dask worker whose folders the
    client does not share) a scratch folder of this worker's, removed afterwards."""
    folder = remote.scratch() if out_dir is None else out_dir
    try:
        parsed = parse_and_upload(source, root, folder, index, upload)
        if (
            out_dir is None
        ):  # its work frame stays in the scratch folder: the client reads the rank's events instead
            parsed.frame_file = None
        return parsed
    finally:
        if out_dir is None:
            shutil.rmtree(folder, ignore_errors=True)
        if source.size() >= IN_PROCESS_BYTES:
            gc.collect()
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").malloc_trim(0)


def parse_and_upload(
    source: Source, root: Path, out_dir: Path, index: int, upload: remote.Upload | None
) -> Parsed:
    """parse_rank, then (a cache at a URL) the rank's files uploaded to the generation being written."""
    parsed = parse_rank(source, root, out_dir, index)
    if upload is not None:
        parsed.uploaded = remote.put_files(upload, out_dir, parsed.rank_files())
    return parsed


def failed_parse(source: Source, root: Path, out_dir: Path, index: int, error: str) -> Parsed:
    """The result of a source whose parse failed for another reason than its input: whatever it wrote into
    ``out_dir`` removed, ``error`` its problem."""
    for path in part_files(out_dir, index):
        path.unlink(missing_ok=True)
    shown = str(source.path.relative_to(root)) if source.path != root else source.path.name
    return Parsed(SourceResult(source=shown, parser=source.parser, error=error))


def largest_first(sources: Sequence[Source]) -> list[int]:
    """The order to hand sources to workers in: largest first, so that one big rank does not finish alone at the end."""
    return sorted(range(len(sources)), key=lambda i: -sources[i].size())
