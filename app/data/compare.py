"""The ``paradiag.compare/1`` document for a baseline job and the current job, computed once per pair of job
contents (and each job's per-operator times once per job)."""

from __future__ import annotations

from typing import Any

from paradiag.analysis.compare import compare, operator_times
from paradiag.analysis.frame import job_frame
from paradiag.app import store
from paradiag.app.data.common import steps_of
from paradiag.app.data.overview import report
from paradiag.dataset import Job


def operators_of(job: Job) -> dict[str, dict[str, Any]]:
    return store.memo("operator-times", job.content_hash, 1, lambda: operator_times(job_frame(job), len(steps_of(job))))


def compare_jobs(baseline: Job, candidate: Job) -> dict[str, Any]:
    """How ``candidate`` differs from ``baseline``: step time, ranks, stages, operators, findings, top change."""
    return store.memo("compare", candidate.content_hash, baseline.content_hash, lambda: compare(report(baseline), report(candidate), operators_of(baseline), operators_of(candidate)))
