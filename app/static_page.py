"""Static, self-contained HTML pages: the CI snapshot of one job and the diff of two runs.

Figures come from the dashboard's own builders and data functions; this module only lays them out. plotly.js is
embedded once in a ``<script>`` tag, so a page opens from disk with no server and no network.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go
import plotly.io as pio

from paradiag.app import plotly_bundle
from paradiag.units import ms

if TYPE_CHECKING:
    from paradiag.analysis.compare import CompareDoc
    from paradiag.analysis.diagnosis_types import Finding, StageMetrics
    from paradiag.job import Job

# The snapshot of a 64-rank job must stay under 10 MB: each view's static render aggregates its figures to screen
# resolution (``paradiag.app.views``).
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
    # the hover text the live page's script writes out (assets/plots.js)
    from paradiag.app.figures.common import inline_texts

    return pio.to_html(inline_texts(fig), full_html=False, include_plotlyjs=False, config=FIGURE_CONFIG)


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
    items = "".join(
        f"<li>{html.escape(p['message'])}</li>" for p in report["job"]["problems"] if p["source"] == "."
    )
    return f"<p><span class='fail'>Could not analyse this job</span>: no finding means nothing here.</p><ul>{items}</ul>"


def _verdict(report: dict[str, Any]) -> str:
    verdict = report.get("verdict") or {}
    if not verdict.get("fail_on") and verdict.get("status") != "could not analyse":
        return ""
    if verdict.get("status") == "could not analyse":
        return _could_not_analyse(report)
    status = "<span class='pass'>PASSED</span>" if verdict["passed"] else "<span class='fail'>FAILED</span>"
    items = "".join(
        f"<li>{'FAIL' if c['crossed'] else 'ok'}: <code>{html.escape(c['condition'])}</code> {html.escape(c['reason'])}</li>"
        for c in verdict["conditions"]
    )
    return f"<p>{status} <code>--fail-on {html.escape(verdict['fail_on'])}</code></p><ul>{items}</ul>"


def _rank_table(report: dict[str, Any]) -> str:
    rows = []
    for r in report["ranks"]:
        b = r.get("breakdown") or {}
        st = r.get("step_time_ns") or {}
        rows.append(
            [
                r["rank"],
                ms(st.get("median")),
                ms(b.get("compute_ns")),
                ms(b.get("comm_exposed_ns")),
                ms(b.get("idle_ns")),
                ms(r.get("wait_ns")),
                ms(r.get("caused_wait_ns")),
            ]
        )
    return _table(
        [
            "rank",
            "step ms (median)",
            "compute ms",
            "exposed comm ms",
            "idle ms",
            "waited ms",
            "made others wait ms",
        ],
        rows,
    )


def _stage_table(pipeline: StageMetrics | None) -> str:
    if pipeline is None or len(pipeline.stages) < 2:
        return "<p>No pipeline parallelism in this job (one stage).</p>"
    rows = [
        [s.stage, ", ".join(map(str, s.ranks)), ms(s.compute_per_micro_batch_ns), s.bubble_ratio]
        for s in pipeline.stages
    ]
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
    """The snapshot page of one job: summary, findings, then each dashboard view's static render (the same unit as
    the live view: ``paradiag.app.views``, so the snapshot shows the ranks, stages and culprit marks the dashboard
    opens on), then the stage and rank tables."""
    from paradiag.app.data.common import diagnosis
    from paradiag.app.views import static_renders

    d = diagnosis(job)
    verdict = _verdict(report)
    sections = [("Verdict", verdict)] if verdict else []
    sections.append(("Findings", _findings(d.findings, report)))
    for static in static_renders():
        sections += [(title, _content(content)) for title, content in static(job, report)]
    sections.append(("Pipeline stages", _stage_table(d.stage_metrics)))
    sections.append(("Ranks", _rank_table(report)))
    return _page(f"paradiag: {report['job']['source']}", _job_subtitle(report), sections)


def _content(content: Any) -> str:
    """A view's static section as HTML: a figure, an HTML string, or (HTML, figure)."""
    if isinstance(content, tuple):
        return "".join(_content(part) for part in content)
    return content if isinstance(content, str) else _figure(content)


def render_compare(doc: CompareDoc) -> str:
    """The diff page of two runs: top change, findings that came and went, per-rank and operator changes."""
    top = doc["top_change"]
    step = doc["step_time_ns"]
    findings = doc["findings"]
    sections = [
        (
            "Top change",
            f"<p><b>{html.escape(str(top['kind']))}</b> {html.escape(str(top.get('culprit')))}: {html.escape(top['evidence'])}</p>",
        ),
        (
            "Findings",
            "<ul>"
            + "".join(
                f"<li>appeared: {html.escape(f['kind'])}: {html.escape(str(f.get('evidence', '')))}</li>"
                for f in findings["appeared"]
            )
            + "".join(
                f"<li>disappeared: {html.escape(f['kind'])}: {html.escape(str(f.get('evidence', '')))}</li>"
                for f in findings["disappeared"]
            )
            + "</ul>",
        ),
        ("Per rank", _compare_ranks(doc)),
        ("Operators (matched by " + doc["operators"]["matched_by"] + ")", _compare_operators(doc)),
    ]
    subtitle = f"median step {ms(step['baseline'])} -> {ms(step['candidate'])} ms ({step['delta_pct']}%)"
    return _page(
        f"paradiag compare: {doc['baseline']['source']} -> {doc['candidate']['source']}", subtitle, sections
    )


def _compare_ranks(doc: CompareDoc) -> str:
    from paradiag.app.figures.compare import rank_changes_figure

    ranks = doc["ranks"]
    fig = rank_changes_figure(doc)
    rows = [
        [
            r["label"],
            ms(r["step_time_ns"]["baseline"]),
            ms(r["step_time_ns"]["candidate"]),
            r["compute_ns"]["delta_pct"],
            r["idle_ns"]["delta_pct"],
        ]
        for r in ranks
    ]
    return (
        f"<p>{html.escape(doc['rank_pairing']['text'])}</p>"
        + _figure(fig)
        + _table(["rank", "step ms before", "step ms after", "compute change %", "idle change %"], rows)
    )


def _compare_operators(doc: CompareDoc) -> str:
    from paradiag.app.figures.compare import operator_changes_figure

    rows = [
        [
            op["operator"][:80],
            op["category"],
            ms(op["time_ns_per_step"]["baseline"]),
            ms(op["time_ns_per_step"]["candidate"]),
            f"{op['change_ns_per_step'] / 1e6:+.3f}",
        ]
        for op in doc["operators"]["slower"] + doc["operators"]["faster"]
    ]
    return _figure(operator_changes_figure(doc)) + _table(
        ["operator", "category", "ms/step before", "ms/step after", "change ms/step"], rows
    )
