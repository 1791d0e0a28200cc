"""The ``paradiag.report/1`` document: the stable machine interface of ``paradiag analyze --json``.

Documented in docs/report.md; the snapshot and CI gating read it. Fields are only ever added. The one formatter
of the JSON report: it shapes the job's stored :class:`Diagnosis` (and the job's own tables), it computes nothing.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict, cast

import pyarrow as pa

from paradiag.analysis.breakdown import Breakdown, convention_breakdown
from paradiag.analysis.critical_path import composition
from paradiag.analysis.diagnosis_types import Diagnosis, breakdowns_of
from paradiag.analysis.findings import MIN_IMPACT_PCT

if TYPE_CHECKING:
    from paradiag.job import Job

REPORT_SCHEMA = "paradiag.report/1"

# The document's shapes (docs/report.md, docs/report.schema.json), as TypedDicts: plain dicts at run time, checked by
# mypy where they are built (here) and read (the app, the snapshot, the CLI), so that a renamed key fails the type
# check. The analysis' own sub-documents (findings, pipeline, communication, critical path) are its dataclasses'
# JSON forms (``paradiag.analysis.diagnosis_types``).


class BreakdownJson(TypedDict):
    """A rank's time over a window (``Breakdown.as_dict``): ns, and the shares of the window in %."""

    window_ns: int
    compute_ns: int
    comm_ns: int
    comm_overlapped_ns: int
    comm_exposed_ns: int
    memory_ns: int
    memory_exposed_ns: int
    sync_exposed_ns: int
    idle_ns: int
    overlap_ratio: float | None  # overlapped communication over all communication
    compute_pct: float
    comm_exposed_pct: float
    memory_exposed_pct: float
    sync_exposed_pct: float
    idle_pct: float


# The breakdown's shares the job's metrics summarise over the ranks.
PctKey = Literal["compute_pct", "comm_exposed_pct", "memory_exposed_pct", "sync_exposed_pct", "idle_pct"]
PCT_KEYS: tuple[PctKey, ...] = (
    "compute_pct",
    "comm_exposed_pct",
    "memory_exposed_pct",
    "sync_exposed_pct",
    "idle_pct",
)


class Problem(TypedDict):
    """Something wrong with a source (``paradiag.job.Problem``), or with the analysis (source ".")."""

    source: str
    severity: str  # "error" (skipped, or not analysed) or "warning"
    message: str


class ClockAlignment(TypedDict):
    instances: int  # collective instances the clocks were aligned on
    offsets_ns: dict[str, int | None]  # per rank (as a string)
    uncertainty_ns: dict[str, int | None]


class JobFacts(TypedDict):
    source: str
    content_hash: str
    ranks: list[int]
    num_ranks: int
    world_size: int
    device_type: str  # the devices' type, "mixed" where they differ
    device_types: list[str]
    formats: list[str]
    parallel_layout: dict[str, Any]  # ``Layout.as_dict`` and the groups
    steps: list[int]
    num_events: int
    clock_alignment: ClockAlignment
    problems: list[Problem]
    analysed: NotRequired[
        bool
    ]  # false where the analysis lacked data (its problems say what): report_of sets it


class StepTimes(TypedDict):
    """A rank's step times over the profiled steps (ns)."""

    median: float
    max: int
    min: int


class RankStep(TypedDict):
    step: int
    step_time_ns: int
    device_span_ns: int | None  # first device start to last device end; None without device work
    breakdown: BreakdownJson | None


class RankEntry(TypedDict):
    rank: int
    host: str | None
    device: int | None
    device_type: str
    format: str
    source: str
    num_events: int
    breakdown: BreakdownJson | None  # over all profiled steps; None without device work
    step_time_ns: StepTimes | None  # None without a profiled step
    steps: list[RankStep]
    wait_ns: int  # waiting for others in collectives and receives
    caused_wait_ns: int  # the others' wait for it


class Spread(TypedDict):
    mean: float
    min: float
    max: float


class JobStepTime(TypedDict):
    median: float | None  # the median over the ranks of each rank's median step time
    max_rank_median: float | None


class JobMetrics(TypedDict):
    """The job's summary over its ranks with device work (:func:`job_metrics`)."""

    step_time_ns: JobStepTime
    compute_pct: Spread | None
    comm_exposed_pct: Spread | None
    memory_exposed_pct: Spread | None
    sync_exposed_pct: Spread | None
    idle_pct: Spread | None
    overlap_ratio: float | None


class AnalysisMetrics(TypedDict):
    """The pipeline, communication and operator figures behind the findings (:func:`analysis_metrics`)."""

    pipeline: dict[str, Any] | None  # ``StageMetrics.as_json``; None without a pipeline
    communication: dict[str, Any]  # ``CommunicationSummary``
    communication_matrix: list[dict[str, Any]]  # ``CommLink`` each
    operator_imbalance: list[dict[str, Any]]  # ``OperatorImbalance`` each, the top ones
    finding_threshold_pct: float


class Metrics(JobMetrics, AnalysisMetrics):
    pass


class Report(TypedDict):
    """The ``paradiag.report/1`` document."""

    schema: str
    job: JobFacts
    ranks: list[RankEntry]
    findings: list[dict[str, Any]]  # ``Finding.as_json`` each, largest impact first
    metrics: Metrics
    critical_path: list[dict[str, Any]]  # per step (``critical_path.composition``)
    verdict: NotRequired[dict[str, Any]]  # the snapshot's verdict JSON only (``paradiag.gate.verdict``)


def job_facts(job: Job, diagnosis: Diagnosis) -> JobFacts:
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
        "problems": [cast(Problem, p.__dict__) for p in job.problems],
    }


def rank_entries(job: Job, d: Diagnosis) -> list[RankEntry]:
    """Per rank: identity, the breakdown over all profiled steps, per-step figures, and the waits."""
    breakdowns = _breakdowns_by_rank(d)
    waits = d.waits()
    steps = _steps_by_rank(job.steps)
    out: list[RankEntry] = []
    for row in job.ranks.to_pylist():
        rank = row["rank"]
        mine = breakdowns.get(rank, {})
        per_step: list[RankStep] = [
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


def _as_dict(b: Breakdown | None) -> BreakdownJson | None:
    return cast(BreakdownJson, b.as_dict()) if b else None


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


def build_report(job: Job, convention: str | None = None) -> Report:
    """The report of ``job``, from its stored Diagnosis (no event is read), with each rank's breakdown in the
    device's own convention; another ``convention`` (paradiag, hta, ascend) recomputes the ranks' totals."""
    report = report_of(job, job.diagnosis())
    if convention is not None:
        for entry in report["ranks"]:
            entry["breakdown"] = _as_dict(convention_breakdown(job, entry["rank"], convention))
        report["metrics"].update(job_metrics(report["ranks"]))
    return report


def analysis_problems(job: Job, d: Diagnosis, ranks: list[RankEntry]) -> list[Problem]:
    """What the analysis could not find, as problems of the job (source ``.``, severity ``error``): no profiled
    step, no device or compute activity on any rank, no collective or send/recv between several ranks. Without
    them the breakdown, waits, findings and critical path are empty for want of data, not for want of a fault, and
    every output must say so (``analysed`` false; the snapshot's verdict is "could not analyse")."""
    out = []
    if job.steps.num_rows == 0:
        out.append("no profiled step was found (no ProfilerStep#N or step annotation on any rank): the per-step "
                   "figures, findings and critical path need steps; profile with torch.profiler's schedule and call "
                   "prof.step() once per iteration")  # fmt: skip
    if not any(r["breakdown"] is not None and r["breakdown"]["compute_ns"] for r in ranks):
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


def report_of(job: Job, d: Diagnosis) -> Report:
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


def analysis_metrics(d: Diagnosis) -> AnalysisMetrics:
    """The pipeline, communication and operator figures behind the findings."""
    return {
        "pipeline": d.stage_metrics.as_json() if d.stage_metrics else None,
        "communication": asdict(d.communication),
        "communication_matrix": [asdict(c) for c in d.communication_matrix],
        "operator_imbalance": [asdict(o) for o in d.operators[:10]],
        "finding_threshold_pct": MIN_IMPACT_PCT,
    }


def job_metrics(ranks: list[RankEntry]) -> JobMetrics:
    """Job-level summary over the ranks with device work."""
    with_device = [r["breakdown"] for r in ranks if r["breakdown"]]
    step_medians = [r["step_time_ns"]["median"] for r in ranks if r["step_time_ns"]]
    spread: dict[PctKey, Spread | None] = {}
    for key in PCT_KEYS:
        values = [b[key] for b in with_device]
        spread[key] = (
            {"mean": round(statistics.fmean(values), 3), "min": min(values), "max": max(values)}
            if values
            else None
        )
    overlaps = [b["overlap_ratio"] for b in with_device if b["overlap_ratio"] is not None]
    return {
        "step_time_ns": {
            "median": statistics.median(step_medians) if step_medians else None,
            "max_rank_median": max(step_medians) if step_medians else None,
        },
        "compute_pct": spread["compute_pct"],
        "comm_exposed_pct": spread["comm_exposed_pct"],
        "memory_exposed_pct": spread["memory_exposed_pct"],
        "sync_exposed_pct": spread["sync_exposed_pct"],
        "idle_pct": spread["idle_pct"],
        "overlap_ratio": round(statistics.fmean(overlaps), 4) if overlaps else None,
    }
