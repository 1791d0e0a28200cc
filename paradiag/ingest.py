"""The ingest: parse every source of a profiling window of a trace folder (in this process, a local pool,
paradiag.pool, or on a Dask cluster, paradiag.distributed), give each its rank, align their clocks, build the
ranks, steps and groups tables and the manifest, compute the Diagnosis, and move the finished cache into place
(paradiag.cache's layout), locally or as a new generation of a cache at a URL (paradiag.remote).

The workers write into the same temporary folder (on storage they all reach); this process alone renames it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from paradiag import __version__, align, remote, run_manifest, schema, windows
from paradiag.cache import (
    CACHE_FORMAT,
    MANIFEST,
    PARSER_VERSION,
    JobError,
    cache_dir_for,
    move_into_place,
    remove_stale,
    scratch_name,
    source_files,
    stat_entry,
)
from paradiag.discover import Source, SourceResult, discover, file_hash, group_table
from paradiag.job import Job, Problem
from paradiag.parse_worker import FRAMES, Parsed, ProgressCallback
from paradiag.parsers.base import ParsedRank, rank_from_name
from paradiag.place import LocalPlace, Place, place_of
from paradiag.pool import parse_all
from paradiag.side_inputs import store_side_inputs


def ingest(
    path: str | os.PathLike[str],
    cache_dir: str | os.PathLike[str] | Place | None = None,
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
    place = place_of(cache_dir) if cache_dir is not None else LocalPlace(cache_dir_for(root))
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
    build = place.build(root)  # the store reached and writable, or a JobError now
    cache = build.folder  # a URL's: the local mirror of its new generation
    cache.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(cache.parent)
    tmp = cache.parent / scratch_name(cache, "tmp")
    tmp.mkdir()
    try:
        parsed = parse_all(sources, root, tmp, workers, progress, dask, build.upload)
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
        build.commit(tmp, [f for p in parsed for f in p.uploaded], _pointer(job))
        move_into_place(tmp, cache)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        build.abandon()
        raise
    return build.finish()


def _pointer(job: Job) -> dict[str, Any]:
    """What a cache at a URL's pointer says beside its generation: the versions that wrote it (a reader of
    another cache format stops at the pointer) and the source folder."""
    m = job.manifest
    keys = ("schema_version", "parser_version", "analysis_version", "paradiag_version", "source", "created")
    return {"cache_format": m["format"], **{k: m[k] for k in keys}}


def _shown(path: Path, base: Path) -> str:
    return str(path.relative_to(base)) if path.is_relative_to(base) and path != base else str(path)


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
        dict(stat_entry(f, base), hash=hashed.get(f) or file_hash(f))
        for f in source_files(root, sources, others)
    ]
    # The window's files (and the folder's other files): two windows of one folder are two jobs to cached work.
    aside = {
        _shown(p, base)
        for w in context.plan.windows
        if w is not context.window
        for p in source_files(root, w.sources, [])
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
