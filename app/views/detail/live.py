"""The device detail, one view unit (its panel, the selection fields it reads, its callback): per-device detail for
the first selected rank (else the first the top finding blames) in the selected step."""

from __future__ import annotations

from typing import Any

from dash import Dash, Output, dcc, html, no_update

from paradiag.app import boundary, context, ids
from paradiag.app.boundary import In, St
from paradiag.app.data.detail import detail_data
from paradiag.app.data.mesh import mesh_of
from paradiag.app.data.overview import focus
from paradiag.app.figures import detail as fig
from paradiag.app.layouts.common import graph
from paradiag.app.layouts.common import panel as panel_of
from paradiag.app.selection import Selection, view_store
from paradiag.job import Job

FIELDS = {"detail": ("job", "step", "ranks", "op")}

# Its place on the job page: the graph its export bar exports, with its table, half a row or not.
EXPORTS = (ids.DETAIL, True)
HALF = True


def detail_rank(job: Job, ranks: list[int] | None) -> int:
    """The rank the detail is about: the first selected, else the first the top finding blames."""
    return (ranks or focus(job)["ranks"] or mesh_of(job).ranks)[0]


def render_detail(view: dict[str, Any] | None, drawn: dict[str, Any] | None = None) -> tuple[Any, ...]:
    """The title and the figure (its four graphs as one), and what they show (``drawn``): the rank, the step and
    the operator whose durations are shown; a selection that changes none of these redraws nothing."""
    sel = Selection.from_store(view)
    if not sel.job or sel.step is None:
        return (no_update,) * 3
    job = context.job(sel.job)
    rank = detail_rank(job, sel.ranks)
    key = [sel.job, sel.step, rank, sel.op]
    if drawn and drawn.get("key") == key:
        return (no_update,) * 3
    data = detail_data(job, rank, sel.step, sel.op)
    peers = data["peers"]
    title = (
        f"rank {rank}, step {sel.step}, against stage peers {', '.join(map(str, peers[:12])) or '(none)'}"
        + (f" and {len(peers) - 12} more" if len(peers) > 12 else "")
    )
    return title, fig.detail_figure(data), {"key": key}


def panel() -> html.Section:
    return panel_of(
        "Device detail",
        html.Div(id=ids.DETAIL_TITLE, className="pd-help"),
        dcc.Store(id=ids.DETAIL_DRAWN, data={}),
        graph(ids.DETAIL, modebar=False),
        class_name="pd-detail",
    )


def register(app: Dash) -> None:
    boundary.callback(
        app,
        Output(ids.DETAIL_TITLE, "children"),
        Output(ids.DETAIL, "figure"),
        Output(ids.DETAIL_DRAWN, "data"),
        In(view_store("detail"), "data", boundary.selection),
        St(ids.DETAIL_DRAWN, "data", boundary.drawn),
        prevent_initial_call=True,
    )(render_detail)
