"""The selection reducer: every click, zoom and URL change goes through ``select`` into one selection state.

One callback owns both the selection store and the URL, so the two never disagree and the page can be shared.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from dash import ALL, Dash, Input, Output, State, ctx, no_update

from paradiag.app import context, ids
from paradiag.app import selection as sel_mod
from paradiag.app.callbacks.compare import baseline_options
from paradiag.app.data.comm import link_instances
from paradiag.app.data.common import slowest_step, steps_of
from paradiag.app.data.findings import findings_of
from paradiag.app.jobs import JobNotFound

INPUTS = [
    (ids.URL, "search"),
    (ids.URL, "href"),
    (ids.HEATMAP, "clickData"),
    (ids.TIMELINE, "relayoutData"),
    (ids.MAREY, "clickData"),
    (ids.MAREY, "relayoutData"),
    (ids.MAREY_BACK, "n_clicks"),
    (ids.DETAIL_OPERATORS, "clickData"),
    (ids.COMM_MATRIX, "clickData"),
    (ids.FLOW, "clickData"),
    (ids.STEP_PICKER, "value"),
    (ids.CLEAR_SELECTION, "n_clicks"),
    (ids.BASELINE_PICKER, "value"),
]
OUTPUTS = 7
ZOOMS = ((ids.TIMELINE, "relayoutData"), (ids.MAREY, "relayoutData"))


def select(trigger: Any, value: Any, sel: dict[str, Any] | None, search: str | None) -> dict[str, Any]:
    """The new selection after ``trigger`` (a (component id, property) pair, or a finding button's id)
    delivered ``value``."""
    if trigger in (None, (ids.URL, "search"), (ids.URL, "href")) or not sel:
        new = sel_mod.from_query(search)
        if not new["job"] and context.config().job:
            new["job"] = "served"
        return _with_defaults(new)
    if isinstance(trigger, dict) and trigger.get("type") == ids.FINDING_BUTTON:
        return _finding(sel, trigger["index"])
    handler = _HANDLERS.get(trigger)
    return _with_defaults(handler(sel, value)) if handler and value is not None else sel


def _with_defaults(sel: dict[str, Any]) -> dict[str, Any]:
    if sel.get("job") and sel.get("step") is None:
        try:
            sel = sel_mod.update(sel, step=slowest_step(context.job(sel["job"])))
        except JobNotFound:
            return sel_mod.update(None)
    return sel


def zoom_stack(trigger: Any, old: dict[str, Any] | None, new: dict[str, Any], stack: list[Any] | None) -> list[Any]:
    """Windows to go back to: a zoom pushes the window it left, ◀ back pops (see ``_back``)."""
    stack = list(stack or [])
    if trigger in ZOOMS and old and new.get("window") != old.get("window"):
        stack.append(old.get("window"))
    elif trigger == (ids.MAREY_BACK, "n_clicks") and stack:
        stack.pop()
    return stack[-20:]


def _back(sel: dict[str, Any], stack: list[Any]) -> dict[str, Any]:
    return sel_mod.update(sel, window=stack[-1] if stack else None)


def _heatmap(sel: dict[str, Any], click: dict[str, Any]) -> dict[str, Any]:
    point = click["points"][0]
    ranks = [int(r) for r in str(point["customdata"]).split(",") if r != ""]
    return sel_mod.update(sel, ranks=ranks, step=int(point["x"]), window=None, collective=None)


def _timeline_zoom(sel: dict[str, Any], relayout: dict[str, Any]) -> dict[str, Any]:
    if "xaxis.range[0]" in relayout and "xaxis.range[1]" in relayout:
        return sel_mod.update(sel, window=[float(relayout["xaxis.range[0]"]), float(relayout["xaxis.range[1]"])])
    if relayout.get("xaxis.autorange"):
        return sel_mod.update(sel, window=None)
    return sel


def _marey_click(sel: dict[str, Any], click: dict[str, Any]) -> dict[str, Any]:
    custom = click["points"][0].get("customdata")
    if not isinstance(custom, list) or len(custom) < 2:
        return sel
    at = custom[2] if len(custom) > 2 else click["points"][0].get("x")  # which instance of the operator (and so which flow node)
    return sel_mod.update(sel, op=custom[0], stage=int(custom[1]), at=float(at) if at is not None else None)


def _operator_click(sel: dict[str, Any], click: dict[str, Any]) -> dict[str, Any]:
    name = click["points"][0].get("customdata")
    return sel_mod.update(sel, op=name, at=None) if name else sel


def _comm_click(sel: dict[str, Any], click: dict[str, Any]) -> dict[str, Any]:
    """A link: its slowest collective instance is selected (its ranks, step and a window around it)."""
    point = click["points"][0]
    if not (str(point["y"]).isdigit() and str(point["x"]).isdigit()):
        return sel  # a block of ranks (stage or node): the matrix opens it
    found = link_instances(context.job(sel["job"]), int(point["y"]), int(point["x"]), top=1)
    if not found:
        return sel
    slowest = found[0]
    name = f"{slowest['collective']}/group {slowest['group']}/#{slowest['instance']}"
    return sel_mod.update(sel, ranks=slowest["ranks"], collective=name, step=slowest["step"], window=slowest["window"])


def _flow_click(sel: dict[str, Any], click: dict[str, Any]) -> dict[str, Any]:
    custom = click["points"][0].get("customdata")
    if not isinstance(custom, list) or len(custom) < 3:
        return sel
    span = custom[2]
    return sel_mod.update(sel, op=custom[0], stage=int(custom[1]), window=span, at=(span[0] + span[1]) / 2)


def _finding(sel: dict[str, Any], index: int) -> dict[str, Any]:
    found = findings_of(context.job(sel["job"]))
    if not 0 <= index < len(found):
        return sel
    f = found[index]
    changes: dict[str, Any] = {"ranks": f.get("ranks") or sel.get("ranks"), "window": None, "collective": None}
    if f.get("steps"):
        changes["step"] = f["steps"][0]
    changes["stage"] = f.get("stage")
    changes["op"] = f.get("operator")
    changes["at"] = None
    return sel_mod.update(sel, **changes)


_HANDLERS = {
    (ids.HEATMAP, "clickData"): _heatmap,
    (ids.TIMELINE, "relayoutData"): _timeline_zoom,
    (ids.MAREY, "clickData"): _marey_click,
    (ids.MAREY, "relayoutData"): _timeline_zoom,
    (ids.DETAIL_OPERATORS, "clickData"): _operator_click,
    (ids.COMM_MATRIX, "clickData"): _comm_click,
    (ids.FLOW, "clickData"): _flow_click,
    (ids.STEP_PICKER, "value"): lambda sel, step: sel_mod.update(sel, step=int(step), window=None, collective=None),
    (ids.CLEAR_SELECTION, "n_clicks"): lambda sel, _: sel_mod.update(None, job=sel.get("job"), step=sel.get("step"), base=sel.get("base")),
    (ids.BASELINE_PICKER, "value"): lambda sel, base: sel_mod.update(sel, base=base or None),
}


def step_options(sel: dict[str, Any]) -> list[dict[str, Any]]:
    if not sel.get("job"):
        return []
    return [{"label": f"step {s}", "value": s} for s in steps_of(context.job(sel["job"]))]


def register(app: Dash) -> None:
    @app.callback(
        Output(ids.SELECTION, "data"),
        Output(ids.URL, "search"),
        Output(ids.STEP_PICKER, "value"),
        Output(ids.STEP_PICKER, "options"),
        Output(ids.ZOOM_STACK, "data"),
        Output(ids.BASELINE_PICKER, "value"),
        Output(ids.BASELINE_PICKER, "options"),
        *[Input(cid, prop) for cid, prop in INPUTS],
        Input({"type": ids.FINDING_BUTTON, "index": ALL}, "n_clicks"),
        State(ids.SELECTION, "data"),
        State(ids.ZOOM_STACK, "data"),
    )
    def on_change(*args: Any) -> tuple[Any, ...]:
        values, finding_clicks, sel, stack = args[: len(INPUTS)], args[len(INPUTS)], args[-2], args[-1]
        # A callback that sets the href (an upload that finished) may reach us before the search is updated.
        search = "?" + urlsplit(values[1]).query if values[1] and urlsplit(values[1]).query else values[0]
        trigger = _trigger()
        if isinstance(trigger, dict) and not any(finding_clicks or []):
            return (no_update,) * OUTPUTS  # finding buttons appearing, not clicked
        if trigger == (ids.MAREY_BACK, "n_clicks"):
            new = _back(sel or {}, stack or [])
        else:
            new = select(trigger, values[INPUTS.index(trigger)] if trigger in INPUTS else None, sel, search)
        if new == sel:
            return (no_update,) * OUTPUTS
        query = sel_mod.to_query(new)
        picker = values[INPUTS.index((ids.STEP_PICKER, "value"))]
        step = new.get("step") if new.get("step") != picker else no_update
        new_job = (sel or {}).get("job") != new.get("job")
        options = step_options(new) if new_job else no_update
        base = (new.get("base") or "") if (new.get("base") or "") != (values[INPUTS.index((ids.BASELINE_PICKER, "value"))] or "") else no_update
        base_options = baseline_options(new) if new_job else no_update
        return new, (query if query != (search or "") else no_update), step, options, zoom_stack(trigger, sel, new, stack), base, base_options


def _trigger() -> Any:
    """(component id, property) of what fired, a finding button's id, or None on the first call."""
    if not ctx.triggered_id:
        return None
    if isinstance(ctx.triggered_id, dict):
        return ctx.triggered_id
    prop = ctx.triggered[0]["prop_id"].rsplit(".", 1)[-1]
    return (ctx.triggered_id, prop)
