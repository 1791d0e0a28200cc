"""The overview, one view unit (its panel, the selection fields it reads, its callbacks, its static render): the
step chart and the heatmap. Each is rebuilt when the job (the heatmap: or its metric or
folding) changes; a new selection only moves its marks (a ``Patch`` of the shapes: the cells are not sent again
nor redrawn). One callback per graph decides which, so a new page asks once for each."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from dash import Dash, Output, Patch, ctx, dcc, html, no_update

from paradiag.app import boundary, coerce, context, ids
from paradiag.app.boundary import In
from paradiag.app.data.overview import (
    DEFAULT_METRIC,
    METRICS,
    focus,
    focus_of,
    metric_of,
    overview,
    steps_focus,
)
from paradiag.app.data.shapes import HeatmapMark
from paradiag.app.figures.heatmap import heatmap_figure, heatmap_shapes
from paradiag.app.figures.steps import step_marker, steps_figure
from paradiag.app.layouts.common import graph
from paradiag.app.layouts.common import panel as panel_of
from paradiag.app.selection import Selection, view_store
from paradiag.app.views.overview.static import rows_of
from paradiag.job import Job

# The selection's fields each of its stores holds: the figures are built for a job ("job"); a click moves their
# marks (a Patch of the shapes): the heatmap's the selected ranks and step ("mark"), the step chart's the step
# alone ("step": a click on other ranks of the same step leaves it as it is).
FIELDS = {"job": ("job",), "mark": ("job", "step", "ranks"), "step": ("job", "step")}

# Its place on the job page: the graph its export bar exports, with its table, half a row or not.
EXPORTS = (ids.HEATMAP, True)
HALF = True


def caption(job: Job, metric: str) -> str:
    """The heatmap's title: what the top finding is about and what the cells show."""
    f = focus_of(job)
    shown = metric_of(job, metric)
    return f.caption if shown == f.metric else f"{f.headline}: coloured by {METRICS[shown]}"


def marked(job: Job, mark: Selection) -> HeatmapMark:
    """The cells to outline: the selected ranks and step, else what the top finding is about."""
    top = focus(job)
    return {"ranks": mark.ranks or top["ranks"], "step": mark.step}


def render_heatmap(
    job_view: dict[str, Any] | None, metric: str, expanded: list[str] | None, mark_view: dict[str, Any] | None
) -> go.Figure:
    sel = Selection.from_store(job_view)
    if not sel.job:
        return no_update
    job = context.job(sel.job)
    rows = rows_of(job, metric, expanded)
    shown = metric_of(job, metric)
    return heatmap_figure(
        rows,
        overview(job)["steps"],
        shown,
        METRICS[shown],
        marked(job, Selection.from_store(mark_view)),
        caption=caption(job, metric),
    )


def mark_heatmap(mark_view: dict[str, Any] | None, metric: str, expanded: list[str] | None) -> Any:
    """Only the outline follows a click: the shapes are replaced, the cells are not sent again."""
    sel = Selection.from_store(mark_view)
    if not sel.job:
        return no_update
    job = context.job(sel.job)
    patch = Patch()
    patch["layout"]["shapes"] = heatmap_shapes(
        rows_of(job, metric, expanded), overview(job)["steps"], marked(job, sel)
    )
    return patch


def _mark_alone(store: str) -> bool:
    """Whether the selection's marks alone changed (store ``store``: the heatmap and the step chart then move them
    by a Patch)."""
    return ctx.triggered_id == view_store(store) and len(ctx.triggered) == 1


def heatmap(
    job_view: dict[str, Any] | None, metric: str, expanded: list[str] | None, mark_view: dict[str, Any] | None
) -> Any:
    """The heatmap's callback: the whole figure, or only its outline when the mark alone changed."""
    if _mark_alone("mark"):
        return mark_heatmap(mark_view, metric, expanded)
    return render_heatmap(job_view, metric, expanded, mark_view)


def render_steps(job_view: dict[str, Any] | None, mark_view: dict[str, Any] | None = None) -> go.Figure:
    sel = Selection.from_store(job_view)
    if not sel.job:
        return no_update
    job = context.job(sel.job)
    ov = overview(job)
    f = focus_of(job)
    return steps_figure(
        ov["steps"],
        ov["ranks"],
        ov["metrics"]["step_ms"],
        f.single,
        Selection.from_store(mark_view).step,
        focus=steps_focus(job),
    )


def mark_steps(mark_view: dict[str, Any] | None) -> Any:
    """Only the selected step's line follows a click."""
    sel = Selection.from_store(mark_view)
    if not sel.job:
        return no_update
    patch = Patch()
    patch["layout"]["shapes"] = step_marker(overview(context.job(sel.job))["steps"], sel.step)
    return patch


def steps(job_view: dict[str, Any] | None, mark_view: dict[str, Any] | None) -> Any:
    """The step chart's callback: the whole figure for a new job, else only the marker."""
    if _mark_alone("step"):
        return mark_steps(mark_view)
    return render_steps(job_view, mark_view)


def toggle_group(
    click: dict[str, Any] | None,
    expanded: list[str] | None,
    known: list[Any] | None,
    job_view: dict[str, Any] | None,
    metric: str,
) -> tuple[Any, Any]:
    """A click on a folded row unfolds it: (unfolded groups, the tick boxes of every group unfolded so far). A
    click on a rank's own row selects the rank and folds nothing. Called by the selection reducer, which the
    same click reaches (``paradiag.app.callbacks.selection``)."""
    sel = Selection.from_store(job_view)
    if not click or not sel.job:
        return no_update, no_update
    rows = rows_of(context.job(sel.job), metric, expanded)
    y = coerce.integer((coerce.first_point(click) or {}).get("y"), 0)
    row = rows[y] if y is not None and y < len(rows) else None
    if not row or not row.get("group") or len(row["ranks"]) < 2 or row["group"] in (expanded or []):
        return no_update, no_update
    names = [o["value"] for o in known or []]
    options = (known or []) + (
        [] if row["group"] in names else [{"label": f" {row['group']}", "value": row["group"]}]
    )
    return [*(expanded or []), row["group"]], options


def panel() -> html.Section:
    return panel_of(
        "Overview",
        graph(ids.STEPS, modebar=False),
        html.Div(
            className="pd-toolbar",
            children=[
                dcc.Dropdown(
                    id=ids.HEATMAP_METRIC,
                    options=[{"label": v, "value": k} for k, v in METRICS.items()],
                    value=DEFAULT_METRIC,
                    clearable=False,
                    className="pd-metric",
                ),
                html.Button("fold all", id=ids.HEATMAP_FOLD, className="pd-button"),
            ],
        ),
        # The unfolded groups: a click on a folded row adds one, unticking folds it back.
        dcc.Checklist(id=ids.HEATMAP_EXPAND, options=[], value=[], inline=True, className="pd-unfolded"),
        graph(ids.HEATMAP),
        class_name="pd-overview",
        help_text="steps: click or brush to pick one · heatmap: ranks × steps by stage, blamed ranks outlined red; click a cell, or a folded row to unfold it",
    )


def register(app: Dash) -> None:
    boundary.callback(
        app,
        Output(ids.HEATMAP, "figure"),
        In(view_store("job"), "data", boundary.selection),
        In(ids.HEATMAP_METRIC, "value", boundary.one_of(METRICS, DEFAULT_METRIC)),
        In(ids.HEATMAP_EXPAND, "value", boundary.texts),
        In(view_store("mark"), "data", boundary.selection),
        prevent_initial_call=True,
    )(heatmap)
    boundary.callback(
        app,
        Output(ids.STEPS, "figure"),
        In(view_store("job"), "data", boundary.selection),
        In(view_store("step"), "data", boundary.selection),
        prevent_initial_call=True,
    )(steps)
    boundary.callback(
        app,
        Output(ids.HEATMAP_EXPAND, "value", allow_duplicate=True),
        Output(ids.HEATMAP_EXPAND, "options", allow_duplicate=True),
        In(ids.HEATMAP_FOLD, "n_clicks", boundary.ignored),
        prevent_initial_call=True,
    )(lambda _: ([], []))
