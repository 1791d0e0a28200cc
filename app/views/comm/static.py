"""The communication matrix's dash-free part: the snapshot's render, the whole job's matrix coloured by slowness."""

from __future__ import annotations

from typing import Any

from paradiag.app.data.comm import view
from paradiag.app.figures.comm import comm_figure
from paradiag.job import Job


def static(job: Job, report: dict[str, Any]) -> list[tuple[str, Any]]:
    return [
        (
            "Communication matrix (how much slower each link is than comparable links)",
            comm_figure(view(job), "slowness"),
        )
    ]
