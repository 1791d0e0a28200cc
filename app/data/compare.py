"""The ``paradiag.compare/1`` document for a baseline job and the current job, computed once per pair of job
contents from the two jobs' reports and per-operator times (both in their Diagnoses)."""

from __future__ import annotations

from typing import Any

from paradiag.analysis.compare import CompareDoc, compare
from paradiag.app import store
from paradiag.app.data.common import diagnosis
from paradiag.app.data.overview import report
from paradiag.job import Job


def operators_of(job: Job) -> dict[str, dict[str, Any]]:
    return diagnosis(job).operator_times


def compare_jobs(baseline: Job, candidate: Job) -> CompareDoc:
    """How ``candidate`` differs from ``baseline``: step time, ranks, stages, operators, findings, top change."""
    return store.memo(
        "compare",
        candidate,
        store.scope(baseline),
        lambda: compare(report(baseline), report(candidate), operators_of(baseline), operators_of(candidate)),
    )
