"""The Gantt timeline, one view unit (its panel, the selection fields it reads, its callbacks, its static render):
the selected ranks (else those the top finding blames) first. In a small job, then the ranks
that wait for them; in a larger one, then the ranks that stand apart, and every other rank folded with the alike
ranks of its stage (a click on a folded row opens it: a stage into its mesh groups, a group into its ranks). A
toggle draws the step's critical path over the rows."""

from __future__ import annotations

import re
from typing import Any

from dash import Dash, Input, Output, State, dcc, html, no_update

from paradiag.app import boundary, coerce, context, ids, store
from paradiag.app.boundary import In, St
from paradiag.app.data.common import clock_window, step_span
from paradiag.app.data.detail import operator_totals
from paradiag.app.data.overview import focus, opening_step
from paradiag.app.data.shapes import TimelineData
from paradiag.app.data.timeline import timeline_data
from paradiag.app.figures.common import short_name
from paradiag.app.figures.timeline import timeline_figure
from paradiag.app.layouts.common import graph
from paradiag.app.layouts.common import panel as panel_of
from paradiag.app.selection import UNDO, Selection, view_store
from paradiag.app.views.timeline.static import rows_of, shown_ranks
from paradiag.job import Job

# The selection's fields it is drawn from, and the operator search's (its choices follow the job alone: 400 of them
# are not needed to draw the first screen).
FIELDS = {"timeline": ("job", "step", "ranks", "window", "collective"), "search": ("job",)}

# Its place on the job page: the graph its export bar exports, with its table, half a row or not.
EXPORTS = (ids.TIMELINE, True)
HALF = True
PIXELS = 800
# Intervals drawn one by one (each with its hover line) up to this many; beyond, merged per pixel column. A step of
# 8 ranks holds ~12k intervals, 1.5 MB with their names: a zoom (drag, wheel, W) shows single kernels.
MAX_INTERVALS = 5000
MAX_OPERATORS = 400
# A double-click zooms out; plotly reports its first click as a click too, which opens the fold under the mouse at
# once (assets/marey_clicks.js): the zoom out of a double-click folds back what its first click opened
# (``fold_back``: the folds opened before it, carried by the zoom as ``UNDO``; one callback with the click's,
# so that the browser drops the click's answer when it comes after the zoom out's), as on Marey's graph.
PASS_CLICK = """
function(click, unfolded) {
    return window.__pdPassClick("GRAPH", click, "STORE", {unfolded: unfolded || []});
}
""".replace("GRAPH", ids.TIMELINE).replace("STORE", ids.TIMELINE_CLICK)


def window_ns(job: Job, sel: dict[str, Any], ranks: list[int] | None) -> tuple[int, int]:
    """The selected window, else the step's span over ``ranks`` (None: over all ranks)."""
    step = sel["step"] if sel.get("step") is not None else 0
    return clock_window(job, sel.get("window")) or step_span(job, step, ranks)


def instance_of(collective: str | None) -> int | None:
    """The instance id at the end of a selected collective's name (``all_reduce/group g/#42``)."""
    match = re.search(r"#(\d+)$", collective or "")
    return int(match.group(1)) if match else None


def view_data(
    job: Job, ranks: list[int], sel: dict[str, Any], expand: list[str] | None = None, path: bool = False
) -> TimelineData:
    """The timeline's data for the selection, the folds opened and the critical path toggle; a whole step (no
    window) is computed once per job, ranks and folding."""
    limit, instance = min(context.config().max_primitives, MAX_INTERVALS), instance_of(sel.get("collective"))
    opened = sorted(set(expand or []))
    step = sel.get("step") if sel.get("step") is not None else opening_step(job)

    def compute() -> TimelineData:
        entries = rows_of(job, ranks, opened)
        folded = any(isinstance(e, dict) for e in entries)
        window = window_ns(job, sel, None if folded else ranks)
        return timeline_data(
            job, entries, window, pixels=PIXELS, max_primitives=limit, instance=instance, step=step, path=path
        )

    if sel.get("window"):
        return compute()
    return store.memo(
        "timeline-step", job, [sel.get("step"), ranks, PIXELS, limit, instance, opened, path], compute
    )


def render_timeline(
    view: dict[str, Any] | None,
    expand: list[str] | None = None,
    path: list[str] | None = None,
    drawn: dict[str, Any] | None = None,
) -> tuple[Any, Any, Any, Any]:
    """The figure, the line above it, the folded rows a click opens, and what is drawn (``drawn``): a selection
    that changes none of what the figure shows (the top finding's ranks clicked where the page opened on them, a
    cell of a rank already first) redraws nothing and says only who chose the ranks."""
    sel = Selection.from_store(view)
    if not sel.job:
        return no_update, no_update, no_update, no_update
    job = context.job(sel.job)
    ranks = shown_ranks(job, sel.ranks, sel.step)
    chosen = [r for r in ranks if r in set(sel.ranks or focus(job)["ranks"])]
    timeline = sel.view("timeline")
    key = [
        sel.job,
        sel.step,
        timeline.get("window"),
        timeline.get("collective"),
        ranks,
        chosen,
        sorted(expand or []),
        bool(path),
    ]
    data = view_data(job, ranks, timeline, expand, bool(path))
    info = _info(data, ranks, chosen, "selected" if sel.ranks else "blamed by a finding")
    if drawn and drawn.get("key") == key:
        return no_update, info, no_update, no_update
    fig = timeline_figure(data, uirevision=f"{sel.job}|{sel.step}|{','.join(map(str, ranks))}", marked=chosen)
    openable = [
        row["fold"] if row["rank"] is None and not row["fold"].endswith(".rest") else ""
        for row in data["rows"]
    ]
    return fig, info, openable, {"key": key, "traces": len(fig.data)}


def _info(data: TimelineData, ranks: list[int], chosen: list[int], who: str) -> str:
    mode = "merged to screen resolution" if data["aggregated"] else "every interval drawn"
    others = [r for r in ranks if r not in chosen]
    folds = [row for row in data["rows"] if row["rank"] is None]
    if folds:
        then = f"then the ranks that stand apart: {', '.join(map(str, others)) or 'none'} · ▸ alike ranks folded (bar: median, light band: earliest start to latest end; click to open) · "
    else:
        then = f"then the ranks that wait for them longest: {', '.join(map(str, others)) or 'none'} · "
    path = (
        "gold: the critical path, its lines join a rank to the rank it waited for (◆: it crosses a folded row) · "
        if data.get("path")
        else ""
    )
    return (
        f"ranks {', '.join(map(str, chosen))} ({who}) · {then}{path}"
        f"{data['num_events']:,} device events in view ({mode}) · black lines join the members of one collective; red: waiting for the last member · "
        "keys: W/S zoom, A/D pan, / search an operator"
    )


def open_fold(
    click: dict[str, Any] | None, folds: list[str] | None, expanded: list[str] | None, known: list[Any] | None
) -> tuple[Any, Any]:
    """A click on a folded row opens it: (folds opened, the tick boxes of every fold opened so far)."""
    if not click or not folds:
        return no_update, no_update
    y = coerce.integer((coerce.first_point(click) or {}).get("y"), 0)
    key = folds[y] if y is not None and y < len(folds) else ""
    if not key or key in (expanded or []):
        return no_update, no_update
    names = [o["value"] for o in known or []]
    return [*(expanded or []), key], (known or []) + (
        [] if key in names else [{"label": f" {key}", "value": key}]
    )


def fold_back(zoom: dict[str, Any] | None, expanded: list[str] | None) -> Any:
    """A double-click's zoom out: the folds opened before its first click, where that click opened one."""
    before = coerce.mapping((zoom or {}).get(UNDO)) or {}
    unfolded = coerce.texts(before.get("unfolded"))
    return unfolded if unfolded is not None and unfolded != (expanded or []) else no_update


def click_or_zoom(
    click: dict[str, Any] | None,
    zoom: dict[str, Any] | None,
    folds: list[str] | None,
    expanded: list[str] | None,
    known: list[Any] | None,
) -> tuple[Any, Any]:
    """The folds after a click (``open_fold``) or a zoom (``fold_back``); after both, in the order they happened,
    where the browser merged a click and its double-click's zoom out into one request."""
    value, options = expanded or [], known or []
    for trigger in boundary.fired({(ids.TIMELINE_CLICK, "data"): click, (ids.TIMELINE_ZOOM, "data"): zoom}):
        if trigger == (ids.TIMELINE_ZOOM, "data"):
            back = fold_back(zoom, value)
            value = value if back is no_update else back
        elif trigger == (ids.TIMELINE_CLICK, "data"):
            opened, more = open_fold(click, folds, value, options)
            value, options = (value, options) if opened is no_update else (opened, more)
    if value == (expanded or []):
        return no_update, no_update
    return value, options if options != (known or []) else no_update


def operator_names(view: dict[str, Any] | None) -> Any:
    """The operator search's choices: the job's operators, most device time first."""
    sel = Selection.from_store(view)
    if not sel.job:
        return no_update
    totals = operator_totals(context.job(sel.job)).group_by("name").aggregate([("dur_ns_sum", "sum")])
    order = sorted(
        zip(totals.column("dur_ns_sum_sum").to_pylist(), totals.column("name").to_pylist(), strict=True),
        reverse=True,
    )
    return [{"label": short_name(name, 60), "value": name} for _, name in order[:MAX_OPERATORS]]


def panel() -> html.Section:
    return panel_of(
        "Timeline",
        html.Div(
            className="pd-toolbar",
            children=[
                dcc.Dropdown(
                    id=ids.TIMELINE_RANKS,
                    multi=True,
                    placeholder="ranks to show first (type to search)",
                    className="pd-rank-picker",
                ),
                dcc.Dropdown(
                    id=ids.OP_SEARCH, options=[], placeholder="/ search an operator", className="pd-op-search"
                ),
                dcc.Checklist(
                    id=ids.TIMELINE_PATH,
                    options=[{"label": " critical path", "value": "path"}],
                    value=[],
                    inline=True,
                ),
                html.Button("fold all", id=ids.TIMELINE_FOLD_ALL, className="pd-button"),
                dcc.Input(
                    id=ids.EVENT_SEARCH,
                    type="search",
                    debounce=True,
                    placeholder="find events by name (Enter)",
                    className="pd-event-search",
                ),
            ],
        ),
        html.Div(id=ids.EVENT_MATCHES, className="pd-help pd-event-matches"),
        # The folded rows opened: a click on a folded row (▸) adds one, unticking folds it back; kept across steps.
        dcc.Checklist(id=ids.TIMELINE_EXPAND, options=[], value=[], inline=True, className="pd-unfolded"),
        dcc.Store(id=ids.TIMELINE_FOLDS, data=[]),
        dcc.Store(id=ids.TIMELINE_DRAWN, data={}),
        dcc.Store(id=ids.TIMELINE_ZOOM),
        dcc.Store(id=ids.TIMELINE_CLICK),
        html.Div(id=ids.TIMELINE_INFO, className="pd-help"),
        graph(ids.TIMELINE, scroll_zoom=True),
        class_name="pd-timeline",
        help_text="time in ms since the job's first step · drag, wheel or W/S to zoom, A/D to pan, double-click to zoom out",
    )


def register(app: Dash) -> None:
    boundary.callback(
        app,
        Output(ids.TIMELINE, "figure"),
        Output(ids.TIMELINE_INFO, "children"),
        Output(ids.TIMELINE_FOLDS, "data"),
        Output(ids.TIMELINE_DRAWN, "data"),
        In(view_store("timeline"), "data", boundary.selection),
        In(ids.TIMELINE_EXPAND, "value", boundary.texts),
        In(ids.TIMELINE_PATH, "value", boundary.texts),
        St(ids.TIMELINE_DRAWN, "data", boundary.drawn),
        prevent_initial_call=True,
    )(render_timeline)
    boundary.clientside(
        app,
        PASS_CLICK,
        Output(ids.TIMELINE_CLICK, "data"),
        Input(ids.TIMELINE, "clickData"),
        State(ids.TIMELINE_EXPAND, "value"),
        prevent_initial_call=True,
    )
    boundary.callback(
        app,
        Output(ids.TIMELINE_EXPAND, "value"),
        Output(ids.TIMELINE_EXPAND, "options"),
        In(ids.TIMELINE_CLICK, "data", boundary.event),
        In(ids.TIMELINE_ZOOM, "data", boundary.event),
        St(ids.TIMELINE_FOLDS, "data", boundary.texts),
        St(ids.TIMELINE_EXPAND, "value", boundary.texts),
        St(ids.TIMELINE_EXPAND, "options", boundary.options),
        prevent_initial_call=True,
    )(click_or_zoom)
    boundary.callback(
        app,
        Output(ids.TIMELINE_EXPAND, "value", allow_duplicate=True),
        Output(ids.TIMELINE_EXPAND, "options", allow_duplicate=True),
        In(ids.TIMELINE_FOLD_ALL, "n_clicks", boundary.ignored),
        prevent_initial_call=True,
    )(lambda _: ([], []))
    boundary.callback(
        app,
        Output(ids.OP_SEARCH, "options"),
        In(view_store("search"), "data", boundary.selection),
        prevent_initial_call=True,
    )(operator_names)
