"""The communication matrix, one view unit: sender x receiver (stages, then nodes, then ranks: a click on a block
opens it), coloured by how much slower each link is than comparable links; a click on a link selects its slowest
collective instance and lists the others. Its panel, the selection fields it reads, its callbacks, its static
render."""

from __future__ import annotations

import re
from typing import Any

from dash import Dash, Input, Output, Patch, State, ctx, dcc, html, no_update

from paradiag.app import boundary, coerce, context, ids
from paradiag.app.boundary import In, St
from paradiag.app.data.comm import METRICS, block_at, link_instances, metric_named, view
from paradiag.app.figures.comm import comm_figure, comm_shapes
from paradiag.app.layouts.common import graph
from paradiag.app.layouts.common import panel as panel_of
from paradiag.app.selection import view_store

# The matrix is built for a job ("comm": and its metric and opened block); it outlines the selected ranks only as
# the members of the selected collective ("comm-link": the reducer blanks ``ranks`` in it while no collective is
# selected, so a click on other ranks leaves it as it is), and a new link moves the outline alone (a ``Patch``).
FIELDS = {"comm": ("job",), "comm-link": ("job", "ranks", "collective")}

# Its place on the job page: the graph its export bar exports, with its table, half a row or not.
EXPORTS = (ids.COMM_MATRIX, True)
HALF = True


# A click on the matrix reaches the drill only when it is on a block (stage or node) the matrix can open, decided in
# the browser from the level the figure was drawn at: a click on a link between two ranks sends one request fewer,
# and the matrix's own redraw (its outline) does not wait for a drill that changes nothing.
BLOCK_CLICK = """
function(click, figure) {
    const level = ((figure || {}).layout || {}).meta;
    if (!click || !level || level.level === "rank") { return window.dash_clientside.no_update; }
    return click;
}
"""


def _drilled(drill: dict[str, Any] | None, job: str) -> dict[str, Any]:
    """The block of the matrix opened last for this job (``{}``: the whole job)."""
    path = (drill or {}).get("path") or []
    return path[-1] if path and (drill or {}).get("job") == job else {}


def _shown(job: str, drill: dict[str, Any] | None) -> Any:
    opened = _drilled(drill, job)
    return view(context.job(job), opened.get("src"), opened.get("dst"))


def _outlined(link: dict[str, Any] | None) -> list[int] | None:
    return (link or {}).get("ranks") if (link or {}).get("collective") else None


def render_comm(
    sel: dict[str, Any] | None,
    metric: str,
    drill: dict[str, Any] | None = None,
    link: dict[str, Any] | None = None,
) -> Any:
    if not sel or not sel.get("job"):
        return no_update
    return comm_figure(_shown(sel["job"], drill), metric_named(metric), _outlined(link))


def mark_comm(link: dict[str, Any] | None, metric: str, drill: dict[str, Any] | None = None) -> Any:
    """Only the outline follows a new link: the shapes are replaced, the cells are not sent again."""
    shown = _shown(link["job"], drill) if link and link.get("job") else None
    if not shown or not any(v is not None for row in shown["cells"][metric_named(metric)] for v in row):
        return no_update  # nothing drawn yet, or the figure that says there is no matrix
    patch = Patch()
    patch["layout"]["shapes"] = comm_shapes(shown, _outlined(link))
    return patch


def comm(
    sel: dict[str, Any] | None, metric: str, drill: dict[str, Any] | None, link: dict[str, Any] | None
) -> Any:
    """The matrix's callback: the whole figure, or only its outline when the selected link alone changed."""
    if ctx.triggered_id == view_store("comm-link") and len(ctx.triggered) == 1:
        return mark_comm(link, metric, drill)
    return render_comm(sel, metric, drill, link)


def drill_comm(
    click: dict[str, Any] | None, _up: int | None, drill: dict[str, Any] | None, sel: dict[str, Any] | None
) -> Any:
    """A click on a block (stage or node) opens it; "up" goes back one level."""
    if not sel or not sel.get("job"):
        return no_update
    path = list((drill or {}).get("path") or []) if (drill or {}).get("job") == sel["job"] else []
    if ctx.triggered_id == ids.COMM_UP:
        return {"job": sel["job"], "path": path[:-1]}
    point = coerce.first_point(click)
    if not point:
        return no_update
    opened = path[-1] if path else {}
    block = block_at(
        view(context.job(sel["job"]), opened.get("src"), opened.get("dst")),
        str(point.get("y"))[:200],
        str(point.get("x"))[:200],
    )
    return {"job": sel["job"], "path": [*path, block]} if block else no_update


def _cell(value: Any) -> str:
    """Text as it is in Markdown (a table cell or a line): the marks dcc.Markdown's parser reads as markup escaped
    (its own list: a backslash before another mark is shown), so that no name from a trace is read as markup."""
    text = str(value).replace("&", "&amp;").replace("<", "&lt;")  # no HTML tag read either
    return re.sub(r"([\\`*{}\[\]()#+\-.!_>~|])", r"\\\1", text)


def comm_instances(click: dict[str, Any] | None, sel: dict[str, Any] | None) -> Any:
    """The link's instances as one Markdown table (one component: every Dash component in the page costs each of
    the browser's store updates, and 80 cells as components were a third of the page's)."""
    point = coerce.first_point(click)
    if not point or not sel or not sel.get("job"):
        return no_update
    src, dst = coerce.integer(point.get("y"), 0), coerce.integer(point.get("x"), 0)
    if src is None or dst is None:
        return _cell(
            f"{str(point.get('y'))[:80]} → {str(point.get('x'))[:80]} opened: click a link between two ranks for its instances"
        )
    rows = link_instances(context.job(sel["job"]), src, dst)
    if not rows:
        return _cell(f"no collective instance shared by ranks {src} and {dst}")
    lines = [
        _cell(f"link {src} → {dst}: slowest instances first (the slowest is selected in the timeline)"),
        "",
        "| collective | group | step | transfer ms | wait ms | MB |",
        "|---|---|--:|--:|--:|--:|",
    ]
    lines += [
        f"| {_cell(r['collective'])} | {_cell(r['group'][:12])} | {r['step']} | {r['transfer_ms']:.3f} | "
        f"{r['wait_ms']:.3f} | {(r['bytes'] or 0) / 1e6:.1f} |"
        for r in rows
    ]
    return "\n".join(lines)


def panel() -> html.Section:
    return panel_of(
        "Communication matrix",
        html.Div(
            className="pd-toolbar",
            children=[
                html.Button("◀ up", id=ids.COMM_UP, className="pd-button"),
                dcc.RadioItems(
                    id=ids.COMM_METRIC,
                    options=[
                        {"label": f" {m}", "value": m} for m in ("slowness", "bandwidth", "bytes", "time")
                    ],
                    value="slowness",
                    inline=True,
                ),
            ],
        ),
        dcc.Store(id=ids.COMM_DRILL, data={}),
        dcc.Store(id=ids.COMM_BLOCK),
        graph(ids.COMM_MATRIX),
        dcc.Markdown(id=ids.COMM_INSTANCES, className="pd-instances"),
        class_name="pd-comm",
    )


def register(app: Dash) -> None:
    sel = boundary.selection
    comm_metric = boundary.one_of(METRICS, "slowness")
    boundary.callback(
        app,
        Output(ids.COMM_MATRIX, "figure"),
        In(view_store("comm"), "data", sel),
        In(ids.COMM_METRIC, "value", comm_metric),
        In(ids.COMM_DRILL, "data", boundary.drill),
        In(view_store("comm-link"), "data", sel),
        prevent_initial_call=True,
    )(comm)
    boundary.clientside(
        app,
        BLOCK_CLICK,
        Output(ids.COMM_BLOCK, "data"),
        Input(ids.COMM_MATRIX, "clickData"),
        State(ids.COMM_MATRIX, "figure"),
        prevent_initial_call=True,
    )
    boundary.callback(
        app,
        Output(ids.COMM_DRILL, "data"),
        In(ids.COMM_BLOCK, "data", boundary.event),
        In(ids.COMM_UP, "n_clicks", boundary.count),
        St(ids.COMM_DRILL, "data", boundary.drill),
        St(ids.SELECTION, "data", sel),
        prevent_initial_call=True,
    )(drill_comm)
    boundary.callback(
        app,
        Output(ids.COMM_INSTANCES, "children"),
        In(ids.COMM_MATRIX, "clickData", boundary.event),
        St(ids.SELECTION, "data", sel),
        prevent_initial_call=True,
    )(comm_instances)
