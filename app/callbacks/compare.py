"""The compare panel: the current job against a baseline picked from the bundled samples, this user's uploads or
the served job (``base`` in the selection and the URL)."""

from __future__ import annotations

from typing import Any

from dash import Dash, Input, Output, html, no_update

from paradiag.app import context, ids, jobs, uploads
from paradiag.app.data.compare import compare_jobs
from paradiag.app.figures.common import empty_figure
from paradiag.app.figures.compare import operator_changes_figure, rank_changes_figure
from paradiag.units import ms

NONE = {"label": "no baseline", "value": ""}


def baseline_options(sel: dict[str, Any]) -> list[dict[str, Any]]:
    """Every job this user may open, but the current one."""
    cfg = context.config()
    tokens = ["served"] if cfg.job else []
    tokens += [f"sample:{name}" for name in jobs.samples(cfg)]
    tokens += [f"upload:{u}" for u in _uploads(cfg)]
    return [NONE] + [{"label": t.replace("sample:", "sample ").replace("upload:", "upload "), "value": t} for t in tokens if t != sel.get("job")]


def _uploads(cfg: Any) -> list[str]:
    try:
        root = jobs.user_upload_root(cfg, context.user_id())
    except jobs.JobNotFound:
        return []
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if uploads.read_status(p).get("state") == "done")


def render_compare(sel: dict[str, Any] | None) -> tuple[Any, Any, Any]:
    """(summary, per-rank change bars, operator change bars) of the current job against ``sel["base"]``."""
    if not sel or not sel.get("job"):
        return no_update, no_update, no_update
    if not sel.get("base"):
        hint = empty_figure("pick a baseline job above", height=160)
        return html.P("Pick a baseline to see what changed against it.", className="pd-help"), hint, hint
    try:
        doc = compare_jobs(context.job(sel["base"]), context.job(sel["job"]))
    except jobs.JobNotFound:
        missing = empty_figure("baseline not found", height=160)
        return html.P(f"no baseline {sel['base']!r} you may open", className="pd-help"), missing, missing
    return summary(doc), rank_changes_figure(doc), operator_changes_figure(doc)


def summary(doc: dict[str, Any]) -> list[Any]:
    """Top change, step time change, findings that appeared and disappeared."""
    top, step, found = doc["top_change"], doc["step_time_ns"], doc["findings"]
    pct = step["delta_pct"]
    items = [
        html.P([html.B("top change: "), f"{top.get('kind') or '-'} {_culprit(top.get('culprit'))} · {top['evidence']}"], className="pd-compare-top"),
        html.P(f"median step {ms(step['baseline'])} → {ms(step['candidate'])} ms" + (f" ({pct:+.1f}%)" if pct is not None else "")),
    ]
    changes = [html.Li(f"+ appeared: {f['kind']}: {f.get('evidence', '')}") for f in found["appeared"]]
    changes += [html.Li(f"− disappeared: {f['kind']}: {f.get('evidence', '')}") for f in found["disappeared"]]
    return [*items, html.Ul(changes or [html.Li("no finding appeared or disappeared")], className="pd-compare-findings")]


def _culprit(culprit: Any) -> str:
    if isinstance(culprit, dict):
        return " ".join(f"{k} {', '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in culprit.items() if v not in (None, [], ""))
    return "" if culprit is None else str(culprit)



def register(app: Dash) -> None:
    app.callback(
        Output(ids.COMPARE_SUMMARY, "children"),
        Output(ids.COMPARE_RANKS, "figure"),
        Output(ids.COMPARE_OPERATORS, "figure"),
        Input(ids.SELECTION, "data"),
    )(render_compare)
