"""The ``paradiag.report/1`` document: the stable machine interface of ``paradiag analyze --json``.

Documented in docs/report.md; the snapshot and CI gating read it. Fields are only ever added.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from paradiag.analysis import comm
from paradiag.analysis.breakdown import BREAKDOWN_COLUMNS, rank_breakdown, rank_steps, step_breakdowns
from paradiag.analysis.diagnose import Diagnosis, diagnose
from paradiag.analysis.findings import MIN_IMPACT_PCT
from paradiag.analysis.frame import COLUMNS as FRAME_COLUMNS

if TYPE_CHECKING:
    from paradiag.dataset import Job

REPORT_SCHEMA = "paradiag.report/1"
EVENT_COLUMNS = tuple(dict.fromkeys((*FRAME_COLUMNS, *BREAKDOWN_COLUMNS)))


def job_facts(job: Job, diagnosis: Diagnosis | None = None) -> dict[str, Any]:
    ranks = job.ranks
    world = [w for w in ranks.column("world_size").to_pylist() if w is not None]
    device_types = sorted(set(ranks.column("device_type").cast(pa.string()).to_pylist()))
    steps = sorted(set(job.steps.column("step").to_pylist()))
    layout = {axis: _single(ranks.column(axis).to_pylist()) for axis in ("dp", "tp", "pp", "ep")}
    stated = {**layout, "found_by": "metadata" if any(v is not None for v in layout.values()) else None}
    return {
        "source": job.source,
        "content_hash": job.content_hash,
        "ranks": job.rank_ids,
        "num_ranks": ranks.num_rows,
        "world_size": max(world) if world else ranks.num_rows,
        "device_type": device_types[0] if len(device_types) == 1 else "mixed",
        "device_types": device_types,
        "formats": job.formats(),
        "parallel_layout": diagnosis.layout.as_dict() if diagnosis else stated,
        "steps": steps,
        "num_events": int(sum(ranks.column("num_events").to_pylist())),
        "clock_alignment": {
            "instances": job.manifest.get("alignment", {}).get("instances", 0),
            "offsets_ns": dict(zip(map(str, job.rank_ids), ranks.column("clock_offset_ns").to_pylist(), strict=True)),
            "uncertainty_ns": dict(zip(map(str, job.rank_ids), ranks.column("clock_uncertainty_ns").to_pylist(), strict=True)),
        },
        "problems": [p.__dict__ for p in job.problems],
    }


def _single(values: list[Any]) -> Any:
    present = {v for v in values if v is not None}
    return present.pop() if len(present) == 1 else None


def rank_entries(job: Job, events_by_rank: dict[int, pa.Table] | None = None) -> list[dict[str, Any]]:
    """Per rank: identity, the breakdown over all profiled steps, and per-step figures."""
    out = []
    for row in job.ranks.to_pylist():
        rank = row["rank"]
        events = events_by_rank[rank] if events_by_rank and rank in events_by_rank else job.events(ranks=[rank])
        # The breakdown looks at device events only: dropping host rows first halves its work.
        events = events.filter(pc.greater_equal(events.column("device"), 0))
        steps = rank_steps(job.steps, rank)
        step_ids = steps.column("step").to_pylist()
        total = rank_breakdown(events, step_ids)
        per_step = step_breakdowns(events, steps)
        times = [s["step_time_ns"] for s in per_step]
        out.append(
            {
                "rank": rank,
                "host": row["host"],
                "device": row["device"],
                "device_type": row["device_type"],
                "format": row["format"],
                "source": row["source"],
                "num_events": row["num_events"],
                "breakdown": total.as_dict() if total else None,
                "step_time_ns": {"median": statistics.median(times), "max": max(times), "min": min(times)} if times else None,
                "steps": per_step,
            }
        )
    return out


def build_report(job: Job) -> dict[str, Any]:
    # Each rank's events are read once and serve both the breakdown and the diagnosis.
    events_by_rank = {r: job.events(ranks=[r], columns=EVENT_COLUMNS) for r in job.rank_ids}
    diagnosis = diagnose(job, events_by_rank)
    ranks = rank_entries(job, events_by_rank)
    for entry in ranks:
        mine = [w for (r, _), w in diagnosis.waits.items() if r == entry["rank"]]
        entry["wait_ns"] = sum(w["wait_ns"] for w in mine)
        entry["caused_wait_ns"] = sum(w["caused_ns"] for w in mine)
    return {
        "schema": REPORT_SCHEMA,
        "job": job_facts(job, diagnosis),
        "ranks": ranks,
        "findings": diagnosis.findings,
        "metrics": {**job_metrics(ranks), **analysis_metrics(job, diagnosis)},
    }


def analysis_metrics(job: Job, d: Diagnosis) -> dict[str, Any]:
    """The pipeline, communication and operator figures behind the findings."""
    members = {g: list(m) for g, m in zip(job.groups.column("group").to_pylist(), job.groups.column("ranks").to_pylist(), strict=True)}
    host_of = dict(zip(job.ranks.column("rank").to_pylist(), job.ranks.column("host").to_pylist(), strict=True))
    return {
        "pipeline": d.stage_metrics or None,
        "communication": communication_summary(d),
        "communication_matrix": comm.comm_matrix(d.instances, d.p2p, members, host_of),
        "operator_imbalance": d.operators[:10],
        "finding_threshold_pct": MIN_IMPACT_PCT,
    }


def communication_summary(d: Diagnosis) -> dict[str, Any]:
    """Arrival skew over the collective instances, and bus bandwidth per collective kind (medians)."""
    inst = d.instances.to_pydict()
    skew = sorted(inst["skew_ns"])
    by_kind: dict[str, list[float]] = {}
    for kind, bw in zip(inst["collective"], inst["busbw_gbps"], strict=True):
        if bw == bw:  # not NaN
            by_kind.setdefault(kind, []).append(bw)
    late: dict[int, int] = {}
    for rank, wait in zip(inst["late_rank"], inst["total_wait_ns"], strict=True):
        late[rank] = late.get(rank, 0) + wait
    return {
        "collective_instances": len(skew),
        "p2p_transfers": d.p2p.num_rows,
        "arrival_skew_ns": {"median": statistics.median(skew), "p95": skew[int(0.95 * (len(skew) - 1))], "max": skew[-1]} if skew else None,
        "busbw_gbps_median": {k: round(statistics.median(v), 3) for k, v in sorted(by_kind.items())},
        "caused_wait_ns_top": [{"rank": r, "caused_wait_ns": w} for r, w in sorted(late.items(), key=lambda kv: -kv[1])[:5]],
    }


def job_metrics(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Job-level summary over the ranks with device work."""
    with_device = [r for r in ranks if r["breakdown"]]
    step_medians = [r["step_time_ns"]["median"] for r in ranks if r["step_time_ns"]]
    metrics: dict[str, Any] = {
        "step_time_ns": {
            "median": statistics.median(step_medians) if step_medians else None,
            "max_rank_median": max(step_medians) if step_medians else None,
        }
    }
    for key in ("compute_pct", "comm_exposed_pct", "memory_exposed_pct", "sync_exposed_pct", "idle_pct"):
        values = [r["breakdown"][key] for r in with_device]
        metrics[key] = {"mean": round(statistics.fmean(values), 3), "min": min(values), "max": max(values)} if values else None
    overlaps = [r["breakdown"]["overlap_ratio"] for r in with_device if r["breakdown"]["overlap_ratio"] is not None]
    metrics["overlap_ratio"] = round(statistics.fmean(overlaps), 4) if overlaps else None
    return metrics
