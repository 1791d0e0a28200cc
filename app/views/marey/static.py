"""Marey's graph's dash-free part: the snapshot's render of the step a new page opens on, with its critical path
and what that is."""

from __future__ import annotations

from html import escape
from typing import Any

from paradiag.app.data.marey import critical_path, marey_data
from paradiag.app.data.overview import focus_of, opening_step
from paradiag.app.figures.marey import marey_figure
from paradiag.job import Job

# The snapshot's bands: neighbouring bands closer than 1% of the step merge (the live view refines on zoom).
STATIC_MERGE_FRAC = 0.01


def static(job: Job, report: dict[str, Any]) -> list[tuple[str, Any]]:
    """The snapshot's Marey graph of the step a new page opens on, with its critical path and what that is."""
    step = opening_step(job)
    if step is None:
        return []
    fig = marey_figure(
        marey_data(job, step, None, merge_frac=STATIC_MERGE_FRAC), path=critical_path(job, step)
    )
    which = "the step the top finding cites" if step == focus_of(job).step else "the slowest step"
    return [
        (f"Marey's graph of step {step} ({which}) with its critical path", (path_text(report, step), fig))
    ]


def path_text(report: dict[str, Any], step: int) -> str:
    """What the thick line in the snapshot's Marey graph is: the step's critical path, its length and parts."""
    from paradiag.analysis.critical_path import critical_path_line

    found = next((c for c in report.get("critical_path", []) if c["step"] == step), None)
    what = escape(critical_path_line(found)) + "." if found else "No critical path was found for this step."
    return f"<p>The thick orange line is the step's critical path: the work that set the step's end, through the ranks it passed (hover for each piece's kind, rank, operator and duration). {what}</p>"
