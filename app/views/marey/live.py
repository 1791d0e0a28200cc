"""Marey's graph, one view unit: its panel, the selection fields it reads, its callbacks and its static render.

Stages top to bottom, time across; a drag zooms (the window is the selection's, shared with the timeline), ◀ back
returns to the last window, a click on a band selects that instance of its operator (once no double-click
followed: a double-click zooms out)."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from dash import Dash, Input, Output, Patch, State, dcc, html, no_update

from paradiag.app import boundary, context, ids, store
from paradiag.app.boundary import In, St
from paradiag.app.data.common import Kept, clock_window
from paradiag.app.data.marey import EXPAND_KEY, critical_path, marey_data
from paradiag.app.data.shapes import MareyData
from paradiag.app.figures.marey import OPERATORS, highlight, marey_figure
from paradiag.app.layouts.common import graph
from paradiag.app.layouts.common import panel as panel_of
from paradiag.app.selection import view_store
from paradiag.app.views import drawn_once
from paradiag.job import Job

# The selection's fields this view is drawn from (its store, ``view_store("marey")``).
FIELDS = {"marey": ("job", "step", "window", "op", "stage", "at")}

# Its place on the job page: the graph its export bar exports, with its table, half a row or not.
EXPORTS = (ids.MAREY, True)
HALF = False

# A double-click resets the zoom; plotly reports its first click as a click too. A click selects at once; the zoom
# out of a double-click puts back the instance selected before its first click (assets/marey_clicks.js keeps it,
# the reducer's zoom puts it back: paradiag.app.selection.UNDO).
# The click passed on names its operator (a hover point's customdata holds the operator's index in the figure's
# list of names: paradiag.app.figures.marey.OPERATORS).
PASS_CLICK = (
    """
function(click, view) {
    // The point's customdata is a row of a typed array, which dcc.Graph leaves out of clickData: read from the
    // figure as it is now, the operator named from the figure's list of names.
    const gd = document.querySelector('#MAREY .js-plotly-plot');
    const names = ((gd && gd.layout && gd.layout.meta) || {})["OPERATORS"] || [];
    const points = ((click && click.points) || []).map(function (p) {
        const trace = gd && gd._fullData && gd._fullData[p.curveNumber];
        const row = trace && trace.customdata ? trace.customdata[p.pointNumber] : p.customdata;
        if (!row || !row.length) { return p; }
        const custom = Array.from(row);
        custom[0] = names[custom[0]];
        return Object.assign({}, p, {customdata: custom});
    });
    const was = view || {};
    const before = {op: was.op || null, stage: was.stage ?? null, at: was.at ?? null};
    return window.__pdPassClick("MAREY", Object.assign({}, click, {points: points}), "STORE", before);
}
""".replace("STORE", ids.MAREY_CLICK)
    .replace("MAREY", ids.MAREY)
    .replace("OPERATORS", OPERATORS)
)


# The last steps and windows drawn, per process: a click on a zoomed graph (which patches its outline alone) and a
# zoom back to a window just seen need their bands again, 50-130 ms to merge at 256 ranks (a window, one of endless
# many, is not in the store); a whole step is memoised in the store, but read back from it (16 ms at 256 ranks) by
# every callback that outlines an instance in it. Read only: the figure builders copy what they draw.
RECENT_WINDOWS = 8
_recent = Kept(RECENT_WINDOWS)


def windowed(job: Job, step: int, window: tuple[int, int] | None, expand: list[str]) -> MareyData:
    """``marey_data`` for a window (None: the whole step), from the last ones drawn when it is one of them."""
    key = (store.scope(job), step, window, tuple(sorted(expand)))
    return _recent.get(key, lambda: marey_data(job, step, window, expand=expand))


def render_marey(
    sel: dict[str, Any] | None,
    expand: list[str] | None,
    toggles: list[str] | None = None,
    drawn: dict[str, Any] | None = None,
) -> tuple[Any, Any, Any]:
    """The figure, the expand options that fit it (every device, each stage by mesh group, each group drawn
    folded), and what is drawn; when only the selected instance changed, a ``Patch`` of the outline alone.
    ``toggles`` holding "path": the step's critical path drawn too."""
    if not sel or not sel.get("job") or sel.get("step") is None:
        return no_update, no_update, no_update
    job = context.job(sel["job"])
    window = clock_window(job, sel.get("window"))
    data = windowed(job, sel["step"], window, expand or [])
    selected = (sel["op"], sel.get("stage"), sel.get("at")) if sel.get("op") else None
    with_path = "path" in (toggles or [])
    key = [sel["job"], sel["step"], sel.get("window"), sorted(expand or []), with_path]
    if drawn and drawn.get("key") == key and drawn.get("shapes"):
        patch = Patch()
        patch["layout"]["shapes"][drawn["shapes"] - 1] = highlight(data, selected)
        return patch, no_update, no_update

    def build(outlined: tuple[Any, ...] | None = None) -> go.Figure:
        path = critical_path(job, sel["step"], window) if with_path else None
        return marey_figure(
            data, selected=outlined, uirevision=f"{sel['job']}|{sel['step']}|{','.join(key[3])}", path=path
        )

    # the step's figure, built once (``drawn_once``); an instance selected: its copy outlines it (the last shape)
    if window is None:
        fig = drawn_once(("marey", store.scope(job), *map(repr, key)), build)
        if selected is not None:
            fig = go.Figure(fig)
            fig.layout.shapes = (*fig.layout.shapes[:-1], highlight(data, selected))
    else:
        fig = build(selected)
    return fig, data["expandable"], {"key": key, "traces": len(fig.data), "shapes": len(fig.layout.shapes)}


def panel() -> html.Section:
    return panel_of(
        "Marey's graph",
        html.Div(
            className="pd-toolbar",
            children=[
                html.Button("◀ back", id=ids.MAREY_BACK, className="pd-button"),
                dcc.Checklist(
                    id=ids.MAREY_EXPAND,
                    options=[{"label": " all devices", "value": "devices"}],
                    value=[],
                    inline=True,
                ),
                dcc.Checklist(
                    id=ids.MAREY_PATH,
                    options=[{"label": " critical path", "value": "path"}],
                    value=[],
                    inline=True,
                ),
            ],
        ),
        dcc.Store(id=ids.ZOOM_STACK, data=[]),
        dcc.Store(id=ids.MAREY_CLICK),
        dcc.Store(id=ids.MAREY_ZOOM),
        dcc.Store(id=ids.MAREY_DRAWN, data={}),
        graph(ids.MAREY),
        class_name="pd-marey",
        help_text="stages top to bottom, time across; drag to zoom, double-click to zoom out; click a band: "
        "that instance outlined in black",
    )


def register(app: Dash) -> None:
    boundary.clientside(
        app,
        PASS_CLICK,
        Output(ids.MAREY_CLICK, "data"),
        Input(ids.MAREY, "clickData"),
        State(view_store("marey"), "data"),
        prevent_initial_call=True,
    )
    sel = boundary.selection
    boundary.callback(
        app,
        Output(ids.MAREY, "figure"),
        Output(ids.MAREY_EXPAND, "options"),
        Output(ids.MAREY_DRAWN, "data"),
        In(view_store("marey"), "data", sel),
        In(ids.MAREY_EXPAND, "value", boundary.keys(EXPAND_KEY)),
        In(ids.MAREY_PATH, "value", boundary.texts),
        St(ids.MAREY_DRAWN, "data", boundary.drawn),
        prevent_initial_call=True,
    )(render_marey)
