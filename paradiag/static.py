"""Static, self-contained HTML pages: the CI snapshot of one job and the diff of two runs.

Figures come from the dashboard's own builders and data functions; this module only lays them out. plotly.js is
embedded once in a ``<script>`` tag, so a page opens from disk with no server and no network.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go
import plotly.io as pio

from paradiag import plotly_bundle
from paradiag.units import ms

if TYPE_CHECKING:
    from paradiag.analysis.diagnosis_types import Finding, StageMetrics
    from paradiag.dataset import Job

# The snapshot of a 64-rank job must stay under 10 MB: figures are aggregated to screen resolution.
TIMELINE_PIXELS = 1400
TIMELINE_MAX_PRIMITIVES = 12_000
MAREY_MERGE_FRAC = 0.01  # neighbouring bands closer than 1% of the step merge (the live view refines on zoom)
FIGURE_CONFIG = {"displaylogo": False, "responsive": True}

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#1f2a44;color:#fff;padding:14px 24px}
header h1{margin:0;font-size:20px} header p{margin:4px 0 0;opacity:.85;font-size:13px}
main{padding:12px 24px;max-width:1400px}
section{background:#fff;border:1px solid #e3e3e3;border-radius:6px;padding:10px 16px;margin:14px 0}
h2{font-size:16px;margin:4px 0 8px}
table{border-collapse:collapse;font-size:12px} td,th{border-bottom:1px solid #eee;padding:3px 8px;text-align:right}
th{background:#f3f3f3} td:first-child,th:first-child{text-align:left}
.high{color:#b30000;font-weight:600}.medium{color:#b36b00;font-weight:600}.low{color:#555}
.pass{color:#1a7f37;font-weight:700}.fail{color:#b30000;font-weight:700}
li{margin:3px 0;font-size:13px}
"""


def _figure(fig: go.Figure) -> str:
    return pio.to_html(fig, full_html=False, include_plotlyjs=False, config=FIGURE_CONFIG)


def _page(title: str, subtitle: str, sections: list[tuple[str, str]]) -> str:
    body = "".join(f"<section><h2>{html.escape(name)}</h2>{content}</section>" for name, content in sections)
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{STYLE}</style>"
        f"<script type='text/javascript'>{plotly_bundle.script()}</script></head><body>"
        f"<header><h1>{html.escape(title)}</h1><p>{html.escape(subtitle)}</p></header><main>{body}</main></body></html>"
    )


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"



def finding_item(f: Finding) -> str:
    """The static pages' one formatter of a finding (an HTML list item)."""
    return (
        f"<li><span class='{html.escape(f.severity)}'>{html.escape(f.kind)}</span> "
        f"(~{f.impact_pct:.1f}% of the step): {html.escape(f.evidence)}</li>"
    )


def _findings(findings: list[Finding], report: dict[str, Any] | None = None) -> str:
    missing = _could_not_analyse(report or {})
    if not findings:
        return missing or "<p>No finding above the threshold.</p>"
    return missing + f"<ol>{''.join(finding_item(f) for f in findings)}</ol>"


def _could_not_analyse(report: dict[str, Any]) -> str:
    """What the analysis lacked (``job.analysed`` false), in words: an empty findings list is no clean bill."""
    if report.get("job", {}).get("analysed", True):
        return ""
    items = "".join(f"<li>{html.escape(p['message'])}</li>" for p in report["job"]["problems"] if p["source"] == ".")
    return f"<p><span class='fail'>Could not analyse this job</span>: no finding means nothing here.</p><ul>{items}</ul>"


def _verdict(report: dict[str, Any]) -> str:
    verdict = report.get("verdict") or {}
    if not verdict.get("fail_on") and verdict.get("status") != "could not analyse":
        return ""
    if verdict.get("status") == "could not analyse":
        return _could_not_analyse(report)
    status = "<span class='pass'>PASSED</span>" if verdict["passed"] else "<span class='fail'>FAILED</span>"
    items = "".join(f"<li>{'FAIL' if c['crossed'] else 'ok'}: <code>{html.escape(c['condition'])}</code> {html.escape(c['reason'])}</li>" for c in verdict["conditions"])
    return f"<p>{status} <code>--fail-on {html.escape(verdict['fail_on'])}</code></p><ul>{items}</ul>"


def _rank_table(report: dict[str, Any]) -> str:
    rows = []
    for r in report["ranks"]:
        b = r.get("breakdown") or {}
        st = r.get("step_time_ns") or {}
        rows.append(
            [r["rank"], ms(st.get("median")), ms(b.get("compute_ns")), ms(b.get("comm_exposed_ns")), ms(b.get("idle_ns")), ms(r.get("wait_ns")), ms(r.get("caused_wait_ns"))]
        )
    return _table(["rank", "step ms (median)", "compute ms", "exposed comm ms", "idle ms", "waited ms", "made others wait ms"], rows)


def _stage_table(pipeline: StageMetrics | None) -> str:
    if pipeline is None or len(pipeline.stages) < 2:
        return "<p>No pipeline parallelism in this job (one stage).</p>"
    rows = [[s.stage, ", ".join(map(str, s.ranks)), ms(s.compute_per_micro_batch_ns), s.bubble_ratio] for s in pipeline.stages]
    summary = (
        f"<p>imbalance {pipeline.imbalance}, bottleneck stage {pipeline.bottleneck_stage}, bubble ratio measured "
        f"{pipeline.bubble_ratio_measured} vs theoretical {pipeline.bubble_ratio_theoretical} ({html.escape(pipeline.schedule)})</p>"
    )
    return summary + _table(["stage", "ranks", "compute per micro-batch ms", "bubble ratio"], rows)


def _job_subtitle(report: dict[str, Any]) -> str:
    job = report["job"]
    layout = job.get("parallel_layout") or {}
    mesh = " x ".join(f"{k}{v}" for k, v in layout.items() if k in ("dp", "tp", "pp", "ep") and v)
    median = report["metrics"].get("step_time_ns", {}).get("median")
    return (
        f"{job['num_ranks']} ranks of {job['world_size']} · {job['device_type']} · {', '.join(job['formats'])} · layout {mesh or 'unknown'} "
        f"· steps {len(job['steps'])} · median step {ms(median)} ms · {len(report['findings'])} findings"
    )


def render_snapshot(job: Job, report: dict[str, Any]) -> str:
    """The snapshot page of one job: summary, findings, heatmap, Marey graph and timeline of the slowest step,
    stage and rank tables, communication matrix."""
    from paradiag.app.data.comm import view
    from paradiag.app.data.common import diagnosis, step_span
    from paradiag.app.data.marey import critical_path, marey_data
    from paradiag.app.data.overview import (
        HEATMAP_MAX_ROWS,
        METRICS,
        focus_of,
        heatmap_rows,
        opening_step,
        overview,
        shown_ranks,
        steps_focus,
    )
    from paradiag.app.data.timeline import timeline_data
    from paradiag.app.data.timeline_fold import LIMITS, timeline_rows
    from paradiag.app.figures.comm import comm_figure
    from paradiag.app.figures.heatmap import heatmap_figure
    from paradiag.app.figures.marey import marey_figure
    from paradiag.app.figures.steps import steps_figure
    from paradiag.app.figures.timeline import timeline_figure

    ov = overview(job)
    d = diagnosis(job)
    verdict = _verdict(report)
    sections = [("Verdict", verdict)] if verdict else []
    sections.append(("Findings", _findings(d.findings, report)))
    # The dashboard's first screen: its focus (the analysis' ``paradiag.analysis.focus``), metric, rows and caption.
    f = focus_of(job)
    rows = heatmap_rows(ov, f.metric, None, HEATMAP_MAX_ROWS, f.blamed, set(f.single), f.reasons)
    sections.append(("Step time", _figure(steps_figure(ov["steps"], ov["ranks"], ov["metrics"]["step_ms"], f.single, f.step, focus=steps_focus(job)))))
    heatmap = heatmap_figure(rows, ov["steps"], f.metric, METRICS[f.metric], {"ranks": f.ranks, "step": f.step}, caption=f.caption)
    sections.append((f"Overview: {METRICS[f.metric]} per rank and step", _figure(heatmap)))
    step = opening_step(job)  # the dashboard's: the step the top finding cites, else the slowest
    if step is not None:
        marey = marey_figure(marey_data(job, step, None, merge_frac=MAREY_MERGE_FRAC), path=critical_path(job, step))
        which = "the step the top finding cites" if step == f.step else "the slowest step"
        sections.append((f"Marey's graph of step {step} ({which}) with its critical path", _path_text(report, step) + _figure(marey)))
        ranks = shown_ranks(job, None, step, LIMITS)  # the dashboard's: the focus' ranks first, then those apart
        entries = timeline_rows(job, ranks, None)
        folded = any(isinstance(e, dict) for e in entries)
        window = step_span(job, step, None if folded else ranks)
        data = timeline_data(job, entries, window, pixels=TIMELINE_PIXELS, max_primitives=TIMELINE_MAX_PRIMITIVES, step=step)
        sections.append((f"Timeline of step {step} (ranks {_rank_list(ranks)}{', the others folded' if folded else ''})", _figure(timeline_figure(data, marked=list(f.ranks)))))
    sections.append(("Pipeline stages", _stage_table(d.stage_metrics)))
    sections.append(("Ranks", _rank_table(report)))
    sections.append(("Communication matrix (how much slower each link is than comparable links)", _figure(comm_figure(view(job), "slowness"))))
    return _page(f"paradiag: {report['job']['source']}", _job_subtitle(report), sections)


def _path_text(report: dict[str, Any], step: int) -> str:
    """What the thick line in the Marey graph is: the step's critical path, its length and what it is made of."""
    from paradiag.commands import critical_path_line

    found = next((c for c in report.get("critical_path", []) if c["step"] == step), None)
    what = html.escape(critical_path_line(found)) + "." if found else "No critical path was found for this step."
    return f"<p>The thick orange line is the step's critical path: the work that set the step's end, through the ranks it passed (hover for each piece's kind, rank, operator and duration). {what}</p>"


def _rank_list(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:12])) + (" ..." if len(ranks) > 12 else "")


def render_compare(doc: dict[str, Any]) -> str:
    """The diff page of two runs: top change, findings that came and went, per-rank and operator changes."""
    top = doc["top_change"]
    step = doc["step_time_ns"]
    findings = doc["findings"]
    sections = [
        ("Top change", f"<p><b>{html.escape(str(top['kind']))}</b> {html.escape(str(top.get('culprit')))}: {html.escape(top['evidence'])}</p>"),
        (
            "Findings",
            "<ul>"
            + "".join(f"<li>appeared: {html.escape(f['kind'])}: {html.escape(str(f.get('evidence', '')))}</li>" for f in findings["appeared"])
            + "".join(f"<li>disappeared: {html.escape(f['kind'])}: {html.escape(str(f.get('evidence', '')))}</li>" for f in findings["disappeared"])
            + "</ul>",
        ),
        ("Per rank", _compare_ranks(doc)),
        ("Operators (matched by " + doc["operators"]["matched_by"] + ")", _compare_operators(doc)),
    ]
    subtitle = f"median step {ms(step['baseline'])} -> {ms(step['candidate'])} ms ({step['delta_pct']}%)"
    return _page(f"paradiag compare: {doc['baseline']['source']} -> {doc['candidate']['source']}", subtitle, sections)


def _compare_ranks(doc: dict[str, Any]) -> str:
    from paradiag.app.figures.compare import rank_changes_figure

    ranks = doc["ranks"]
    fig = rank_changes_figure(doc)
    rows = [[r["label"], ms(r["step_time_ns"]["baseline"]), ms(r["step_time_ns"]["candidate"]), r["compute_ns"]["delta_pct"], r["idle_ns"]["delta_pct"]] for r in ranks]
    return f"<p>{html.escape(doc['rank_pairing']['text'])}</p>" + _figure(fig) + _table(["rank", "step ms before", "step ms after", "compute change %", "idle change %"], rows)


def _compare_operators(doc: dict[str, Any]) -> str:
    from paradiag.app.figures.compare import operator_changes_figure

    rows = [
        [op["operator"][:80], op["category"], ms(op["time_ns_per_step"]["baseline"]), ms(op["time_ns_per_step"]["candidate"]), f"{op['change_ns_per_step'] / 1e6:+.3f}"]
        for op in doc["operators"]["slower"] + doc["operators"]["faster"]
    ]
    return _figure(operator_changes_figure(doc)) + _table(["operator", "category", "ms/step before", "ms/step after", "change ms/step"], rows)
