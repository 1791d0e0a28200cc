"""``paradiag export``: the whole job as one aligned multi-rank trace for Perfetto (Chrome trace JSON, gzip).

Perfetto's UI is what engineers open next, and it does not align ranks by itself: paradiag writes every rank on
the job's aligned clock, one process per rank named by its mesh coordinates ("rank 5 (dp0 tp1 pp1)"), one thread
per stream or host thread. Flows join the members of each collective instance (from the last arrival, which
released them all, to every other member) and each matched send/recv pair; findings are instant events on the
culprit ranks (global when a finding names none); the critical path of each step is a track of its own process.

Events keep the Kineto argument names (``device``, ``stream``, ``correlation``, ``External id``, ``Collective
name``, ``Process Group Name``/``Ranks``, ``In msg nelems``/``dtype``, ``Rank``) and Kineto categories, so the
events of one process read back through paradiag's Kineto parser as that rank (docs/export.md).
"""

from __future__ import annotations

import gzip
import itertools
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from paradiag import schema
from paradiag.analysis.diagnosis_types import Diagnosis, Finding
from paradiag.commands import (
    cache_option,
    open_for_command,
    path_argument,
    print_problems,
    strict_option,
    window_option,
    workers_option,
)
from paradiag.job import Job
from paradiag.parsers.kineto_decode import DEVICE_CATEGORIES, HOST_CATEGORIES

# A source category the Kineto parser does not know (Ascend's AI_CORE, HCCL, ...) or reads as another kind is
# written as the Kineto category of the event's kind, so that the export reads back with the same kinds.
KINETO_CATEGORY = {
    schema.COMPUTE: "kernel",
    schema.COMMUNICATION: "kernel",
    schema.MEMORY: "gpu_memcpy",
    schema.SYNC: "cuda_sync",
    schema.HOST: "cpu_op",
    schema.ANNOTATION: "user_annotation",
}
KINDS_OF_CATEGORY = {**HOST_CATEGORIES, **DEVICE_CATEGORIES}
EVENT_COLUMNS = (
    "rank",
    "device",
    "track",
    "kind",
    "category",
    "name",
    "start_ns",
    "dur_ns",
    "correlation",
    "external_id",
    "collective",
    "group",
    "group_ranks",
    "peer",
    "bytes",
)
_encode = msgspec.json.Encoder().encode
COLLECTIVE_FLOW = "collective"
P2P_FLOW = "send_recv"


@dataclass(frozen=True)
class ExportSummary:
    """What was written: events per rank, flows per kind, findings, critical-path segments."""

    path: Path
    events: dict[int, int]
    collective_flows: int
    p2p_flows: int
    findings: int
    path_segments: int


def process_name(rank: int, coords: dict[str, int] | None, size: dict[str, int]) -> str:
    """``rank 37 (dp1 tp1 pp4)``: the mesh axes the job uses (ep only with expert parallelism)."""
    if not coords:
        return f"rank {rank}"
    axes = [a for a in ("dp", "tp", "pp", "ep") if a in coords and (a != "ep" or size.get("ep", 1) > 1)]
    return f"rank {rank} ({' '.join(f'{a}{coords[a]}' for a in axes)})"


def _us(ns: int, base: int) -> float:
    """Microseconds since ``base`` (float: relative values keep the nanoseconds exactly)."""
    return (ns - base) / 1000


def _collective_args(row: dict[str, Any]) -> dict[str, Any]:
    members = [int(r) for r in row["group_ranks"].split(",")] if row["group_ranks"] else None
    args: dict[str, Any] = {"Collective name": row["collective"]}
    if row["group"] is not None:
        args["Process Group Name"] = row["group"]
    if members is not None:
        args["Process Group Ranks"] = str(members)
    if row["bytes"] is not None:
        args["In msg nelems"], args["dtype"] = row["bytes"], "uint8"
    if row["peer"] is not None:  # Kineto records a send/recv peer as its index in the group
        args["Rank"] = members.index(row["peer"]) if members and row["peer"] in members else row["peer"]
    return args


def _keeps_kind(category: str, kind: str, on_device: bool) -> bool:
    """Whether the Kineto parser reads ``category`` as ``kind`` (communication kernels are ``kernel`` events
    that carry a collective) on the same side (device or host)."""
    read_as = KINDS_OF_CATEGORY.get(category)
    if on_device != (category in DEVICE_CATEGORIES):
        return False
    return read_as == kind or (kind == schema.COMMUNICATION and read_as == schema.COMPUTE)


def _trace_event(row: dict[str, Any], base: int) -> dict[str, Any]:
    on_device = row["device"] >= 0
    category = (
        row["category"]
        if _keeps_kind(row["category"], row["kind"], on_device)
        else KINETO_CATEGORY[row["kind"]]
    )
    args: dict[str, Any] = {"device": row["device"], "stream": row["track"]} if on_device else {}
    if row["correlation"] >= 0:
        args["correlation"] = row["correlation"]
    if row["external_id"] >= 0:
        args["External id"] = row["external_id"]
    if row["collective"] is not None:
        args.update(_collective_args(row))
    return {
        "ph": "X", "cat": category, "name": row["name"], "pid": row["rank"], "tid": row["track"],
        "ts": _us(row["start_ns"], base), "dur": row["dur_ns"] / 1000, "args": args,
    }  # fmt: skip


def _rank_events(job: Job, rank: int, base: int, names: dict[int, str]) -> Iterator[dict[str, Any]]:
    """The rank's process and thread names, then its events."""
    table = job.events(ranks=[rank], columns=EVENT_COLUMNS)
    yield {"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": names[rank]}}
    yield {"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "args": {"sort_index": rank}}
    tracks = (
        pa.table({"device": table.column("device"), "track": table.column("track")})
        .group_by(["device", "track"])
        .aggregate([])
    )
    for device, track in zip(
        tracks.column("device").to_pylist(), tracks.column("track").to_pylist(), strict=True
    ):
        label = f"stream {track}" if device >= 0 else f"host thread {track}"
        yield {"ph": "M", "name": "thread_name", "pid": rank, "tid": track, "args": {"name": label}}
    for row in table.to_pylist():
        yield _trace_event(row, base)


def collective_flows(d: Diagnosis, base: int, ids: Iterator[int]) -> Iterator[dict[str, Any]]:
    """Per collective instance with two or more members, a flow from the last arrival's kernel to every other
    member's (ending where that member could go on: the last arrival, within its kernel)."""
    by_instance: dict[int, list[dict[str, Any]]] = {}
    for row in d.participation.select(
        ["instance", "rank", "track", "start_ns", "end_ns", "late_rank", "collective", "group", "seq", "step"]
    ).to_pylist():
        by_instance.setdefault(row["instance"], []).append(row)
    for instance, members in sorted(by_instance.items()):
        late = next((m for m in members if m["rank"] == m["late_rank"]), None)
        if late is None or len(members) < 2:
            continue
        name = f"{late['collective']} group {late['group']} step {late['step']} #{late['seq']}"
        for m in (x for x in members if x is not late):
            flow = {"cat": COLLECTIVE_FLOW, "name": name, "id": next(ids), "args": {"instance": instance}}
            yield {
                **flow,
                "ph": "s",
                "pid": late["rank"],
                "tid": late["track"],
                "ts": _us(late["start_ns"], base),
            }
            yield {
                **flow,
                "ph": "f",
                "bp": "e",
                "pid": m["rank"],
                "tid": m["track"],
                "ts": _us(_within(late["start_ns"], m), base),
            }


def p2p_flows(d: Diagnosis, base: int, ids: Iterator[int]) -> Iterator[dict[str, Any]]:
    """Per matched send/recv pair, a flow from the send kernel to the receive kernel."""
    for p in d.p2p.to_pylist():
        flow = {
            "cat": P2P_FLOW,
            "name": f"send {p['src']} -> {p['dst']} step {p['step']} #{p['ordinal']}",
            "id": next(ids),
        }
        recv = {"start_ns": p["recv_start_ns"], "end_ns": p["recv_end_ns"]}
        yield {**flow, "ph": "s", "pid": p["src"], "tid": p["src_track"], "ts": _us(p["send_start_ns"], base)}
        yield {
            **flow,
            "ph": "f",
            "bp": "e",
            "pid": p["dst"],
            "tid": p["dst_track"],
            "ts": _us(_within(p["send_start_ns"], recv), base),
        }


def _within(t: int, kernel: dict[str, Any]) -> int:
    """``t`` moved inside ``kernel`` (a flow end binds to the slice enclosing its timestamp)."""
    return min(max(t, kernel["start_ns"]), max(kernel["end_ns"] - 1, kernel["start_ns"]))


def finding_events(d: Diagnosis, job: Job, base: int) -> Iterator[dict[str, Any]]:
    """Each finding as an instant event on each culprit rank at the start of the step its evidence cites (the
    rank's first step when it cites none); global when it names no rank."""
    starts: dict[tuple[int, int], int] = {}
    first: dict[int, int] = {}
    for row in job.steps.select(["rank", "step", "start_ns"]).to_pylist():
        starts[(row["rank"], row["step"])] = row["start_ns"]
        first[row["rank"]] = min(first.get(row["rank"], row["start_ns"]), row["start_ns"])
    for f in d.findings:
        ranks = list(dict.fromkeys([*f.culprit.ranks, *(f.culprit.link or [])]))
        event = {
            "ph": "i",
            "cat": "finding",
            "name": f"{f.kind} ({f.severity})",
            "tid": 0,
            "args": _finding_args(f),
        }
        if not ranks:
            yield {
                **event,
                "s": "g",
                "pid": min(first, default=0),
                "ts": _us(min(first.values(), default=base), base),
            }
        for r in ranks:
            at = starts.get((r, f.step), first.get(r, base)) if f.step is not None else first.get(r, base)
            yield {**event, "s": "p", "pid": r, "ts": _us(at, base)}


def _finding_args(f: Finding) -> dict[str, Any]:
    return {
        "evidence": f.evidence,
        "impact_pct": f.impact_pct,
        "steps": f.steps,
        "culprit": f.culprit.as_json(),
    }


def path_events(d: Diagnosis, pid: int, base: int) -> Iterator[dict[str, Any]]:
    """The critical path of every step, one slice per segment, on its own process."""
    yield {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "critical path"}}
    yield {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": -1}}
    for s in d.critical_path.to_pylist():
        name = f"{s['kind']}: {s['operator']}" if s["operator"] else s["kind"]
        args = {"rank": s["rank"], "step": s["step"], "kind": s["kind"], "track": s["track"]}
        yield {
            "ph": "X",
            "cat": "critical_path",
            "name": name,
            "pid": pid,
            "tid": 0,
            "ts": _us(s["start_ns"], base),
            "dur": (s["end_ns"] - s["start_ns"]) / 1000,
            "args": args,
        }


def write_perfetto(job: Job, out: Path) -> ExportSummary:
    """Write ``job`` as one gzip Chrome trace JSON at ``out`` (written beside it, then renamed into place)."""
    d = job.diagnosis()
    base = _first_start(job)
    names = {r: process_name(r, d.layout.coords.get(r), d.layout.size) for r in job.rank_ids}
    tally: Counter[tuple[Any, ...]] = Counter()
    header = {
        "displayTimeUnit": "ns",
        "baseTimeNanoseconds": base,
        "paradiag": {"source": job.source, "ranks": names},
    }
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        with gzip.open(tmp, "wb", compresslevel=5) as fh:
            fh.write(_encode(header)[:-1] + b',"traceEvents":[\n')
            for i, event in enumerate(_events(job, d, base, names)):
                tally[(event["ph"], event.get("cat") if event["ph"] != "X" else event["pid"])] += 1
                fh.write((b",\n" if i else b"") + _encode(event))
            fh.write(b"\n]}\n")
        tmp.replace(out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return ExportSummary(
        path=out,
        events={r: tally[("X", r)] for r in job.rank_ids},
        collective_flows=tally[("s", COLLECTIVE_FLOW)],
        p2p_flows=tally[("s", P2P_FLOW)],
        findings=tally[("i", "finding")],
        path_segments=d.critical_path.num_rows,
    )


def _events(job: Job, d: Diagnosis, base: int, names: dict[int, str]) -> Iterator[dict[str, Any]]:
    """Every event of the export: the ranks', the flows, the findings, the critical path."""
    for rank in job.rank_ids:
        yield from _rank_events(job, rank, base, names)
    ids = itertools.count(1)
    yield from collective_flows(d, base, ids)
    yield from p2p_flows(d, base, ids)
    yield from finding_events(d, job, base)
    yield from path_events(d, max(job.rank_ids, default=-1) + 1, base)


def _first_start(job: Job) -> int:
    """The earliest event start (the trace's time zero), whole microseconds so that relative times stay exact:
    times before a step (or in a job without steps) are then positive and small too."""
    firsts = [
        pc.min(job.events(ranks=[r], columns=["start_ns"]).column("start_ns")).as_py() for r in job.rank_ids
    ]
    known = [t for t in firsts if t is not None]
    return min(known) // 1000 * 1000 if known else 0


@click.command()
@path_argument
@click.option(
    "--perfetto",
    "perfetto",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The Chrome trace JSON to write (gzip; name it .json.gz) for ui.perfetto.dev.",
)
@cache_option
@strict_option
@workers_option
@window_option
def export(
    path: Path | str,
    perfetto: Path,
    cache: Path | str | None,
    strict: bool,
    workers: int | None,
    window: int | None,
) -> None:
    """Write PATH as one aligned multi-rank trace for Perfetto: a process per rank named by its mesh
    coordinates, flows joining collective members and send/recv pairs, findings as instant events."""
    job = open_for_command(path, cache, strict=strict, workers=workers, window=window)
    print_problems(job)
    if not perfetto.parent.is_dir():
        raise click.ClickException(f"{perfetto}: folder {perfetto.parent} does not exist")
    try:
        summary = write_perfetto(job, perfetto)
    except OSError as exc:
        raise click.ClickException(f"{perfetto}: {exc.strerror or exc}") from exc
    click.echo(
        f"{sum(summary.events.values()):,} events of {len(summary.events)} ranks, {summary.collective_flows:,} collective "
        f"and {summary.p2p_flows:,} send/recv flows, {summary.findings} finding marks, {summary.path_segments:,} "
        f"critical-path segments -> {summary.path}",
        file=sys.stdout,
    )
