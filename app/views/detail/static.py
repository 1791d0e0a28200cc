"""The device detail's snapshot render: none (the snapshot's per-rank table (paradiag.app.static_page) stands for it)."""

from __future__ import annotations

from typing import Any

from paradiag.job import Job


def static(job: Job, report: dict[str, Any]) -> list[tuple[str, Any]]:
    return []
