"""The ``paradiag.report/1`` document: the stable machine interface of ``paradiag analyze --json``.

Documented in docs/report.md; the snapshot and CI gating read it. Fields are only ever added. The one formatter
of the JSON report: it shapes the job's stored :class:`Diagnosis` (and the job's own tables), it computes nothing.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from paradiag.analysis.breakdown import Breakdown, convention_breakdown
from paradiag.analysis.critical_path import composition
from paradiag.analysis.diagnosis_types import Diagnosis, breakdowns_of
from paradiag.analysis.findings import MIN_IMPACT_PCT

if TYPE_CHECKING:
    from paradiag.dataset import Job

REPORT_SCHEMA = "paradiag.report/1"


def job_facts(job: Job, diagnosis: Diagnosis) -> dict[str, Any]:
    ranks = job.ranks
    world = [w for w in ranks.column("world_size").to_pylist() if w is not None]
    device_types = sorted(set(ranks.column("device_type").cast(pa.string()).to_pylist()))
    steps = sorted(set(job.steps.column("step").to_pylist()))
    return {
        "source": job.source,
        "content_hash": job.content_hash,
        "ranks": job.rank_ids,
        "num_ranks": ranks.num_rows,
        "world_size": max(world) if world else ranks.num_rows,
        "device_type": device_types[0] if len(device_types) == 1 else "mixed",
        "device_types": device_types,
        "formats": job.formats(),
        "parallel_layout": {**diagnosis.layout.as_dict(), "groups": [asdict(g) for g in diagnosis.groups]},
        "steps": steps,
        "num_events": int(sum(ranks.column("num_events").to_pylist())),
        "clock_alignment": {
            "instances": job.manifest.get("alignment", {}).get("instances", 0),
            "offsets_ns": dict(
                zip(map(str, job.rank_ids), ranks.column("clock_offset_ns").to_pylist(), strict=True)
            ),
            "uncertainty_ns": dict(
                zip(map(str, job.rank_ids), ranks.column("clock_uncertainty_ns").to_pylist(), strict=True)
            ),
        },
        "problems": [p.__dict__ for p in job.problems],
    }


def rank_entries(job: Job, d: Diagnosis) -> list[dict[str, Any]]:
    """Per rank: identity, the breakdown over all profiled steps, per-step figures, and the waits."""
    breakdowns = _breakdowns_by_rank(d)
    waits = d.waits()
    steps = _steps_by_rank(job.steps)
    out = []
    for row in job.ranks.to_pylist():
        rank = row["rank"]
        mine = breakdowns.get(rank, {})
        per_step = [
            {
                "step": s["step"],
                "step_time_ns": s["end_ns"] - s["start_ns"],
                "device_span_ns": (s["device_end_ns"] - s["device_start_ns"])
                if s["device_start_ns"] is not None
                else None,
                "breakdown": _as_dict(mine.get(s["step"])),
            }
            for s in steps.get(rank, [])
        ]
        times = [s["step_time_ns"] for s in per_step]
        total = mine.get(None)
        wait, caused = waits.get(rank, (0, 0))
        out.append(
            {
                "rank": rank,
                "host": row["host"],
                "device": row["device"],
                "device_type": row["device_type"],
                "format": row["format"],
                "source": row["source"],
                "num_events": row["num_events"],
                "breakdown": _as_dict(total),
                "step_time_ns": {"median": statistics.median(times), "max": max(times), "min": min(times)}
                if times
                else None,
                "steps": per_step,
                "wait_ns": wait,
                "caused_wait_ns": caused,
            }
        )
    return out


def _as_dict(b: Breakdown | None) -> dict[str, Any] | None:
    return b.as_dict() if b else None


def _breakdowns_by_rank(d: Diagnosis) -> dict[int, dict[int | None, Breakdown | None]]:
    out: dict[int, dict[int | None, Breakdown | None]] = {}
    for (rank, step), b in breakdowns_of(d.breakdowns).items():
        out.setdefault(rank, {})[step] = b
    return out


def _steps_by_rank(steps: pa.Table) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for row in steps.sort_by([("rank", "ascending"), ("step", "ascending")]).to_pylist():
        out.setdefault(row["rank"], []).append(row)
    return out


def build_report(job: Job, convention: str | None = None) -> dict[str, Any]:
    """The report of ``job``, from its stored Diagnosis (no event is read), with each rank's breakdown in the
    device's own convention; another ``convention`` (paradiag, hta, ascend) recomputes the ranks' totals."""
    report = report_of(job, job.diagnosis())
    if convention is not None:
        for entry in report["ranks"]:
            entry["breakdown"] = _as_dict(convention_breakdown(job, entry["rank"], convention))
        report["metrics"].update(job_metrics(report["ranks"]))
    return report


def analysis_problems(job: Job, d: Diagnosis, ranks: list[dict[str, Any]]) -> list[dict[str, str]]:
    """What the analysis could not find, as problems of the job (source ``.``, severity ``error``): no profiled
    step, no device or compute activity on any rank, no collective or send/recv between several ranks. Without
    them the breakdown, waits, findings and critical path are empty for want of data, not for want of a fault, and
    every output must say so (``analysed`` false; the snapshot's verdict is "could not analyse")."""
    out = []
    if job.steps.num_rows == 0:
        out.append("no profiled step was found (no ProfilerStep#N or step annotation on any rank): the per-step "
                   "figures, findings and critical path need steps; profile with torch.profiler's schedule and call "
                   "prof.step() once per iteration")  # fmt: skip
    if not any((r["breakdown"] or {}).get("compute_ns") for r in ranks):
        out.append("no device or compute activity was found on any rank (no kernel, no device track, no CPU "
                   "operator in a profiled step): nothing to break down or compare")  # fmt: skip
    if (
        len(job.rank_ids) > 1
        and not d.communication.collective_instances
        and not d.communication.p2p_transfers
    ):
        out.append(f"no collective and no send/recv was found among the {len(job.rank_ids)} ranks: who waits for "
                   "whom, slow links and the critical path across ranks cannot be measured (were the traces recorded "
                   "with the communication activity, and from the same job?)")  # fmt: skip
    return [{"source": ".", "severity": "error", "message": m} for m in out]


def report_of(job: Job, d: Diagnosis) -> dict[str, Any]:
    ranks = rank_entries(job, d)
    facts = job_facts(job, d)
    missing = analysis_problems(job, d, ranks)
    facts["problems"] = [*facts["problems"], *missing]
    facts["analysed"] = not missing
    return {
        "schema": REPORT_SCHEMA,
        "job": facts,
        "ranks": ranks,
        "findings": [f.as_json() for f in d.findings],
        "metrics": {**job_metrics(ranks), **analysis_metrics(d)},
        "critical_path": composition(d.critical_path),
    }


def analysis_metrics(d: Diagnosis) -> dict[str, Any]:
    """The pipeline, communication and operator figures behind the findings."""
    return {
        "pipeline": d.stage_metrics.as_json() if d.stage_metrics else None,
        "communication": asdict(d.communication),
        "communication_matrix": [asdict(c) for c in d.communication_matrix],
        "operator_imbalance": [asdict(o) for o in d.operators[:10]],
        "finding_threshold_pct": MIN_IMPACT_PCT,
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
        metrics[key] = (
            {"mean": round(statistics.fmean(values), 3), "min": min(values), "max": max(values)}
            if values
            else None
        )
    overlaps = [
        r["breakdown"]["overlap_ratio"] for r in with_device if r["breakdown"]["overlap_ratio"] is not None
    ]
    metrics["overlap_ratio"] = round(statistics.fmean(overlaps), 4) if overlaps else None
    return metrics
