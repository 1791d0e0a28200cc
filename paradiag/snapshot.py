"""``paradiag snapshot`` (one self-contained HTML report plus a JSON verdict, for CI) and ``paradiag compare``.

The snapshot draws the dashboard's own figures (``paradiag.app.figures``, fed by ``paradiag.app.data``), so a
static page and the live app never disagree; plotly.js is embedded once and the page needs no network.
"""

from __future__ import annotations

import html
import json
import sys
from pathlib import Path
from typing import Any

import click

from paradiag import gate
from paradiag.commands import (
    Location,
    open_for_command,
    path_argument,
    strict_option,
    window_option,
    workers_option,
)
from paradiag.units import ms


def _json(doc: Any) -> str:
    return json.dumps(doc, indent=1, default=lambda v: v.item() if hasattr(v, "item") else str(v))


@click.command()
@path_argument
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("report.html"),
    show_default=True,
    help="The HTML report to write.",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the paradiag.report/1 verdict JSON here.",
)
@click.option(
    "--fail-on",
    "fail_on",
    default=None,
    metavar="EXPR",
    help="Exit 3 when a condition holds, e.g. 'stage_imbalance>1.15,bubble_ratio>0.3,finding:slow_link'. Names: "
    + ", ".join(gate.ALIASES)
    + ", or a dotted path into the report; finding:KIND[>=low|medium|high]; finding:any.",
)
@click.option(
    "--cache",
    type=Location(exists=False),
    default=None,
    help="Cache folder or fsspec URL (default: $PARADIAG_CACHE_DIR or ~/.cache/paradiag/...).",
)
@click.option(
    "--title",
    default=None,
    help="The report's title (default: the job folder's name; never its full path, which a published report would leak).",
)
@strict_option
@workers_option
@window_option
def snapshot(
    path: Path | str,
    output: Path,
    json_path: Path | None,
    fail_on: str | None,
    cache: Path | str | None,
    title: str | None,
    strict: bool,
    workers: int | None,
    window: int | None,
) -> None:
    """Write a self-contained HTML report of PATH (works offline) and, with --json, the verdict JSON.

    Exit codes: 0 all good, 1 the job could not be read, 2 bad usage or --fail-on expression,
    3 a --fail-on condition was crossed (the reasons are printed)."""
    from paradiag.analysis.report import build_report
    from paradiag.app.static_page import render_snapshot

    if fail_on is not None:
        try:
            gate.parse(fail_on)
        except gate.GateError as exc:
            raise click.UsageError(str(exc)) from exc
    job = open_for_command(path, cache, strict=strict, workers=workers, window=window)
    report = build_report(job)
    outcomes = gate.evaluate(report, fail_on) if fail_on else []
    report["verdict"] = gate.verdict(report, fail_on, outcomes)
    # The page is titled by report.job.source; the HTML gets the folder's name (or --title), the JSON the path.
    shown = title or (path.resolve().name if isinstance(path, Path) else path.rstrip("/").rsplit("/", 1)[-1])
    output.write_text(
        render_snapshot(job, {**report, "job": {**report["job"], "source": shown}}), encoding="utf-8"
    )
    if json_path is not None:
        json_path.write_text(_json(report), encoding="utf-8")
    click.echo(
        f"wrote {output} ({output.stat().st_size / 1e6:.1f} MB)" + (f" and {json_path}" if json_path else "")
    )
    for p in report["job"]["problems"]:
        if p["source"] == ".":
            click.echo(f"{p['severity']}: {p['message']}", err=True)
    for o in outcomes:
        click.echo(f"{'FAIL' if o.crossed else 'ok  '} {o.condition}: {o.reason}")
    click.echo(f"verdict: {report['verdict']['status']}")
    if report["verdict"]["status"] == gate.COULD_NOT_ANALYSE and fail_on:
        sys.exit(gate.EXIT_ERROR)  # a gate that nothing could be measured against has not passed
    if fail_on and not report["verdict"]["passed"]:
        sys.exit(gate.EXIT_GATE)


EXIT_REFUSED = 2  # ``paradiag compare`` of runs that cannot be compared (click's usage errors exit 2 too: both "not run")


@click.command()
@click.argument("baseline", type=Location(exists=True))
@click.argument("candidate", type=Location(exists=True))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write an HTML diff report here.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the paradiag.compare/1 JSON document.")
@strict_option
def compare(
    baseline: Path | str, candidate: Path | str, output: Path | None, as_json: bool, strict: bool
) -> None:
    """Compare two runs: step time and breakdown per rank and stage, operators that got slower or faster,
    findings that appeared or disappeared, and the top change. Works across GPU and NPU runs of one model
    (operators are then matched by category). Runs whose pipelines differ in depth, or that split the model
    differently with no mesh axis to pair ranks on, are refused (exit 2, saying why; --json prints the document
    with its ``refused`` reason)."""
    from paradiag.analysis.compare import change_text, culprit_text, kind_text
    from paradiag.analysis.compare import compare as compare_reports
    from paradiag.analysis.report import build_report

    docs = []
    for path in (baseline, candidate):
        job = open_for_command(path, strict=strict)
        docs.append((build_report(job), job.diagnosis().operator_times))
    result = compare_reports(docs[0][0], docs[1][0], docs[0][1], docs[1][1])
    if result["refused"]:
        if as_json:
            click.echo(_json(result))
        click.echo(f"paradiag compare: {result['refused']}", err=True)
        sys.exit(EXIT_REFUSED)
    if output is not None:
        from paradiag.app.static_page import render_compare

        output.write_text(render_compare(result), encoding="utf-8")
    if as_json:
        click.echo(_json(result))
        return
    top = result["top_change"]
    step = result["step_time_ns"]
    click.echo(f"step time {ms(step['baseline'])} -> {ms(step['candidate'])} ms ({_pct(step['delta_pct'])})")
    click.echo(f"top change: {change_text(top)}")
    for sign, what in (("+", "appeared"), ("-", "disappeared")):
        for f in result["findings"][what]:
            who = culprit_text(f.get("culprit"))
            click.echo(
                f"{sign} {kind_text(f['kind'])}" + (f" ({who})" if who else "") + f": {f.get('evidence', '')}"
            )
    for op in result["operators"]["slower"][:5]:
        click.echo(
            f"slower {html.unescape(op['operator'])[:60]}: {op['change_ns_per_step'] / 1e6:+.3f} ms/step"
        )


def _pct(p: float | None) -> str:
    return "-" if p is None else f"{p:+.1f}%"
