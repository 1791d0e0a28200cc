"""One pass over a job's tables that computes everything the report, the CLI and the dashboard show.

``diagnose(job)`` reads the device events once and returns a :class:`Diagnosis` holding the layout, the
collective and send/recv tables, the pipeline passes, the stage and operator figures and the ranked findings.
Each piece comes from a pure function of the tables (``layout``, ``comm``, ``stages``, ``operators``,
``findings``); this module only chains them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from paradiag.analysis import comm, findings, stages
from paradiag.analysis.frame import Frame, job_frame
from paradiag.analysis.layout import Layout, parallel_layout
from paradiag.analysis.operators import operator_imbalance

if TYPE_CHECKING:
    from paradiag.dataset import Job


@dataclass
class Diagnosis:
    frame: Frame
    layout: Layout
    participation: pa.Table  # per (rank, collective instance): arrival, wait, transfer
    instances: pa.Table  # per collective instance: skew, late rank, transfer, bus bandwidth
    p2p: pa.Table  # per matched send/recv pair
    passes: pa.Table  # per rank, step, micro-batch and direction: the pipeline pass
    stage_metrics: dict[str, Any]
    figures: dict[tuple[int, int], dict[str, int]]  # per (rank, step): compute, idle, step time
    waits: dict[tuple[int, int], dict[str, int]]  # per (rank, step): waited, caused others to wait
    operators: list[dict[str, Any]]
    step_time_ns: float
    findings: list[dict[str, Any]]


def peer_sets(layout: Layout) -> list[list[int]]:
    """Ranks that should do the same work: the ranks of one pipeline stage."""
    return [s for s in layout.stages if s]


def diagnose(job: Job, events_by_rank: dict[int, pa.Table] | None = None) -> Diagnosis:
    """Everything about ``job``; ``events_by_rank`` (rank -> its events) avoids reading them again."""
    frame = job_frame(job, events_by_rank)
    layout = parallel_layout(job.ranks, job.groups, frame)
    members = {g: list(m) for g, m in zip(job.groups.column("group").to_pylist(), job.groups.column("ranks").to_pylist(), strict=True)}
    host_of = dict(zip(job.ranks.column("rank").to_pylist(), job.ranks.column("host").to_pylist(), strict=True))
    participation = comm.collective_participation(frame)
    instances = comm.collective_instances(participation)
    p2p = comm.p2p_transfers(frame)
    waits = comm.rank_waits(participation, p2p)
    figures = findings.rank_step_figures(frame, job.steps)
    step_ns = float(statistics.median(f["step_ns"] for f in figures.values())) if figures else 0.0
    virtual = stages.virtual_stages(frame, layout.stages[0] if layout.stages else [], layout.size["pp"])
    passes = stages.all_passes(frame, layout.stage_of, virtual, layout.size["pp"])
    metrics = stages.stage_metrics(passes, layout.stages, virtual, step_ns)
    if metrics:
        metrics["schedule"] = stages.schedule_kind(passes, layout.size["pp"], virtual)
    peers = peer_sets(layout)
    steps_total = len({s for _, s in figures}) or 1
    found: list[dict[str, Any]] = []
    if step_ns > 0:
        ep_of = {r: c["ep"] for r, c in layout.coords.items()}
        found += findings.rank_findings(frame, figures, peers, ep_of, waits, step_ns)
        found += findings.stage_findings(metrics)
        found += findings.link_findings(instances, p2p, members, host_of, step_ns, steps_total, job.extra("links"))
    found += findings.clock_findings(job.ranks)
    return Diagnosis(
        frame=frame,
        layout=layout,
        participation=participation,
        instances=instances,
        p2p=p2p,
        passes=passes,
        stage_metrics=metrics,
        figures=figures,
        waits=waits,
        operators=operator_imbalance(frame, peers),
        step_time_ns=step_ns,
        findings=findings.ranked(found),
    )
