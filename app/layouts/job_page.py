"""The job page: summary and findings, then the linked views."""

from __future__ import annotations

from typing import Any

from dash import dcc, html

from paradiag.app import ids
from paradiag.app.data.overview import DEFAULT_METRIC, METRICS
from paradiag.app.selection import VIEW_FIELDS, view_store

# A double-click zooms out to all the figure holds (the server then sends the whole step), not back to the range the
# graph was first drawn with (plotly's default): that would be a zoomed window when the page opened on one.
GRAPH_CONFIG: dict[str, Any] = {"displaylogo": False, "modeBarButtonsToRemove": ["lasso2d", "select2d", "autoScale2d"], "doubleClick": "autosize"}
# What a graph holds until its callback sends the first figure: a Patch (the heatmap's outline) may arrive before
# it does. Marked pending, it is not drawn (assets/plots.js): drawn, it was a whole empty plot per graph.
PENDING: dict[str, Any] = {"data": [], "layout": {"meta": "pending"}}


def panel(title: str, *children: Any, class_name: str = "", help_text: str = "") -> html.Section:
    head = [html.H3(title)] + ([html.Span(help_text, className="pd-help")] if help_text else [])
    return html.Section(className=f"pd-panel {class_name}", children=[html.Div(head, className="pd-panel-head"), *children])


def graph(graph_id: str, modebar: bool = True, scroll_zoom: bool = False) -> dcc.Loading:
    config = {**(GRAPH_CONFIG if modebar else {**GRAPH_CONFIG, "displayModeBar": False}), "scrollZoom": scroll_zoom}
    return dcc.Loading(dcc.Graph(id=graph_id, config=config, figure=PENDING), type="dot", delay_show=400)  # type: ignore[arg-type]


def overview_panel() -> html.Section:
    return panel(
        "Overview",
        graph(ids.STEPS, modebar=False),
        html.Div(
            className="pd-toolbar",
            children=[
                dcc.Dropdown(id=ids.HEATMAP_METRIC, options=[{"label": v, "value": k} for k, v in METRICS.items()], value=DEFAULT_METRIC, clearable=False, className="pd-metric"),
                html.Button("fold all", id=ids.HEATMAP_FOLD, className="pd-button"),
            ],
        ),
        # The unfolded groups: a click on a folded row adds one, unticking folds it back.
        dcc.Checklist(id=ids.HEATMAP_EXPAND, options=[], value=[], inline=True, className="pd-unfolded"),
        graph(ids.HEATMAP),
        class_name="pd-overview",
        help_text="steps: click or brush to pick one · heatmap: ranks × steps by stage, blamed ranks outlined red; click a cell, or a folded row to unfold it",
    )


def timeline_panel() -> html.Section:
    return panel(
        "Timeline",
        html.Div(
            className="pd-toolbar",
            children=[
                dcc.Dropdown(id=ids.TIMELINE_RANKS, multi=True, placeholder="ranks to show first (type to search)", className="pd-rank-picker"),
                dcc.Dropdown(id=ids.OP_SEARCH, options=[], placeholder="/ search an operator", className="pd-op-search"),
                dcc.Checklist(id=ids.TIMELINE_PATH, options=[{"label": " critical path", "value": "path"}], value=[], inline=True),
                html.Button("fold all", id=ids.TIMELINE_FOLD_ALL, className="pd-button"),
            ],
        ),
        # The folded rows opened: a click on a folded row (▸) adds one, unticking folds it back; kept across steps.
        dcc.Checklist(id=ids.TIMELINE_EXPAND, options=[], value=[], inline=True, className="pd-unfolded"),
        dcc.Store(id=ids.TIMELINE_FOLDS, data=[]),
        dcc.Store(id=ids.TIMELINE_ZOOM),
        html.Div(id=ids.TIMELINE_INFO, className="pd-help"),
        graph(ids.TIMELINE, scroll_zoom=True),
        class_name="pd-timeline",
        help_text="time in ms since the job's first step · drag, wheel or W/S to zoom, A/D to pan, double-click to zoom out",
    )


def marey_panel() -> html.Section:
    return panel(
        "Marey's graph",
        html.Div(
            className="pd-toolbar",
            children=[
                html.Button("◀ back", id=ids.MAREY_BACK, className="pd-button"),
                dcc.Checklist(id=ids.MAREY_EXPAND, options=[{"label": " all devices", "value": "devices"}], value=[], inline=True),
                dcc.Checklist(id=ids.MAREY_PATH, options=[{"label": " critical path", "value": "path"}], value=[], inline=True),
            ],
        ),
        dcc.Store(id=ids.ZOOM_STACK, data=[]),
        dcc.Store(id=ids.MAREY_CLICK),
        dcc.Store(id=ids.MAREY_ZOOM),
        dcc.Store(id=ids.MAREY_DRAWN, data={}),
        graph(ids.MAREY),
        class_name="pd-marey",
        help_text="stages top to bottom, time across; drag to zoom, double-click to zoom out",
    )


GUIDE = (
    "How to read this page: the findings above name what slows the job, ranked by the step time a fix would save; "
    "click one to select its culprit in every view. Overview: step time per step (ms), then ranks × steps "
    "(blamed ranks outlined red; click a cell for that rank and step). Timeline: the selected ranks' devices in ms "
    "since the job's first step, the culprit first and the ranks that wait for it next. Marey's graph: each pipeline "
    "stage's operators across its devices, so a late device or stage slants its bands. Below: the selected device's "
    "operators, the communication matrix (links slower than comparable ones), a baseline to compare with, and the "
    "execution flow. Times are in ms unless a label says µs; press ? for the keys."
)


def guide() -> html.Details:
    """The one-paragraph guide on a job's first page (open; a click folds it away)."""
    return html.Details([html.Summary("guide"), html.P(GUIDE, className="pd-help pd-guide")], open=True, id=ids.GUIDE, className="pd-guide-box")


def layout() -> html.Div:
    return html.Div(
        className="pd-job",
        children=[
            *[dcc.Store(id=view_store(name)) for name in VIEW_FIELDS],
            html.Div(className="pd-summary", children=[html.Div(id=ids.SUMMARY_FACTS, className="pd-facts"), html.Ol(id=ids.FINDINGS, className="pd-findings"), guide()]),
            # The first screen: where the fault is (overview) and who waits for whom (timeline).
            html.Div(className="pd-row", children=[overview_panel(), timeline_panel()]),
            marey_panel(),
            html.Div(
                className="pd-row",
                children=[
                    panel(
                        "Device detail",
                        html.Div(id=ids.DETAIL_TITLE, className="pd-help"),
                        html.Div(className="pd-detail-grid", children=[graph(g, modebar=False) for g in (ids.DETAIL_OPERATORS, ids.DETAIL_BREAKDOWN, ids.DETAIL_DISTRIBUTION, ids.DETAIL_COLLECTIVES)]),
                        class_name="pd-detail",
                    ),
                    panel(
                        "Communication matrix",
                        html.Div(
                            className="pd-toolbar",
                            children=[
                                html.Button("◀ up", id=ids.COMM_UP, className="pd-button"),
                                dcc.RadioItems(id=ids.COMM_METRIC, options=[{"label": f" {m}", "value": m} for m in ("slowness", "bandwidth", "bytes", "time")], value="slowness", inline=True),
                            ],
                        ),
                        dcc.Store(id=ids.COMM_DRILL, data={}),
                        graph(ids.COMM_MATRIX),
                        html.Div(id=ids.COMM_INSTANCES, className="pd-instances"),
                        class_name="pd-comm",
                    ),
                ],
            ),
            panel(
                "Compare with a baseline",
                dcc.Dropdown(id=ids.BASELINE_PICKER, options=[], value="", clearable=False, placeholder="baseline job", className="pd-baseline-picker"),
                html.Div(id=ids.COMPARE_SUMMARY, className="pd-compare-summary"),
                html.Div(className="pd-row", children=[graph(ids.COMPARE_RANKS, modebar=False), graph(ids.COMPARE_OPERATORS, modebar=False)]),
                class_name="pd-compare",
                help_text="paradiag compare: this job against a served folder, a sample or one of your uploads",
            ),
            panel(
                "Execution flow",
                html.Div(
                    className="pd-toolbar",
                    children=[
                        dcc.RadioItems(id=ids.FLOW_COLOR, options=[{"label": " imbalance", "value": "imbalance"}, {"label": " measured time", "value": "time"}], value="imbalance", inline=True),
                        dcc.Checklist(id=ids.FLOW_EXPAND, options=[{"label": " expand repeated blocks", "value": "repeats"}], value=[], inline=True),
                    ],
                ),
                dcc.Store(id=ids.FLOW_DRAWN, data={}),
                graph(ids.FLOW),
                class_name="pd-flow",
                help_text="operators in execution order per stage; repeated layers collapsed; click a node",
            ),
        ],
    )
