"""Marey's graph, the execution-flow graph and the communication matrix."""

from __future__ import annotations

from typing import Any

from dash import Dash, Input, Output

from paradiag.app import ids
from paradiag.app.figures.common import empty_figure


def render_marey(sel: dict[str, Any] | None, expand: list[str] | None) -> Any:
    return empty_figure("Marey's graph: coming")


def register(app: Dash) -> None:
    app.callback(Output(ids.MAREY, "figure"), Input(ids.SELECTION, "data"), Input(ids.MAREY_EXPAND, "value"))(render_marey)
    app.callback(Output(ids.FLOW, "figure"), Input(ids.SELECTION, "data"))(lambda sel: empty_figure("flow: coming"))
    app.callback(Output(ids.COMM_MATRIX, "figure"), Input(ids.SELECTION, "data"))(lambda sel: empty_figure("comm: coming"))
