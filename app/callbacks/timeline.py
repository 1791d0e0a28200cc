"""The Gantt timeline: the selected ranks (else those the top finding blames) first, then the ranks that wait for
them, over the selected window or step."""

from __future__ import annotations

import re
from typing import Any

import plotly.graph_objects as go
from dash import Dash, Input, Output, no_update

from paradiag.app import context, ids, store
from paradiag.app.data.common import origin_ns, step_span
from paradiag.app.data.detail import operator_totals
from paradiag.app.data.mesh import Mesh, mesh_of
from paradiag.app.data.overview import focus, opening_step, overview
from paradiag.app.data.timeline import timeline_data
from paradiag.app.figures.common import short_name
from paradiag.app.figures.timeline import timeline_figure
from paradiag.app.selection import Selection, view_store
from paradiag.dataset import Job

MAX_RANKS = 8
MAX_SELECTED = MAX_RANKS  # a folded heatmap row, or a stage's finding, names many ranks: the first ones are drawn
PIXELS = 800
# Intervals drawn one by one (each with its hover line) up to this many; beyond, merged per pixel column. A step of
# 8 ranks holds ~12k intervals, 1.5 MB with their names: a zoom (drag, wheel, W) shows single kernels.
MAX_INTERVALS = 5000
MAX_OPERATORS = 400


def shown_ranks(job: Job, selected: list[int] | None, step: int | None = None) -> list[int]:
    """The selected ranks (else the ranks the top finding blames) first, then the ranks that wait for them the
    longest in ``step`` (default: the step a new page opens on): their stage peers and their pipeline
    neighbours, up to MAX_RANKS in all."""
    mesh = mesh_of(job)
    first = list(dict.fromkeys(selected or focus(job)["ranks"] or mesh.ranks[:1]))[:MAX_SELECTED]
    step = opening_step(job) if step is None else step
    ov = overview(job)
    row = {r: i for i, r in enumerate(ov["ranks"])}
    col = ov["steps"].index(step) if step in ov["steps"] else None
    near = _neighbours(mesh, first)

    def waited(r: int) -> float:
        value = ov["metrics"]["wait_ms"][row[r]][col] if col is not None and r in row else None
        return -(value or 0.0)

    return first + sorted(near, key=waited)[: max(MAX_RANKS - len(first), 0)]


def _neighbours(mesh: Mesh, first: list[int]) -> list[int]:
    """Ranks that wait for ``first``: those of their stages, and those of the adjacent stages on their pipeline
    (same DP and TP coordinates)."""
    stages = {mesh.stage.get(r, 0) for r in first}
    lines = {(mesh.dp.get(r, 0), mesh.tp.get(r, 0)) for r in first}

    def near(r: int) -> bool:
        s = mesh.stage[r]
        return s in stages or ((s - 1 in stages or s + 1 in stages) and (mesh.dp[r], mesh.tp[r]) in lines)

    return [r for r in mesh.ranks if r not in first and near(r)]


def window_ns(job: Job, sel: dict[str, Any], ranks: list[int]) -> tuple[int, int]:
    if sel.get("window"):
        t0 = origin_ns(job)
        a, b = sel["window"]
        return t0 + int(a * 1e6), t0 + int(b * 1e6)
    return step_span(job, sel["step"], ranks) if sel.get("step") is not None else step_span(job, 0, ranks)


def instance_of(collective: str | None) -> int | None:
    """The instance id at the end of a selected collective's name (``all_reduce/group g/#42``)."""
    match = re.search(r"#(\d+)$", collective or "")
    return int(match.group(1)) if match else None


def view_data(job: Job, ranks: list[int], sel: dict[str, Any]) -> dict[str, Any]:
    """The timeline's data for the selection; a whole step (no window) is computed once per job and ranks."""
    limit, instance = min(context.config().max_primitives, MAX_INTERVALS), instance_of(sel.get("collective"))

    def compute() -> dict[str, Any]:
        return timeline_data(job, ranks, window_ns(job, sel, ranks), pixels=PIXELS, max_primitives=limit, instance=instance)

    if sel.get("window"):
        return compute()
    return store.memo("timeline-step", job.content_hash, [sel.get("step"), ranks, PIXELS, limit, instance], compute)


def render_timeline(view: dict[str, Any] | None) -> tuple[go.Figure, str] | tuple[Any, Any]:
    sel = Selection.from_store(view)
    if not sel.job:
        return no_update, no_update
    job = context.job(sel.job)
    ranks = shown_ranks(job, sel.ranks, sel.step)
    data = view_data(job, ranks, sel.view("timeline"))
    chosen = [r for r in ranks if r in set(sel.ranks or focus(job)["ranks"])]
    fig = timeline_figure(data, uirevision=f"{sel.job}|{sel.step}|{','.join(map(str, ranks))}", marked=chosen)
    mode = "merged to screen resolution" if data["aggregated"] else "every interval drawn"
    who = "selected" if sel.ranks else "blamed by a finding"
    peers = [r for r in ranks if r not in chosen]
    info = (
        f"ranks {', '.join(map(str, chosen))} ({who}) · then the ranks that wait for them longest: {', '.join(map(str, peers)) or 'none'} · "
        f"{data['num_events']:,} device events in view ({mode}) · black lines join the members of one collective; red: waiting for the last member · "
        "keys: W/S zoom, A/D pan, / search an operator"
    )
    return fig, info


def operator_names(view: dict[str, Any] | None) -> Any:
    """The operator search's choices: the job's operators, most device time first."""
    sel = Selection.from_store(view)
    if not sel.job:
        return no_update
    totals = operator_totals(context.job(sel.job)).group_by("name").aggregate([("dur_ns_sum", "sum")])
    order = sorted(zip(totals.column("dur_ns_sum_sum").to_pylist(), totals.column("name").to_pylist(), strict=True), reverse=True)
    return [{"label": short_name(name, 60), "value": name} for _, name in order[:MAX_OPERATORS]]


def register(app: Dash) -> None:
    app.callback(Output(ids.TIMELINE, "figure"), Output(ids.TIMELINE_INFO, "children"), Input(view_store("timeline"), "data"), prevent_initial_call=True)(render_timeline)
    app.callback(Output(ids.OP_SEARCH, "options"), Input(view_store("job"), "data"), prevent_initial_call=True)(operator_names)
