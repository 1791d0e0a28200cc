"""The job page: summary and findings, then the views' panels (each view's own: ``paradiag.app.views``) in the
views' order, each with its export bar; two half-width panels in a row share it (the first screen: where the fault
is, the overview, and who waits for whom, the timeline)."""

from __future__ import annotations

from dash import dcc, html
from dash.development.base_component import Component

from paradiag.app import ids
from paradiag.app.layouts.common import with_exports
from paradiag.app.selection import view_store
from paradiag.app.views import NAMES, VIEW_FIELDS, VIEWS

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


def panels() -> list[Component]:
    """Every view's panel with its export bar, in order; consecutive half-width panels paired in a row."""
    out: list[Component] = []
    row: list[Component] = []
    for name, view in zip(NAMES, VIEWS, strict=True):
        if row and (len(row) == 2 or not view.HALF):
            out.append(html.Div(className="pd-row", children=row))
            row = []
        graph_id, table = view.EXPORTS
        (row if view.HALF else out).append(with_exports(view.panel(), name, graph_id, table))
    if row:
        out.append(html.Div(className="pd-row", children=row))
    return out


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
            *panels(),
        ],
    )
