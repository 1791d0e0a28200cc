"""Marey's graph, the execution-flow graph and the communication matrix follow the selection."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from dash import Dash, Input, Output, no_update

from paradiag.app import context, ids
from paradiag.app.data.common import origin_ns
from paradiag.app.data.marey import marey_data
from paradiag.app.figures.common import empty_figure
from paradiag.app.figures.marey import marey_figure


def render_marey(sel: dict[str, Any] | None, expand: list[str] | None) -> go.Figure:
    if not sel or not sel.get("job") or sel.get("step") is None:
        return no_update
    job = context.job(sel["job"])
    window = None
    if sel.get("window"):
        t0 = origin_ns(job)
        window = (t0 + int(sel["window"][0] * 1e6), t0 + int(sel["window"][1] * 1e6))
    data = marey_data(job, sel["step"], window)
    expanded = bool(expand) and "devices" in expand
    return marey_figure(data, expanded=expanded, selected_op=sel.get("op"), uirevision=f"{sel['job']}|{sel['step']}|{expanded}")


def register(app: Dash) -> None:
    app.callback(Output(ids.MAREY, "figure"), Input(ids.SELECTION, "data"), Input(ids.MAREY_EXPAND, "value"))(render_marey)
    app.callback(Output(ids.FLOW, "figure"), Input(ids.SELECTION, "data"))(lambda sel: empty_figure("flow: coming"))
    app.callback(Output(ids.COMM_MATRIX, "figure"), Input(ids.SELECTION, "data"))(lambda sel: empty_figure("comm: coming"))
