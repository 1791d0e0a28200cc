"""The overview heatmap follows the selection, its metric and which groups are expanded."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from dash import Dash, Input, Output, State, no_update

from paradiag.app import context, ids
from paradiag.app.data.overview import METRICS, heatmap_rows, overview
from paradiag.app.figures.heatmap import heatmap_figure

MAX_ROWS = 32


def render_heatmap(sel: dict[str, Any] | None, metric: str, expanded: list[str] | None) -> go.Figure:
    if not sel or not sel.get("job"):
        return no_update
    ov = overview(context.job(sel["job"]))
    rows = heatmap_rows(ov, metric, expanded, MAX_ROWS)
    return heatmap_figure(rows, ov["steps"], metric, METRICS[metric], {"ranks": sel.get("ranks"), "step": sel.get("step")})


def toggle_group(click: dict[str, Any] | None, expanded: list[str] | None, sel: dict[str, Any] | None, metric: str) -> list[str] | Any:
    """A click on a group row expands it (and a click on one of its ranks' rows does not collapse it)."""
    if not click or not sel or not sel.get("job"):
        return no_update
    ov = overview(context.job(sel["job"]))
    rows = heatmap_rows(ov, metric, expanded, MAX_ROWS)
    row = rows[int(click["points"][0]["y"])] if int(click["points"][0]["y"]) < len(rows) else None
    if row and row.get("group") and len(row["ranks"]) > 1:
        return [*(expanded or []), row["group"]]
    return no_update


def register(app: Dash) -> None:
    app.callback(Output(ids.HEATMAP, "figure"), Input(ids.SELECTION, "data"), Input(ids.HEATMAP_METRIC, "value"), Input(ids.HEATMAP_EXPAND, "data"))(render_heatmap)
    app.callback(
        Output(ids.HEATMAP_EXPAND, "data"),
        Input(ids.HEATMAP, "clickData"),
        State(ids.HEATMAP_EXPAND, "data"),
        State(ids.SELECTION, "data"),
        State(ids.HEATMAP_METRIC, "value"),
    )(toggle_group)
