"""The compare panel's snapshot render: none (a snapshot is of one job (paradiag compare writes the diff page))."""

from __future__ import annotations

from typing import Any

from paradiag.job import Job


def static(job: Job, report: dict[str, Any]) -> list[tuple[str, Any]]:
    return []
