"""The selection reducer: every click, zoom and URL change goes through ``select`` into one ``Selection``.

One callback owns the selection store and the URL, so the two never disagree and the page can be shared. It also
writes each view's part of the selection into that view's store (``Selection.view``) only when that part changed:
a view's callback reads its own store, so a click recomputes the views it concerns and leaves the others alone.
"""

from __future__ import annotations

from typing import Any

from dash import ALL, Dash, Input, Output, no_update

from paradiag.app import boundary, coerce, context, ids
from paradiag.app.boundary import In, St
from paradiag.app.callbacks.header import selection_text
from paradiag.app.data.comm import link_instances
from paradiag.app.data.common import steps_of
from paradiag.app.data.findings import findings_of
from paradiag.app.data.overview import DEFAULT_METRIC, METRICS, cited_step, opening_step, overview
from paradiag.app.selection import START, UNDO, Selection, view_store, wants_start
from paradiag.app.views import VIEW_FIELDS
from paradiag.app.views.compare.live import baseline_options
from paradiag.app.views.overview.live import toggle_group

# The reducer's inputs, each with the reading of its value (``paradiag.app.boundary``): a forged value is read
# as None, and a None value changes nothing (``select``).
READS: dict[tuple[str, str], boundary.Spec] = {
    (ids.URL, "search"): boundary.text(boundary.MAX_URL),
    (ids.URL, "href"): boundary.text(boundary.MAX_URL),
    (ids.HEATMAP, "clickData"): boundary.event,
    (ids.TIMELINE_ZOOM, "data"): boundary.event,
    (ids.MAREY_CLICK, "data"): boundary.event,
    (ids.MAREY_ZOOM, "data"): boundary.event,
    (ids.MAREY_BACK, "n_clicks"): boundary.count,
    (ids.DETAIL, "clickData"): boundary.event,
    (ids.COMM_MATRIX, "clickData"): boundary.event,
    (ids.FLOW, "clickData"): boundary.event,
    (ids.STEP_PICKER, "value"): boundary.step,
    (ids.CLEAR_SELECTION, "n_clicks"): boundary.count,
    (ids.BASELINE_PICKER, "value"): boundary.text(200),
    (ids.STEPS, "clickData"): boundary.event,
    (ids.STEPS, "selectedData"): boundary.event,
    (ids.TIMELINE_RANKS, "value"): boundary.ranks,
    (ids.OP_SEARCH, "value"): boundary.text(),
}
INPUTS = list(READS)
# The views drawn first on a new page (the summary, the step chart and the heatmap); the others' stores are written
# once the heatmap's figure has arrived (``release``), so that the first screen does not wait behind them.
FIRST = ("job", "mark", "step")
LATER = tuple(name for name in VIEW_FIELDS if name not in FIRST)
# The reducer's outputs besides the views' stores, by name (``reply``): the selection, the URL, the step picker
# (value, options), the zoom stack, the baseline picker (value, options), the timeline's rank picker (value,
# options), the heatmap's unfolded groups (value, options: a click on a folded row selects its ranks and unfolds it),
# the header's selection text and the "not found" banner's hidden flag. They follow the selection alone and are
# written here rather than by callbacks of their own: each callback is one more request and one more round of the
# page's renderer per click, and the heatmap, which follows both the selection and its unfolded rows, would be
# drawn twice when the two arrive apart.
OUTPUTS: dict[str, tuple[str, str]] = {
    "selection": (ids.SELECTION, "data"),
    "search": (ids.URL, "search"),
    "step": (ids.STEP_PICKER, "value"),
    "step_options": (ids.STEP_PICKER, "options"),
    "zoom_stack": (ids.ZOOM_STACK, "data"),
    "base": (ids.BASELINE_PICKER, "value"),
    "base_options": (ids.BASELINE_PICKER, "options"),
    "ranks": (ids.TIMELINE_RANKS, "value"),
    "rank_options": (ids.TIMELINE_RANKS, "options"),
    "unfolded": (ids.HEATMAP_EXPAND, "value"),
    "unfold_options": (ids.HEATMAP_EXPAND, "options"),
    "text": (ids.SELECTION_TEXT, "children"),
    "notice_hidden": (context.NOTICE, "hidden"),
}
RELEASE_WHEN_EMPTY = """
function(_figure, ...later) {
    return later.some(v => v === null || v === undefined) ? Date.now() : window.dash_clientside.no_update;
}
"""
URL_TRIGGERS = ((ids.URL, "search"), (ids.URL, "href"))
ZOOMS = ((ids.TIMELINE_ZOOM, "data"), (ids.MAREY_ZOOM, "data"))
# A graph's zoom, passed on in the browser to its zoom store (``ids.TIMELINE_ZOOM``) with the time it came, and
# the graph's relayoutData cleared: dcc.Graph reports no relayout equal to the last one it reported, so without
# it the same drag again (after "back" or another step) or a second double-click reached nobody.
# A zoom-out (autorange) within a second of the last one is the same double-click told twice: by plotly and by the
# browser's dblclick (assets/marey_clicks.js), and is dropped. A zoom-out carries what the first click of its
# double-click changed, as it was (``UNDO``; assets/marey_clicks.js passes a click on at once).
FORWARD_ZOOM = """
function(relayout) {
    const none = window.dash_clientside.no_update;
    if (!relayout) { return [none, none]; }
    const graph = window.dash_clientside.callback_context.triggered_id;
    const last = (window.__pdZoomOut = window.__pdZoomOut || {});
    const now = Date.now();
    const extra = {"paradiag.at": now};
    if (relayout["xaxis.autorange"] === true) {
        if (now - (last[graph] || 0) < 1000) { return [none, null]; }
        last[graph] = now;
        const undo = window.__pdTakeUndo ? window.__pdTakeUndo(graph) : null;
        if (undo) { extra["UNDO"] = undo; }
    }
    return [Object.assign({}, relayout, extra), null];
}
""".replace("UNDO", UNDO)


def select(trigger: Any, value: Any, sel: Selection | None, search: str | None) -> Selection:
    """The new selection after ``trigger`` (a (component id, property) pair, or a finding button's id)
    delivered ``value``."""
    if trigger in (None, (ids.URL, "search"), (ids.URL, "href")) or sel is None or not sel.job:
        new = Selection.from_query(search)
        if not new.job and context.config().job and not wants_start(search):
            new = new.but(job="served")
        return _with_defaults(new)
    if isinstance(trigger, dict) and trigger.get("type") == ids.FINDING_BUTTON:
        return _finding(sel, coerce.integer(trigger.get("index"), 0))
    handler = _HANDLERS.get(trigger)
    return _with_defaults(handler(sel, value)) if handler and value is not None else sel


def address(sel: Selection) -> str:
    """The URL query of a selection; the start page's on a server that serves a job, so a reload stays there."""
    query = sel.to_query()
    return query or (START if context.config().job else "")


def _with_defaults(sel: Selection) -> Selection:
    """A job opens on the step its top finding cites (else its slowest step). A job token that names nothing
    this user may open raises JobNotFound: the callbacks' error handler shows the "not found" banner."""
    if sel.job and sel.step is None:
        return sel.but(step=opening_step(context.job(sel.job)))
    return sel


def zoom_stack(trigger: Any, old: Selection | None, new: Selection, stack: list[Any] | None) -> list[Any]:
    """Windows to go back to: a zoom pushes the window it left, ◀ back pops (see ``_back``)."""
    stack = list(stack or [])
    if trigger in ZOOMS and old and new.window != old.window:
        stack.append(old.window)
    elif trigger == (ids.MAREY_BACK, "n_clicks") and stack:
        stack.pop()
    return stack[-20:]


def _back(sel: Selection, stack: list[Any]) -> Selection:
    return sel.but(window=stack[-1] if stack else None)


# Each handler reads the plotly event it is given with ``coerce``: a point that is not what the figure draws
# leaves the selection as it was.


def _heatmap(sel: Selection, click: dict[str, Any]) -> Selection:
    point = coerce.first_point(click) or {}
    step = coerce.integer(point.get("x"), 0)
    ranks = coerce.integers(
        [r for r in str(point.get("customdata", ""))[: coerce.MAX_TEXT * 16].split(",") if r != ""]
    )
    if step is None or not ranks:
        return sel
    return sel.but(ranks=ranks, step=step, window=None, collective=None)


def _timeline_zoom(sel: Selection, relayout: dict[str, Any]) -> Selection:
    if "xaxis.range[0]" in relayout and "xaxis.range[1]" in relayout:
        window = coerce.window([relayout["xaxis.range[0]"], relayout["xaxis.range[1]"]])
        return sel.but(window=window) if window else sel
    if relayout.get("xaxis.autorange") is True:
        return _undo(sel.but(window=None), coerce.mapping(relayout.get(UNDO)))
    return sel


def _undo(sel: Selection, before: dict[str, Any] | None) -> Selection:
    """A double-click's zoom out: the instance Marey's graph had selected before the double-click's first click
    (which selected at once) selected again; ``before`` is what that click's graph held then (Marey's view store,
    the timeline's folds: no selection field, nothing to put back)."""
    if not before or "op" not in before:
        return sel
    op = coerce.text(before.get("op")) or None
    return sel.but(op=op, stage=coerce.integer(before.get("stage"), 0), at=coerce.number(before.get("at")))


def _marey_click(sel: Selection, click: dict[str, Any]) -> Selection:
    point = coerce.first_point(click) or {}
    custom = point.get("customdata")
    if not isinstance(custom, list) or len(custom) < 2:
        return sel
    op, stage = coerce.text(custom[0]), coerce.integer(custom[1], 0)
    if not op or stage is None:
        return sel
    at = (
        custom[2] if len(custom) > 2 else point.get("x")
    )  # which instance of the operator (and so which flow node)
    return sel.but(op=op, stage=stage, at=coerce.number(at))


def _operator_click(sel: Selection, click: dict[str, Any]) -> Selection:
    name = coerce.text((coerce.first_point(click) or {}).get("customdata"))
    return sel.but(op=name, at=None) if name else sel


def _comm_click(sel: Selection, click: dict[str, Any]) -> Selection:
    """A link: its slowest collective instance is selected (its ranks, step and a window around it)."""
    point = coerce.first_point(click) or {}
    src, dst = coerce.integer(point.get("y"), 0), coerce.integer(point.get("x"), 0)
    if src is None or dst is None:
        return sel  # a block of ranks (stage or node): the matrix opens it
    found = link_instances(context.job(str(sel.job)), src, dst, top=1)
    if not found:
        return sel
    slowest = found[0]
    name = f"{slowest['collective']}/group {slowest['group']}/#{slowest['instance']}"
    return sel.but(ranks=slowest["ranks"], collective=name, step=slowest["step"], window=slowest["window"])


def _flow_click(sel: Selection, click: dict[str, Any]) -> Selection:
    custom = (coerce.first_point(click) or {}).get("customdata")
    if not isinstance(custom, list) or len(custom) < 3:
        return sel
    op, stage, span = coerce.text(custom[0]), coerce.integer(custom[1], 0), coerce.window(custom[2])
    if not op or stage is None or span is None:
        return sel
    return sel.but(op=op, stage=stage, window=span, at=(span[0] + span[1]) / 2)


def _step_click(sel: Selection, click: dict[str, Any]) -> Selection:
    step = coerce.integer((coerce.first_point(click) or {}).get("x"), 0)
    return sel if step is None else sel.but(step=step, window=None, collective=None)


def _step_brush(sel: Selection, brushed: dict[str, Any]) -> Selection:
    """A brushed range of steps: its slowest step (by median step time over the ranks)."""
    span = coerce.items((coerce.mapping(brushed.get("range")) or {}).get("x"), coerce.number, 2)
    if not span or len(span) != 2:
        return sel
    lo, hi = span
    ov = overview(context.job(str(sel.job)))
    inside = [(j, s) for j, s in enumerate(ov["steps"]) if lo <= s <= hi]
    if not inside:
        return sel
    med = {s: sorted(v for row in ov["metrics"]["step_ms"] if (v := row[j]) is not None) for j, s in inside}
    slowest = max(med, key=lambda s: med[s][len(med[s]) // 2] if med[s] else 0.0)
    return sel.but(step=slowest, window=None, collective=None)


def _finding(sel: Selection, index: int | None) -> Selection:
    """A finding: its culprit ranks, stage and operator, in the step its evidence cites."""
    found = findings_of(context.job(str(sel.job)))
    if index is None or not 0 <= index < len(found):
        return sel
    f = found[index]
    step = cited_step(f)
    return sel.but(
        ranks=f.get("ranks") or sel.ranks,
        step=sel.step if step is None else step,
        stage=f.get("stage"),
        op=f.get("operator"),
        at=None,
        window=None,
        collective=None,
    )


_HANDLERS = {
    (ids.HEATMAP, "clickData"): _heatmap,
    (ids.TIMELINE_ZOOM, "data"): _timeline_zoom,
    (ids.MAREY_CLICK, "data"): _marey_click,
    (ids.MAREY_ZOOM, "data"): _timeline_zoom,
    (ids.DETAIL, "clickData"): _operator_click,
    (ids.COMM_MATRIX, "clickData"): _comm_click,
    (ids.FLOW, "clickData"): _flow_click,
    (ids.STEP_PICKER, "value"): lambda sel, step: sel.but(step=step, window=None, collective=None),
    (ids.CLEAR_SELECTION, "n_clicks"): lambda sel, _: Selection(job=sel.job, step=sel.step, base=sel.base),
    (ids.BASELINE_PICKER, "value"): lambda sel, base: sel.but(base=base or None),
    (ids.STEPS, "clickData"): _step_click,
    (ids.STEPS, "selectedData"): _step_brush,
    (ids.TIMELINE_RANKS, "value"): lambda sel, ranks: sel.but(
        ranks=list(dict.fromkeys(ranks)) or None, collective=None
    ),
    (ids.OP_SEARCH, "value"): lambda sel, op: sel.but(op=op or None, at=None),
}


def step_options(sel: Selection) -> list[dict[str, Any]]:
    if not sel.job:
        return []
    return [{"label": f"step {s}", "value": s} for s in steps_of(context.job(sel.job))]


def rank_options(sel: Selection) -> list[dict[str, Any]]:
    if not sel.job:
        return []
    return [{"label": f"rank {r}", "value": r} for r in sorted(overview(context.job(sel.job))["ranks"])]


# Fields a view draws only while another one is set: the matrix outlines the selected ranks only as the members of
# the selected collective, so a click on other ranks leaves it as it is (it is not sent nor redrawn again).
ONLY_WITH: dict[str, dict[str, str]] = {"comm-link": {"ranks": "collective"}}


# Views that draw one rank of the selected ones: the device detail is about the first (``detail_rank``), so a click
# on other ranks led by the same one leaves it as it is.
FIRST_RANK_ONLY = ("detail",)


def view_of(sel: Selection, name: str) -> dict[str, Any]:
    """What view ``name``'s store holds: its part of ``sel``, less the fields it does not draw now."""
    part = sel.view(name)
    for field_name, needs in ONLY_WITH.get(name, {}).items():
        if part.get(needs) is None:
            part[field_name] = None
    if name in FIRST_RANK_ONLY and part.get("ranks"):
        part["ranks"] = part["ranks"][:1]
    return part


def view_updates(old: Selection | None, new: Selection) -> list[Any]:
    """Each view's store: its part of ``new``, or no_update when that part did not change (on a new page, the
    ``LATER`` views wait for ``release``)."""
    if old is None:
        return [view_of(new, name) if name in FIRST else no_update for name in VIEW_FIELDS]
    return [
        view_of(new, name) if view_of(old, name) != view_of(new, name) else no_update for name in VIEW_FIELDS
    ]


def release(_asked: Any, stored: dict[str, Any] | None, *later: Any) -> tuple[Any, ...]:
    """Once the heatmap is there, the stores of the views that were held back, each written once."""
    sel = Selection.from_store(stored)
    return tuple(
        view_of(sel, name) if sel.job and value is None else no_update
        for name, value in zip(LATER, later, strict=True)
    )


def _changed(value: Any, shown: Any) -> Any:
    return value if value != shown else no_update


def register(app: Dash) -> None:
    for graph, zoom in ((ids.TIMELINE, ids.TIMELINE_ZOOM), (ids.MAREY, ids.MAREY_ZOOM)):
        boundary.clientside(
            app,
            FORWARD_ZOOM,
            Output(zoom, "data"),
            Output(graph, "relayoutData"),
            Input(graph, "relayoutData"),
            prevent_initial_call=True,
        )

    @boundary.callback(
        app,
        *[Output(cid, prop) for cid, prop in OUTPUTS.values()],
        *[Output(view_store(name), "data") for name in VIEW_FIELDS],
        *[In(cid, prop, spec) for (cid, prop), spec in READS.items()],
        In({"type": ids.FINDING_BUTTON, "index": ALL}, "n_clicks", boundary.counts),
        St(ids.SELECTION, "data", boundary.selection),
        St(ids.ZOOM_STACK, "data", boundary.windows),
        St(ids.HEATMAP_EXPAND, "value", boundary.texts),
        St(ids.HEATMAP_EXPAND, "options", boundary.options),
        St(ids.HEATMAP_METRIC, "value", boundary.one_of(METRICS, DEFAULT_METRIC)),
    )
    def on_change(*args: Any) -> tuple[Any, ...]:
        values, finding_clicks = args[: len(INPUTS)], args[len(INPUTS)]
        stored, stack, unfolded, unfold_options, metric = args[len(INPUTS) + 1 :]
        shown = dict(zip(INPUTS, values, strict=True))
        # A callback that sets the href (an upload that finished) may reach us before the search is updated.
        href = boundary.query_of_href(values[1])
        search = "?" + href if href else values[0]
        triggers = [
            t for t in boundary.fired(shown) if not isinstance(t, dict) or any(finding_clicks or [])
        ]  # not the finding buttons appearing, unclicked
        if not triggers:
            return reply()
        old = Selection.from_store(stored) if stored else None
        new, stack_now = old, list(stack or [])
        for trigger in triggers:
            last = new
            if trigger == (ids.MAREY_BACK, "n_clicks"):
                new = _back(last or Selection(), stack_now)
            else:
                new = select(
                    trigger, shown.get(trigger) if isinstance(trigger, tuple) else None, last, search
                )
            stack_now = zoom_stack(trigger, last, new, stack_now)
        if new is None:  # no trigger made one (never: the first call's is the URL's)
            return reply()
        unfold = (
            toggle_group(shown[(ids.HEATMAP, "clickData")], unfolded, unfold_options, stored, metric)
            if (ids.HEATMAP, "clickData") in triggers
            else (no_update, no_update)
        )
        banner = (
            True if any(t in (None, *URL_TRIGGERS) for t in triggers) else no_update
        )  # a new address clears the last one's banner
        if new == old:
            return reply(unfolded=unfold[0], unfold_options=unfold[1], notice_hidden=banner)
        new_job = old is None or old.job != new.job
        return reply(
            views=view_updates(old, new),
            selection=new.to_store(),
            search=_changed(address(new), search or ""),
            step=_changed(new.step, shown[(ids.STEP_PICKER, "value")]),
            step_options=step_options(new) if new_job else no_update,
            zoom_stack=stack_now,
            base=_changed(new.base or "", shown[(ids.BASELINE_PICKER, "value")] or ""),
            base_options=baseline_options(new.to_store()) if new_job else no_update,
            ranks=_changed(new.ranks or [], shown[(ids.TIMELINE_RANKS, "value")] or []),
            rank_options=rank_options(new) if new_job else no_update,
            unfolded=unfold[0],
            unfold_options=unfold[1],
            text=selection_text(new.to_store()),
            notice_hidden=banner,
        )

    # The views held back on a new page are released once the heatmap has its first figure: the browser asks only
    # while one of their stores is still empty (a Patch of the heatmap's marks, on every click, sent a request each).
    boundary.clientside(
        app,
        RELEASE_WHEN_EMPTY,
        Output(ids.RELEASE, "data"),
        In(ids.HEATMAP, "figure", boundary.ignored),
        *[St(view_store(name), "data", boundary.selection) for name in LATER],
        prevent_initial_call=True,
    )
    boundary.callback(
        app,
        *[Output(view_store(name), "data", allow_duplicate=True) for name in LATER],
        In(ids.RELEASE, "data", boundary.ignored),
        St(ids.SELECTION, "data", boundary.selection),
        *[St(view_store(name), "data", boundary.selection) for name in LATER],
        prevent_initial_call=True,
    )(release)


def reply(views: list[Any] | None = None, **values: Any) -> tuple[Any, ...]:
    """The reducer's answer: each of ``OUTPUTS`` by its name (no_update where not given), then each view's store."""
    unknown = set(values) - set(OUTPUTS)
    if unknown:
        raise ValueError(f"the reducer has no output {sorted(unknown)}")
    return (*[values.get(name, no_update) for name in OUTPUTS], *(views or [no_update] * len(VIEW_FIELDS)))
