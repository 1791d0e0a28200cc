"""Per-device detail for the first selected rank in the selected step."""

from __future__ import annotations

from typing import Any

from dash import Dash, Input, Output, no_update

from paradiag.app import context, ids
from paradiag.app.data.detail import detail_data
from paradiag.app.data.mesh import mesh_of
from paradiag.app.figures import detail as fig


def render_detail(sel: dict[str, Any] | None) -> tuple[Any, ...]:
    if not sel or not sel.get("job") or sel.get("step") is None:
        return (no_update,) * 5
    job = context.job(sel["job"])
    rank = (sel.get("ranks") or mesh_of(job).ranks)[0]
    data = detail_data(job, rank, sel["step"], sel.get("op"))
    title = f"rank {rank}, step {sel['step']}, against stage peers {', '.join(map(str, data['peers'])) or '(none)'}"
    return title, fig.operators_figure(data), fig.breakdown_figure(data), fig.distribution_figure(data), fig.collectives_figure(data)


def register(app: Dash) -> None:
    app.callback(
        Output(ids.DETAIL_TITLE, "children"),
        Output(ids.DETAIL_OPERATORS, "figure"),
        Output(ids.DETAIL_BREAKDOWN, "figure"),
        Output(ids.DETAIL_DISTRIBUTION, "figure"),
        Output(ids.DETAIL_COLLECTIVES, "figure"),
        Input(ids.SELECTION, "data"),
    )(render_detail)
