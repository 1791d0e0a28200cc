"""``paradiag info``, ``paradiag ingest``, ``paradiag analyze`` and ``paradiag whatif``."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from paradiag.analysis.critical_path import critical_path_line
from paradiag.analysis.whatif import SET_HELP as WHATIF_SET_HELP
from paradiag.cache import JobError
from paradiag.dataset import open_job
from paradiag.job import Job
from paradiag.parse_worker import ProgressCallback
from paradiag.units import ms

if TYPE_CHECKING:
    from paradiag.analysis.diagnosis_types import Finding
    from paradiag.analysis.report import Report

# Wide enough for the tables when the output is a file or a pipe (rich would assume 80 columns).
err = Console(stderr=True, width=None if sys.stderr.isatty() else 160)
out = Console(width=None if sys.stdout.isatty() else 160)


class Location(click.ParamType):
    """A path, or the URL of a cache (``s3://bucket/job``, kept as a string: paradiag.remote): a URL is checked
    when it is opened, a path as click.Path checks it."""

    name = "path"

    def __init__(self, exists: bool) -> None:
        self.path = click.Path(exists=exists, path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path | str:
        from paradiag.remote import is_url

        return value if is_url(value) else self.path.convert(value, param, ctx)


path_argument = click.argument("path", type=Location(exists=True))
cache_option = click.option(
    "-o",
    "--cache",
    "cache",
    type=Location(exists=False),
    default=None,
    help="Cache folder, or an fsspec URL (s3://BUCKET/JOB; needs paradiag[remote]) (default: $PARADIAG_CACHE_DIR or"
    " ~/.cache/paradiag/<folder>-<hash>; never inside PATH).",
)
strict_option = click.option(
    "--strict", is_flag=True, help="Fail on any problem with any source instead of skipping it."
)
workers_option = click.option(
    "--workers", type=click.IntRange(1), default=None, help="Parser processes (default: one per core)."
)
dask_option = click.option(
    "--dask",
    "dask",
    metavar="ADDRESS",
    default=None,
    help="Parse on a Dask cluster: its scheduler (tcp://HOST:8786) or local:N (N local worker processes). The cache"
    " must be on storage every worker reaches at the same path, or an fsspec URL (docs/scale.md).",
)
window_option = click.option(
    "--window",
    "window",
    type=click.IntRange(0),
    default=None,
    metavar="N",
    help="The profiling window to analyse when PATH holds several (profiler cycles, iteration_N folders; `paradiag info`"
    " lists them), each cached on its own  [default: the latest]",
)
verify_option = click.option(
    "--verify",
    is_flag=True,
    help="Hash every source file to check the cache (default: size and mtime; see docs/schema.md).",
)


@contextmanager
def _progress(enabled: bool) -> Iterator[ProgressCallback | None]:
    if not enabled:
        yield None
        return
    with Progress(
        TextColumn("parsing"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as bar:
        task = bar.add_task("", total=None)

        def update(done: int, total: int, source: str) -> None:
            bar.update(task, completed=done, total=total, description=source)

        yield update


def open_for_command(
    path: Path | str,
    cache: Path | str | None = None,
    *,
    strict: bool = False,
    workers: int | None = None,
    refresh: bool = False,
    verify: bool = False,
    dask: str | None = None,
    window: int | None = None,
) -> Job:
    """The one way a command (``paradiag ingest``/``info``/``analyze``/``whatif``, the snapshot, compare, export)
    opens a job: ``open_job`` with a progress bar on a terminal, and a JobError turned into a one-line CLI error
    (``Error: ...``, exit 1 = ``gate.EXIT_ERROR``, no traceback)."""
    try:
        with _progress(sys.stderr.isatty()) as progress:
            return open_job(
                path,
                cache,
                strict=strict,
                workers=workers,
                refresh=refresh,
                progress=progress,
                verify=verify,
                dask=dask,
                window=window,
            )
    except JobError as exc:
        raise click.ClickException(str(exc)) from exc


def print_problems(job: Job, report: Report | None = None) -> None:
    """The job's problems, or the report's (the job's and what the analysis could not find) when given."""
    found = report["job"]["problems"] if report is not None else [p.__dict__ for p in job.problems]
    for p in found:
        colour = "red" if p["severity"] == "error" else "yellow"
        err.print(
            f"[{colour}]{p['severity']}[/]: {p['source']}: {p['message']}", highlight=False, soft_wrap=True
        )


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


@click.command()
@path_argument
@cache_option
@strict_option
@workers_option
@dask_option
@window_option
def ingest(
    path: Path | str,
    cache: Path | str | None,
    strict: bool,
    workers: int | None,
    dask: str | None,
    window: int | None,
) -> None:
    """Parse every trace under PATH (of one profiling window) and write the Parquet cache (rebuilt even when current)."""
    t0 = time.perf_counter()
    job = open_for_command(
        path, cache, strict=strict, workers=workers, refresh=True, dask=dask, window=window
    )
    elapsed = time.perf_counter() - t0
    size = sum(f["size"] for f in job.manifest["files"])
    events = sum(job.ranks.column("num_events").to_pylist())
    print_problems(job)
    out.print(
        f"{job.ranks.num_rows} ranks, {events:,} events{_window_text(job)} from {_size(size)} in {elapsed:.2f} s "
        f"({size / 1e6 / elapsed:.0f} MB/s) -> {job.url + f' (local mirror {job.cache_dir})' if job.url else job.cache_dir}",
        highlight=False,
    )


@click.command()
@path_argument
@cache_option
@strict_option
@workers_option
@verify_option
@window_option
@click.option("--json", "as_json", is_flag=True, help="Print what was found as JSON.")
def info(
    path: Path | str,
    cache: Path | str | None,
    strict: bool,
    workers: int | None,
    verify: bool,
    window: int | None,
    as_json: bool,
) -> None:
    """What PATH holds: ranks, formats, sizes, steps, its profiling windows, and every problem found (parses and
    caches if needed)."""
    job = open_for_command(path, cache, strict=strict, workers=workers, verify=verify, window=window)
    sizes = {f["path"]: f["size"] for f in job.manifest["files"]}
    rows = []
    for s in job.manifest["sources"]:
        size = sum(
            v for k, v in sizes.items() if k == s["source"] or k.startswith(s["source"].rstrip("/") + "/")
        )
        steps = job.steps.filter(job.steps.column("rank").to_numpy() == s["rank"]).column("step").to_pylist()
        rows.append({**s, "size": size, "steps": steps})
    ranks = {r["rank"]: r for r in job.ranks.to_pylist()}
    if as_json:
        doc = {
            "source": job.source,
            "cache": job.url or str(job.cache_dir),
            "ranks": [{**ranks[r["rank"]], **r} for r in rows],
            "window": job.window,
            "windows": job.windows,
            "problems": [p.__dict__ for p in job.problems],
        }
        out.print_json(json.dumps(doc, default=str))
        return
    table = Table(title=f"{job.source}: {len(rows)} ranks", title_justify="left")
    for col in ("rank", "source", "format", "device", "events", "size", "steps", "clock offset"):
        table.add_column(
            col, justify="right" if col in ("rank", "events", "size", "clock offset") else "left"
        )
    for r in rows:
        meta = ranks[r["rank"]]
        device = meta["device_type"] + (f" {meta['device']}" if meta["device"] is not None else "")
        steps = f"{r['steps'][0]}..{r['steps'][-1]} ({len(r['steps'])})" if r["steps"] else "-"
        offset = f"{meta['clock_offset_ns'] / 1e3:+.1f} us"
        table.add_row(
            str(r["rank"]),
            r["source"],
            r["format"],
            device,
            f"{r['num_events']:,}",
            _size(r["size"]),
            steps,
            offset,
        )
    out.print(table)
    if len(job.windows) > 1:
        _print_windows(job)
    print_problems(job)


def _window_text(job: Job) -> str:
    return f" (window {job.window} of {len(job.windows)})" if len(job.windows) > 1 else ""


def _print_windows(job: Job) -> None:
    """The folder's profiling windows, the one shown marked."""
    table = Table(
        title=f"{len(job.windows)} profiling windows (--window N; default the latest)", title_justify="left"
    )
    for col in ("window", "label", "steps", "start (UTC)", "files"):
        table.add_column(col, justify="right" if col in ("window", "files") else "left")
    for w in job.windows:
        steps = w.get("steps") or []
        shown = f"{steps[0]}..{steps[-1]}" if steps else "-"
        start = (
            time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(w["start_ns"] / 1e9)) if w.get("start_ns") else "-"
        )
        mark = " (shown)" if w["index"] == job.window else ""
        table.add_row(f"{w['index']}{mark}", w["label"], shown, start, str(len(w["files"])))
    out.print(table)


@click.command()
@path_argument
@cache_option
@strict_option
@workers_option
@window_option
@click.option("--json", "as_json", is_flag=True, help="Print the paradiag.report/1 JSON document.")
@click.option(
    "-w",
    "--write",
    "write",
    type=click.Path(path_type=Path),
    default=None,
    help="Also write the JSON report to this file.",
)
@click.option(
    "--convention", type=click.Choice(["paradiag", "hta", "ascend"]), default=None,
    help="Breakdown definitions: paradiag's (every step, all device work), HTA's (drops the last step) or torch_npu's "
    "step_trace_time (per step, compute and communication span)  [default: ascend on NPUs, paradiag elsewhere]",
)  # fmt: skip
def analyze(
    path: Path | str,
    cache: Path | str | None,
    strict: bool,
    workers: int | None,
    window: int | None,
    as_json: bool,
    write: Path | None,
    convention: str | None,
) -> None:
    """Per-rank time breakdown over the profiled steps, step times and the job summary."""
    from paradiag.analysis.report import build_report

    job = open_for_command(path, cache, strict=strict, workers=workers, window=window)
    report = build_report(job, convention)
    text = json.dumps(report, indent=1, default=_json_default)
    if write is not None:
        write.write_text(text)
    if as_json:
        click.echo(text)
        return
    print_problems(job, report)
    _print_report(report, job.diagnosis().findings)


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def finding_line(f: Finding) -> str:
    """The CLI's one formatter of a finding (rich markup)."""
    line = f"[bold]{f.kind}[/] ({f.severity}, ~{f.impact_pct:.1f}% of the step): {f.evidence}"
    if f.what_if:
        w = f.what_if
        line += f"; fixed, the step would take {w['predicted_step_ms']:.2f} ms (saving {w['saving_ms']:.2f} ms per step: {', '.join(w['edits'])})"
    return line


@click.command()
@path_argument
@cache_option
@strict_option
@workers_option
@window_option
@click.option(
    "--set",
    "edits",
    multiple=True,
    required=True,
    metavar="EDIT",
    help="A change to replay (repeatable): " + WHATIF_SET_HELP,
)
@click.option(
    "--step", "steps", type=int, multiple=True,
    help="Apply the edits in these steps only (repeatable; default: every step). Every step is still replayed: in a "
    "pipeline a step's saving can show in the next one.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def whatif(
    path: Path | str,
    cache: Path | str | None,
    strict: bool,
    workers: int | None,
    window: int | None,
    edits: tuple[str, ...],
    steps: tuple[int, ...],
    as_json: bool,
) -> None:
    """Replay the profiled steps on their dependency graph with some cause removed, and predict the step time."""
    from paradiag.analysis import whatif as replay

    try:
        parsed = [replay.parse_edit(text) for text in edits]
    except replay.EditError as exc:
        raise click.BadParameter(str(exc), param_hint="--set") from exc
    if steps:
        parsed = [replace(e, steps=tuple(sorted(set(steps) & set(e.steps or steps)))) for e in parsed]
        for e, text in zip(parsed, edits, strict=True):
            if not e.steps:
                raise click.BadParameter(
                    f"{text!r} names no step among --step {', '.join(map(str, steps))}", param_hint="--set"
                )
    job = open_for_command(path, cache, strict=strict, workers=workers, window=window)
    graph, peers = replay.job_graph(job, job.diagnosis())
    try:
        result = replay.what_if(graph, peers, parsed)
    except replay.EditError as exc:
        raise click.ClickException(str(exc)) from exc
    doc = {
        "schema": "paradiag.whatif/1",
        "source": job.source,
        "step_time_ms": round(result.step_ns / 1e6, 4),
        **result.as_json(),
        "steps": [
            {"step": s, "measured_ms": round(m / 1e6, 4), "predicted_ms": round(p / 1e6, 4)}
            for s, m, p in result.per_step
        ],
    }
    if as_json:
        click.echo(json.dumps(doc, indent=1))
        return
    print_problems(job)
    out.print(
        f"[bold]{job.source}[/]: with {', '.join(result.edits)}, the median step would take {doc['predicted_step_ms']:.2f} ms "
        f"instead of {doc['step_time_ms']:.2f} ms (saving {doc['saving_ms']:.2f} ms per step, {doc['saving_pct']:.1f}%)",
        highlight=False,
    )
    table = Table(title="Per step (median over the ranks)", title_justify="left")
    for col in ("step", "measured ms", "predicted ms", "saving ms"):
        table.add_column(col, justify="right")
    for s, m, p in result.per_step:
        table.add_row(str(s), ms(m), ms(p), ms(m - p))
    out.print(table)


def _print_report(report: Report, findings: list[Finding]) -> None:
    job = report["job"]
    layout = job["parallel_layout"]
    layout_text = (
        " x ".join(f"{k}{layout[k]}" for k in ("dp", "tp", "pp", "ep") if layout.get(k)) or "unknown"
    )
    if layout.get("found_by"):
        layout_text += f" ({layout['found_by']})"
    out.print(
        f"[bold]{job['source']}[/]: {job['num_ranks']} ranks of {job['world_size']}, {job['device_type']}, "
        f"formats {', '.join(job['formats'])}, layout {layout_text}, steps {job['steps'][:1]}..{job['steps'][-1:]}",
        highlight=False,
    )
    table = Table(
        title="Time breakdown over the profiled steps (% of the device window)", title_justify="left"
    )
    for col in (
        "rank",
        "window ms",
        "compute",
        "comm exposed",
        "comm overlapped",
        "memory",
        "sync",
        "idle",
        "step ms (median)",
    ):
        table.add_column(col, justify="right")
    for r in report["ranks"]:
        b = r["breakdown"]
        step = r["step_time_ns"]["median"] if r["step_time_ns"] else None
        if b is None:
            table.add_row(str(r["rank"]), "-", "-", "-", "-", "-", "-", "-", ms(step))
            continue
        overlapped = 100 * b["comm_overlapped_ns"] / b["window_ns"] if b["window_ns"] else 0
        table.add_row(
            str(r["rank"]),
            ms(b["window_ns"]),
            f"{b['compute_pct']:.1f}%",
            f"{b['comm_exposed_pct']:.1f}%",
            f"{overlapped:.1f}%",
            f"{b['memory_exposed_pct']:.1f}%",
            f"{b['sync_exposed_pct']:.1f}%",
            f"{b['idle_pct']:.1f}%",
            ms(step),
        )
    out.print(table)
    m = report["metrics"]
    analysed = report["job"].get("analysed", True)
    what = (
        f"findings: {len(findings)}"
        if analysed
        else f"findings: {len(findings)} (could not analyse the job fully: see the errors above)"
    )
    out.print(f"median step time {ms(m['step_time_ns']['median'])} ms; {what}", highlight=False)
    for i, f in enumerate(findings, start=1):
        out.print(f"{i}. {finding_line(f)}", highlight=False)
    for path_step in report.get("critical_path", []):
        out.print(critical_path_line(path_step), highlight=False)
