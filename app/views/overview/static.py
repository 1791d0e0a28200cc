"""The overview's dash-free part: the heatmap's rows (the live view's rule too: ``live.py`` draws them) and the
snapshot's render of the first screen."""

from __future__ import annotations

from typing import Any

from paradiag.app.data.overview import (
    HEATMAP_MAX_ROWS,
    METRICS,
    focus_of,
    heatmap_rows,
    metric_of,
    overview,
    steps_focus,
)
from paradiag.app.data.shapes import HeatmapRow
from paradiag.app.figures.heatmap import heatmap_figure
from paradiag.app.figures.steps import steps_figure
from paradiag.job import Job

MAX_ROWS = HEATMAP_MAX_ROWS


def rows_of(job: Job, metric: str, expanded: list[str] | None) -> list[HeatmapRow]:
    """The heatmap's rows: the ranks the focus keeps single on rows of their own, the blamed ones marked."""
    f = focus_of(job)
    return heatmap_rows(
        overview(job), metric_of(job, metric), expanded, MAX_ROWS, f.blamed, set(f.single), f.reasons
    )


def static(job: Job, report: dict[str, Any]) -> list[tuple[str, Any]]:
    """The first screen as the dashboard opens it: its focus (``paradiag.analysis.focus``), metric, rows and caption."""
    ov = overview(job)
    f = focus_of(job)
    rows = rows_of(job, f.metric, None)
    steps_fig = steps_figure(
        ov["steps"], ov["ranks"], ov["metrics"]["step_ms"], f.single, f.step, focus=steps_focus(job)
    )
    heat = heatmap_figure(
        rows, ov["steps"], f.metric, METRICS[f.metric], {"ranks": f.ranks, "step": f.step}, caption=f.caption
    )
    return [("Step time", steps_fig), (f"Overview: {METRICS[f.metric]} per rank and step", heat)]
