"""The execution-flow graph, one view unit: operators in execution order per stage, repeated layers collapsed;
its panel, the selection fields it reads, its callbacks. (The snapshot has no flow graph.)"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from dash import Dash, Output, Patch, dcc, html, no_update

from paradiag.app import boundary, coerce, context, ids, store
from paradiag.app.boundary import In, St
from paradiag.app.data.common import Kept
from paradiag.app.data.flow import flow_p2p, flow_view
from paradiag.app.figures.flow import flow_figure, ring
from paradiag.app.layouts.common import graph
from paradiag.app.layouts.common import panel as panel_of
from paradiag.app.selection import view_store
from paradiag.app.views import drawn_once

FIELDS = {"flow": ("job", "step", "op", "stage", "at")}

# The last steps' flow data drawn, per process: read back from the store (14 ms at 256 ranks) by every callback
# that rings a node in one. Read only: the figure builder copies what it draws.
RECENT_STEPS = 8
_recent = Kept(RECENT_STEPS)

# Its place on the job page: the graph its export bar exports, with its table, half a row or not.
EXPORTS = (ids.FLOW, True)
HALF = False
REPEATS = "repeats"  # the flow's expand value that opens every repeated block
FLOW_COLOR = "imbalance"  # what the nodes are coloured by on a new page


def render_flow(
    sel: dict[str, Any] | None, color_by: str, expand: list[str] | None, drawn: dict[str, Any] | None = None
) -> tuple[Any, Any, Any]:
    """The figure, the expand options (every block, and each block opened by a click: untick to close), and what
    is drawn; when only the selected node changed, a ``Patch`` of its ring alone."""
    if not sel or not sel.get("job") or sel.get("step") is None:
        return no_update, no_update, no_update
    job = context.job(sel["job"])
    opened = [e for e in expand or [] if e != REPEATS]
    data = _recent.get(
        (store.scope(job), sel["step"], tuple(opened), REPEATS in (expand or [])),
        lambda: flow_view(job, sel["step"], opened, expand_all=REPEATS in (expand or [])),
    )
    selected = (sel["op"], sel.get("stage"), sel.get("at")) if sel.get("op") else None
    key = [sel["job"], sel["step"], color_by, sorted(expand or [])]
    if drawn and drawn.get("key") == key:
        patch = Patch()
        patch["data"][drawn["traces"] - 1] = ring(data, selected).to_plotly_json()
        return patch, no_update, no_update
    options = [{"label": " expand every repeated block", "value": REPEATS}] + [
        {"label": f" stage {k.partition(':')[0]} block {k.partition(':')[2]}", "value": k} for k in opened
    ]

    def build() -> go.Figure:
        return flow_figure(data, color_by, flow_p2p(job, sel["step"]), None)

    # the step's figure, built once (``drawn_once``); a node selected: its copy rings it (the last trace)
    fig = drawn_once(("flow", store.scope(job), *map(repr, key)), build)
    if selected is not None:
        fig = go.Figure(data=[*fig.data[:-1], ring(data, selected)], layout=fig.layout)
    return fig, options, {"key": key, "traces": len(fig.data)}


def open_block(click: dict[str, Any] | None, expand: list[str] | None) -> Any:
    """A click on a collapsed block opens it (its nodes take its place)."""
    custom = (coerce.first_point(click) or {}).get("customdata")
    block = coerce.text(custom[3], 200) if isinstance(custom, list) and len(custom) >= 4 else None
    if not block or block in (expand or []):
        return no_update
    return [*(expand or []), block]


def panel() -> html.Section:
    return panel_of(
        "Execution flow",
        html.Div(
            className="pd-toolbar",
            children=[
                dcc.RadioItems(
                    id=ids.FLOW_COLOR,
                    options=[
                        {"label": " imbalance", "value": "imbalance"},
                        {"label": " measured time", "value": "time"},
                    ],
                    value=FLOW_COLOR,
                    inline=True,
                ),
                dcc.Checklist(
                    id=ids.FLOW_EXPAND,
                    options=[{"label": " expand repeated blocks", "value": REPEATS}],
                    value=[],
                    inline=True,
                ),
            ],
        ),
        dcc.Store(id=ids.FLOW_DRAWN, data={}),
        graph(ids.FLOW),
        class_name="pd-flow",
        help_text="operators in execution order per stage; repeated layers collapsed; click a node",
    )


def register(app: Dash) -> None:
    sel = boundary.selection
    flow_colors = boundary.one_of(("imbalance", "time"), FLOW_COLOR)
    boundary.callback(
        app,
        Output(ids.FLOW, "figure"),
        Output(ids.FLOW_EXPAND, "options"),
        Output(ids.FLOW_DRAWN, "data"),
        In(view_store("flow"), "data", sel),
        In(ids.FLOW_COLOR, "value", flow_colors),
        In(ids.FLOW_EXPAND, "value", boundary.texts),
        St(ids.FLOW_DRAWN, "data", boundary.drawn),
        prevent_initial_call=True,
    )(render_flow)
    # Answers clicks only: its call on a new page (a request answered with nothing) went ahead of the first screen's.
    boundary.callback(
        app,
        Output(ids.FLOW_EXPAND, "value"),
        In(ids.FLOW, "clickData", boundary.event),
        St(ids.FLOW_EXPAND, "value", boundary.texts),
        prevent_initial_call=True,
    )(open_block)
