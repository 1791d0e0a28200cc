"""Marey's graph, the execution-flow graph and the communication matrix follow the selection."""

from __future__ import annotations

from typing import Any

from dash import Dash, Input, Output, Patch, ctx, html, no_update

from paradiag.app import boundary, coerce, context, ids
from paradiag.app.boundary import In, St
from paradiag.app.data.comm import METRICS, block_at, link_instances, view
from paradiag.app.data.common import origin_ns
from paradiag.app.data.flow import flow_p2p, flow_view
from paradiag.app.data.marey import EXPAND_KEY, critical_path, marey_data
from paradiag.app.figures.comm import comm_figure
from paradiag.app.figures.flow import flow_figure, ring
from paradiag.app.figures.marey import OPERATORS, highlight, marey_figure
from paradiag.app.selection import view_store

REPEATS = "repeats"  # the flow's expand value that opens every repeated block
# A double-click resets the zoom; plotly reports its first click as a click too. A click reaches the selection
# only when no double-click followed within plotly's double-click delay (300 ms) and a margin.
CLICK_DELAY_MS = 400
# The click passed on names its operator (a hover point's customdata holds the operator's index in the figure's
# list of names: paradiag.app.figures.marey.OPERATORS).
DEFER_CLICK = """
async function(click) {
    const times = window.__pdMareyClicks || {pressAt: Date.now(), resetAt: 0};  // assets/marey_clicks.js
    const pressed = times.pressAt;
    await new Promise(resolve => setTimeout(resolve, DELAY));
    if (times.resetAt >= pressed) { return window.dash_clientside.no_update; }
    const gd = document.querySelector('#MAREY .js-plotly-plot');
    const names = ((gd && gd.layout && gd.layout.meta) || {})["OPERATORS"] || [];
    const points = ((click && click.points) || []).map(function (p) {
        const c = p.customdata;
        if (!Array.isArray(c) && !(c && c.length)) { return p; }
        const custom = Array.from(c);
        custom[0] = names[custom[0]];
        return Object.assign({}, p, {customdata: custom});
    });
    return Object.assign({}, click, {points: points});
}
""".replace("DELAY", str(CLICK_DELAY_MS)).replace("MAREY", ids.MAREY).replace("OPERATORS", OPERATORS)


def render_marey(sel: dict[str, Any] | None, expand: list[str] | None, toggles: list[str] | None = None, drawn: dict[str, Any] | None = None) -> tuple[Any, Any, Any]:
    """The figure, the expand options that fit it (every device, each stage by mesh group, each group drawn
    folded), and what is drawn; when only the selected instance changed, a ``Patch`` of the outline alone.
    ``toggles`` holding "path": the step's critical path drawn too."""
    if not sel or not sel.get("job") or sel.get("step") is None:
        return no_update, no_update, no_update
    job = context.job(sel["job"])
    window = None
    if sel.get("window"):
        t0 = origin_ns(job)
        window = (t0 + int(sel["window"][0] * 1e6), t0 + int(sel["window"][1] * 1e6))
    data = marey_data(job, sel["step"], window, expand=expand or [])
    selected = (sel["op"], sel.get("stage"), sel.get("at")) if sel.get("op") else None
    with_path = "path" in (toggles or [])
    key = [sel["job"], sel["step"], sel.get("window"), sorted(expand or []), with_path]
    if drawn and drawn.get("key") == key:
        patch = Patch()
        patch["data"][drawn["traces"] - 1] = highlight(data, selected).to_plotly_json()
        return patch, no_update, no_update
    path = critical_path(job, sel["step"], window) if with_path else None
    fig = marey_figure(data, selected=selected, uirevision=f"{sel['job']}|{sel['step']}|{','.join(key[3])}", path=path)
    return fig, data["expandable"], {"key": key, "traces": len(fig.data)}


def render_flow(sel: dict[str, Any] | None, color_by: str, expand: list[str] | None, drawn: dict[str, Any] | None = None) -> tuple[Any, Any, Any]:
    """The figure, the expand options (every block, and each block opened by a click: untick to close), and what
    is drawn; when only the selected node changed, a ``Patch`` of its ring alone."""
    if not sel or not sel.get("job") or sel.get("step") is None:
        return no_update, no_update, no_update
    job = context.job(sel["job"])
    opened = [e for e in expand or [] if e != REPEATS]
    data = flow_view(job, sel["step"], opened, expand_all=REPEATS in (expand or []))
    selected = (sel["op"], sel.get("stage"), sel.get("at")) if sel.get("op") else None
    key = [sel["job"], sel["step"], color_by, sorted(expand or [])]
    if drawn and drawn.get("key") == key:
        patch = Patch()
        patch["data"][drawn["traces"] - 1] = ring(data, selected).to_plotly_json()
        return patch, no_update, no_update
    options = [{"label": " expand every repeated block", "value": REPEATS}] + [{"label": f" stage {k.partition(':')[0]} block {k.partition(':')[2]}", "value": k} for k in opened]
    fig = flow_figure(data, color_by, flow_p2p(job, sel["step"]), selected)
    return fig, options, {"key": key, "traces": len(fig.data)}


def open_block(click: dict[str, Any] | None, expand: list[str] | None) -> Any:
    """A click on a collapsed block opens it (its nodes take its place)."""
    custom = (coerce.first_point(click) or {}).get("customdata")
    block = coerce.text(custom[3], 200) if isinstance(custom, list) and len(custom) >= 4 else None
    if not block or block in (expand or []):
        return no_update
    return [*(expand or []), block]


def _drilled(drill: dict[str, Any] | None, job: str) -> dict[str, Any]:
    """The block of the matrix opened last for this job (``{}``: the whole job)."""
    path = (drill or {}).get("path") or []
    return path[-1] if path and (drill or {}).get("job") == job else {}


def render_comm(sel: dict[str, Any] | None, metric: str, drill: dict[str, Any] | None = None) -> Any:
    if not sel or not sel.get("job"):
        return no_update
    opened = _drilled(drill, sel["job"])
    data = view(context.job(sel["job"]), opened.get("src"), opened.get("dst"))
    selected = sel.get("ranks") if sel.get("collective") else None
    return comm_figure(data, metric if metric in METRICS else "slowness", selected)


def drill_comm(click: dict[str, Any] | None, _up: int | None, drill: dict[str, Any] | None, sel: dict[str, Any] | None) -> Any:
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
    block = block_at(view(context.job(sel["job"]), opened.get("src"), opened.get("dst")), str(point.get("y"))[:200], str(point.get("x"))[:200])
    return {"job": sel["job"], "path": [*path, block]} if block else no_update


def comm_instances(click: dict[str, Any] | None, sel: dict[str, Any] | None) -> Any:
    point = coerce.first_point(click)
    if not point or not sel or not sel.get("job"):
        return no_update
    src, dst = coerce.integer(point.get("y"), 0), coerce.integer(point.get("x"), 0)
    if src is None or dst is None:
        return html.P(f"{str(point.get('y'))[:80]} → {str(point.get('x'))[:80]} opened: click a link between two ranks for its instances", className="pd-help")
    rows = link_instances(context.job(sel["job"]), src, dst)
    if not rows:
        return html.P(f"no collective instance shared by ranks {src} and {dst}", className="pd-help")
    head = html.Tr([html.Th(h) for h in ("collective", "group", "step", "transfer ms", "wait ms", "MB")])
    body = [html.Tr([html.Td(r["collective"]), html.Td(r["group"][:12]), html.Td(r["step"]), html.Td(f"{r['transfer_ms']:.3f}"), html.Td(f"{r['wait_ms']:.3f}"), html.Td(f"{(r['bytes'] or 0) / 1e6:.1f}")]) for r in rows]
    return [html.P(f"link {src} → {dst}: slowest instances first (the slowest is selected in the timeline)", className="pd-help"), html.Table([head, *body])]


def register(app: Dash) -> None:
    boundary.clientside(app, DEFER_CLICK, Output(ids.MAREY_CLICK, "data"), Input(ids.MAREY, "clickData"), prevent_initial_call=True)
    sel = boundary.selection
    boundary.callback(app, Output(ids.MAREY, "figure"), Output(ids.MAREY_EXPAND, "options"), Output(ids.MAREY_DRAWN, "data"), In(view_store("marey"), "data", sel), In(ids.MAREY_EXPAND, "value", boundary.keys(EXPAND_KEY)), In(ids.MAREY_PATH, "value", boundary.texts), St(ids.MAREY_DRAWN, "data", boundary.drawn), prevent_initial_call=True)(render_marey)
    flow_colors = boundary.one_of(("imbalance", "time"), "imbalance")
    boundary.callback(app, Output(ids.FLOW, "figure"), Output(ids.FLOW_EXPAND, "options"), Output(ids.FLOW_DRAWN, "data"), In(view_store("flow"), "data", sel), In(ids.FLOW_COLOR, "value", flow_colors), In(ids.FLOW_EXPAND, "value", boundary.texts), St(ids.FLOW_DRAWN, "data", boundary.drawn), prevent_initial_call=True)(render_flow)
    # These three answer clicks only: their calls on a new page (three requests, each answered with nothing) went
    # ahead of the first screen's.
    boundary.callback(app, Output(ids.FLOW_EXPAND, "value"), In(ids.FLOW, "clickData", boundary.event), St(ids.FLOW_EXPAND, "value", boundary.texts), prevent_initial_call=True)(open_block)
    comm_metric = boundary.one_of(METRICS, "slowness")
    boundary.callback(app, Output(ids.COMM_MATRIX, "figure"), In(view_store("comm"), "data", sel), In(ids.COMM_METRIC, "value", comm_metric), In(ids.COMM_DRILL, "data", boundary.drill), prevent_initial_call=True)(render_comm)
    boundary.callback(app, Output(ids.COMM_DRILL, "data"), In(ids.COMM_MATRIX, "clickData", boundary.event), In(ids.COMM_UP, "n_clicks", boundary.count), St(ids.COMM_DRILL, "data", boundary.drill), St(ids.SELECTION, "data", sel), prevent_initial_call=True)(drill_comm)
    boundary.callback(app, Output(ids.COMM_INSTANCES, "children"), In(ids.COMM_MATRIX, "clickData", boundary.event), St(ids.SELECTION, "data", sel), prevent_initial_call=True)(comm_instances)
