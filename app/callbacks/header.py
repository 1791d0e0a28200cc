"""Header, page switch, summary facts and findings: everything that follows the selection's job."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from dash import Dash, Output, dcc, html, no_update

from paradiag.app import boundary, context, ids, jobs, palette
from paradiag.app.boundary import In
from paradiag.app.data.findings import findings_of
from paradiag.app.data.overview import report
from paradiag.app.selection import Selection, view_store

SHOWN, HIDDEN = {"display": "block"}, {"display": "none"}


def page(job_view: dict[str, Any] | None) -> tuple[Any, Any]:
    """(start page style, job page style): they follow the job alone, so a click does not restyle the page."""
    if not (job_view or {}).get("job"):
        return SHOWN, HIDDEN
    return HIDDEN, SHOWN


def selection_text(sel: dict[str, Any] | None) -> str:
    """The header's line about the selection (the selection reducer writes it with the selection)."""
    if not (sel or {}).get("job"):
        return "open a job"
    return Selection.from_store(sel).describe()


def summary(sel: dict[str, Any] | None) -> tuple[Any, Any]:
    if not sel or not sel.get("job"):
        return no_update, no_update
    job = context.job(sel["job"])
    rep = report(job)  # read from the shared store once (it is unpickled on every read)
    facts = rep["job"]
    median = rep["metrics"]["step_time_ns"]["median"]
    layout = facts["parallel_layout"]
    from paradiag.app.data.mesh import mesh_of

    mesh = mesh_of(job)
    axes = (
        " × ".join(f"{a.upper()}{v}" for a, v in layout.items() if a in ("dp", "tp", "pp", "ep") and v)
        or f"{len(mesh.stages)} stage(s), found by {mesh.found_by}"
    )
    items = [
        ("job", jobs.split_window(sel["job"])[0].partition(":")[2] or job.source.rsplit("/", 1)[-1]),
        ("ranks", str(facts["num_ranks"])),
        ("device", facts["device_type"]),
        ("layout", axes),
        ("steps", str(len(facts["steps"]))),
        ("median step", f"{median / 1e6:.2f} ms" if median else "–"),
        ("events", f"{facts['num_events']:,}"),
    ]
    facts_div: list[Any] = [html.Span([html.B(k + " "), v], className="pd-fact") for k, v in items]
    if len(job.windows) > 1:
        facts_div.append(window_picker(sel["job"], job.window, job.windows))
    return facts_div, findings_list(findings_of(job), facts)


def window_picker(token: str, current: int, windows: list[dict[str, Any]]) -> html.Details:
    """The job's profiling windows as a drop-down of links (the URL, which the selection owns, opens the other)."""
    links = []
    for w in windows:
        label = f"{w['index']}: {w['label']}"
        if w["index"] == current:
            links.append(html.Li(html.B(label)))
        else:
            links.append(
                html.Li(dcc.Link(label, href="?" + urlencode({"job": jobs.with_window(token, w["index"])})))
            )
    return html.Details(
        [html.Summary(f"window {current} of {len(windows)} ▾"), html.Ul(links)],
        id=ids.WINDOW_PICKER,
        className="pd-fact pd-window-picker",
    )


def findings_list(found: list[dict[str, Any]], facts: Mapping[str, Any] | None = None) -> list[Any]:
    """The findings bar; first, where the analysis lacked steps, compute or communication (``facts``: the
    report's ``job``), what it lacked, so that an empty list is not read as a clean job."""
    missing = (
        [p["message"] for p in (facts or {}).get("problems", []) if p.get("source") == "."]
        if not (facts or {}).get("analysed", True)
        else []
    )
    out: list[Any] = [
        html.Li(
            [
                html.Span(
                    "could not analyse", className="pd-kind", style={"background": palette.SEVERITY["high"]}
                ),
                " ",
                m,
            ],
            className="pd-finding pd-problem",
        )
        for m in missing
    ]
    if not found:
        return out or [html.Li("no finding above threshold", className="pd-finding pd-none")]
    for i, f in enumerate(found[:8]):
        severity = str(f.get("severity")) if f.get("severity") in SEVERITY_MEANS else "low"
        culprit = f"ranks {rank_list(f['ranks'])}" if f.get("ranks") else ""
        badge = html.Span(
            f.get("kind", "?"),
            className="pd-kind",
            style={"background": _colour(severity)},
            title=f"{severity} severity: {SEVERITY_MEANS[severity]}",
        )
        out.append(
            html.Li(
                html.Button(
                    [badge, f" {culprit} · ~{f.get('impact_pct', 0)}% · ", f.get("evidence", "")],
                    id={"type": ids.FINDING_BUTTON, "index": i},
                    className="pd-finding",
                    n_clicks=0,
                )
            )
        )
    return [*out, severity_legend()]


# What a finding badge's colour says (palette.SEVERITY): the analysis rates a finding by its impact, the step time a
# fix would save (analysis/findings.severity); a condition that costs nothing by itself (clock skew) is "info".
SEVERITY_MEANS = {
    "high": "a fix saves ≥ 10 % of the step",
    "medium": "4–10 %",
    "low": "under 4 %",
    "info": "a condition to know of",
}


def _colour(severity: str) -> str:
    return palette.SEVERITY.get(severity, palette.SEVERITY["low"])


def severity_legend() -> html.Li:
    """The badges' colours explained, under the findings."""
    keys = [
        html.Span(
            [html.Span(name, className="pd-kind", style={"background": _colour(name)}), f" {means}"],
            className="pd-legend-item",
        )
        for name, means in SEVERITY_MEANS.items()
        if name != "info"
    ]
    return html.Li(
        ["badge colour = severity: ", *keys, " · ~% = the step time a fix would save"],
        className="pd-none pd-severity-legend",
    )


def rank_list(ranks: list[int]) -> str:
    """Ranks with consecutive runs as ranges: ``224–255 (32)``, ``5``, ``52, 60``."""
    ordered = sorted(set(ranks))
    runs: list[list[int]] = []
    for r in ordered:
        if runs and r == runs[-1][-1] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    text = ", ".join(f"{run[0]}–{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)) for run in runs)
    return text + (f" ({len(ordered)})" if len(ordered) > 2 and len(runs) < len(ordered) else "")


def sample_links(_: Any) -> list[Any]:
    """The start page's jobs: the folders the server serves, then the bundled samples."""
    cfg = context.config()
    served = [
        html.Li(dcc.Link(f"{name} (served)", href="/?" + urlencode({"job": token})))
        for token, name in jobs.served(cfg)
    ]
    return served + [html.Li(dcc.Link(name, href=f"/?job=sample:{name}")) for name in jobs.samples(cfg)]


def register(app: Dash) -> None:
    job_view = In(view_store("job"), "data", boundary.selection)
    boundary.callback(
        app,
        Output(ids.START_PAGE, "style"),
        Output(ids.JOB_PAGE, "style"),
        job_view,
        prevent_initial_call=True,
    )(page)
    boundary.callback(
        app,
        Output(ids.SUMMARY_FACTS, "children"),
        Output(ids.FINDINGS, "children"),
        job_view,
        prevent_initial_call=True,
    )(summary)
    boundary.callback(app, Output(ids.SAMPLE_LIST, "children"), In(ids.URL, "pathname", boundary.ignored))(
        sample_links
    )
