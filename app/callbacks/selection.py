"""The selection reducer: every click, zoom and URL change goes through ``select`` into one selection state.

One callback owns both the selection store and the URL, so the two never disagree and the page can be shared.
"""

from __future__ import annotations

from typing import Any

from dash import ALL, Dash, Input, Output, State, ctx, no_update

from paradiag.app import context, ids
from paradiag.app import selection as sel_mod
from paradiag.app.data.common import slowest_step, steps_of
from paradiag.app.data.findings import findings_of
from paradiag.app.jobs import JobNotFound

INPUTS = {
    ids.URL: "search",
    ids.HEATMAP: "clickData",
    ids.TIMELINE: "relayoutData",
    ids.MAREY: "clickData",
    ids.DETAIL_OPERATORS: "clickData",
    ids.COMM_MATRIX: "clickData",
    ids.FLOW: "clickData",
    ids.STEP_PICKER: "value",
    ids.CLEAR_SELECTION: "n_clicks",
}


def select(trigger: Any, value: Any, sel: dict[str, Any] | None, search: str | None) -> dict[str, Any]:
    """The new selection after ``trigger`` (a component id) delivered ``value``."""
    if trigger in (None, ids.URL) or not sel:
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
    return sel_mod.update(sel, op=custom[0], stage=int(custom[1]))


def _operator_click(sel: dict[str, Any], click: dict[str, Any]) -> dict[str, Any]:
    name = click["points"][0].get("customdata")
    return sel_mod.update(sel, op=name) if name else sel


def _comm_click(sel: dict[str, Any], click: dict[str, Any]) -> dict[str, Any]:
    custom = click["points"][0].get("customdata")
    if not custom or not custom[0]:
        return sel
    slowest = custom[0]
    return sel_mod.update(sel, ranks=slowest["ranks"], collective=slowest["collective"], step=slowest["step"], window=slowest["window"])


def _flow_click(sel: dict[str, Any], click: dict[str, Any]) -> dict[str, Any]:
    custom = click["points"][0].get("customdata")
    if not isinstance(custom, list) or len(custom) < 3:
        return sel
    return sel_mod.update(sel, op=custom[0], stage=int(custom[1]), window=custom[2])


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
    return sel_mod.update(sel, **changes)


_HANDLERS = {
    ids.HEATMAP: _heatmap,
    ids.TIMELINE: _timeline_zoom,
    ids.MAREY: _marey_click,
    ids.DETAIL_OPERATORS: _operator_click,
    ids.COMM_MATRIX: _comm_click,
    ids.FLOW: _flow_click,
    ids.STEP_PICKER: lambda sel, step: sel_mod.update(sel, step=int(step), window=None, collective=None),
    ids.CLEAR_SELECTION: lambda sel, _: sel_mod.update(None, job=sel.get("job"), step=sel.get("step")),
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
        *[Input(cid, prop) for cid, prop in INPUTS.items()],
        Input({"type": ids.FINDING_BUTTON, "index": ALL}, "n_clicks"),
        State(ids.SELECTION, "data"),
    )
    def on_change(*args: Any) -> tuple[Any, ...]:
        sel, search = args[-1], args[0]
        trigger = ctx.triggered_id
        if isinstance(trigger, dict) and not any(args[len(INPUTS)] or []):
            return no_update, no_update, no_update, no_update  # finding buttons appearing, not clicked
        value = args[list(INPUTS).index(trigger)] if trigger in INPUTS else None
        new = select(trigger, value, sel, search)
        if new == sel:
            return no_update, no_update, no_update, no_update
        query = sel_mod.to_query(new)
        step = new.get("step") if new.get("step") != args[list(INPUTS).index(ids.STEP_PICKER)] else no_update
        options = step_options(new) if (sel or {}).get("job") != new.get("job") else no_update
        return new, (query if query != (search or "") else no_update), step, options
