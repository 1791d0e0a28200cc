"""The execution-flow graph's snapshot render: none (the snapshot has no flow graph)."""

from __future__ import annotations

from typing import Any

from paradiag.job import Job


def static(job: Job, report: dict[str, Any]) -> list[tuple[str, Any]]:
    return []
