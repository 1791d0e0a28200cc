"""The compare panel, one view unit (its panel, the selection fields it reads, its callback): the current job against a baseline picked from the bundled samples, this user's uploads or
the served job (``base`` in the selection and the URL)."""

from __future__ import annotations

from typing import Any

from dash import Dash, Output, dcc, html, no_update

from paradiag.analysis.compare import CompareDoc, change_text, culprit_text, kind_text, layout_text
from paradiag.app import boundary, context, ids, jobs, uploads
from paradiag.app.boundary import In
from paradiag.app.data.compare import compare_jobs
from paradiag.app.data.overview import report
from paradiag.app.figures.common import empty_figure
from paradiag.app.figures.compare import operator_changes_figure, rank_changes_figure
from paradiag.app.layouts.common import graph
from paradiag.app.layouts.common import panel as panel_of
from paradiag.app.selection import view_store
from paradiag.job import Job
from paradiag.units import ms

FIELDS = {"compare": ("job", "base")}

# Its place on the job page: the graph its export bar exports (no table), half a row or not.
EXPORTS = (ids.COMPARE_RANKS, False)
HALF = False
NONE = {"label": "no baseline", "value": ""}


def baseline_options(sel: dict[str, Any]) -> list[dict[str, Any]]:
    """Every job this user may open, but the current one: the folders the server serves, the bundled samples and
    this user's finished uploads."""
    cfg = context.config()
    shown = [(token, f"served {name}") for token, name in jobs.served(cfg)]
    shown += [(f"sample:{name}", f"sample {name}") for name in jobs.samples(cfg)]
    shown += [(f"upload:{u}", f"upload {u}") for u in _uploads(cfg)]
    return [NONE] + [{"label": label, "value": token} for token, label in shown if token != sel.get("job")]


def _uploads(cfg: Any) -> list[str]:
    try:
        root = jobs.user_upload_root(cfg, context.user_id())
    except jobs.JobNotFound:
        return []
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if uploads.read_status(p).get("state") == "done")


def render_compare(view: dict[str, Any] | None) -> tuple[Any, Any, Any]:
    """(summary, per-rank change bars, operator change bars) of the current job against the selection's
    ``base``; a warning first when the two jobs are not laid out alike (ranks then do not mean the same)."""
    if not view or not view.get("job"):
        return no_update, no_update, no_update
    if not view.get("base"):
        hint = empty_figure("pick a baseline job above", height=160)
        return html.P("Pick a baseline to see what changed against it.", className="pd-help"), hint, hint
    try:
        base, job = context.job(view["base"]), context.job(view["job"])
    except jobs.JobNotFound:
        missing = empty_figure("baseline not found", height=160)
        return html.P(f"no baseline {view['base']!r} you may open", className="pd-help"), missing, missing
    doc = compare_jobs(base, job)
    if doc.get("refused"):
        refused = empty_figure("not comparable", height=160)
        return [html.P(doc["refused"], className="pd-warning pd-compare-refused")], refused, refused
    warning = layout_warning(base, job)
    pairing = html.P(doc["rank_pairing"]["text"], className="pd-help")
    return (
        ([html.P(warning, className="pd-warning")] if warning else []) + [pairing, *summary(doc)],
        rank_changes_figure(doc),
        operator_changes_figure(doc),
    )


def layout_warning(base: Job, job: Job) -> str | None:
    """What differs between the two jobs' sizes and parallel layouts, or None when they match."""
    a, b = layout_text(report(base)), layout_text(report(job))
    if a == b:
        return None
    return f"the jobs differ: baseline {a}, this job {b}; ranks are compared by their place in the mesh, as said below"


def summary(doc: CompareDoc) -> list[Any]:
    """Top change, step time change, findings that appeared and disappeared."""
    top, step, found = doc["top_change"], doc["step_time_ns"], doc["findings"]
    pct = step["delta_pct"]
    items = [
        html.P([html.B("top change: "), change_text(top)], className="pd-compare-top"),
        html.P(
            f"median step {ms(step['baseline'])} → {ms(step['candidate'])} ms"
            + (f" ({pct:+.1f}%)" if pct is not None else "")
        ),
    ]
    changes = [
        html.Li(f"{sign} {what}: {_finding(f)}")
        for sign, what in (("+", "appeared"), ("−", "disappeared"))
        for f in found[what]
    ]
    return [
        *items,
        html.Ul(changes or [html.Li("no finding appeared or disappeared")], className="pd-compare-findings"),
    ]


def _finding(f: dict[str, Any]) -> str:
    who = culprit_text(f.get("culprit"))
    return kind_text(f.get("kind")) + (f" ({who})" if who else "") + f": {f.get('evidence', '')}"


def panel() -> html.Section:
    return panel_of(
        "Compare with a baseline",
        dcc.Dropdown(
            id=ids.BASELINE_PICKER,
            options=[],
            value="",
            clearable=False,
            placeholder="baseline job",
            className="pd-baseline-picker",
        ),
        html.Div(id=ids.COMPARE_SUMMARY, className="pd-compare-summary"),
        html.Div(
            className="pd-row",
            children=[graph(ids.COMPARE_RANKS, modebar=False), graph(ids.COMPARE_OPERATORS, modebar=False)],
        ),
        class_name="pd-compare",
        help_text="paradiag compare: this job against a served folder, a sample or one of your uploads",
    )


def register(app: Dash) -> None:
    boundary.callback(
        app,
        Output(ids.COMPARE_SUMMARY, "children"),
        Output(ids.COMPARE_RANKS, "figure"),
        Output(ids.COMPARE_OPERATORS, "figure"),
        In(view_store("compare"), "data", boundary.selection),
        prevent_initial_call=True,
    )(render_compare)
