"""The job page: summary and findings, then the views' panels (each view's own: ``paradiag.app.views``), placed
here."""

from __future__ import annotations

from dash import dcc, html

from paradiag.app import ids
from paradiag.app.layouts.common import with_exports
from paradiag.app.selection import view_store
from paradiag.app.views import VIEW_FIELDS
from paradiag.app.views.comm import live as comm
from paradiag.app.views.compare import live as compare
from paradiag.app.views.detail import live as detail
from paradiag.app.views.flow import live as flow
from paradiag.app.views.marey import live as marey
from paradiag.app.views.overview import live as overview
from paradiag.app.views.timeline import live as timeline

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
    return html.Details(
        [html.Summary("guide"), html.P(GUIDE, className="pd-help pd-guide")],
        open=True,
        id=ids.GUIDE,
        className="pd-guide-box",
    )


def layout() -> html.Div:
    return html.Div(
        className="pd-job",
        children=[
            *[dcc.Store(id=view_store(name)) for name in VIEW_FIELDS],
            dcc.Store(id=ids.RELEASE),
            html.Div(
                className="pd-summary",
                children=[
                    html.Div(id=ids.SUMMARY_FACTS, className="pd-facts"),
                    html.Ol(id=ids.FINDINGS, className="pd-findings"),
                    guide(),
                ],
            ),
            # The first screen: where the fault is (overview) and who waits for whom (timeline).
            html.Div(
                className="pd-row",
                children=[
                    with_exports(overview.panel(), "overview", ids.HEATMAP),
                    with_exports(timeline.panel(), "timeline", ids.TIMELINE),
                ],
            ),
            with_exports(marey.panel(), "marey", ids.MAREY),
            html.Div(
                className="pd-row",
                children=[
                    with_exports(detail.panel(), "detail", ids.DETAIL_OPERATORS),
                    with_exports(comm.panel(), "comm", ids.COMM_MATRIX),
                ],
            ),
            with_exports(compare.panel(), "compare", ids.COMPARE_RANKS, table=False),
            with_exports(flow.panel(), "flow", ids.FLOW),
        ],
    )
