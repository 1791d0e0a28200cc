"""The Gantt timeline: the selected ranks (with their stage peers) over the selected window or step."""

from __future__ import annotations

import re
from typing import Any

import plotly.graph_objects as go
from dash import Dash, Input, Output, no_update

from paradiag.app import context, ids, store
from paradiag.app.data.common import origin_ns, step_span
from paradiag.app.data.mesh import mesh_of
from paradiag.app.data.timeline import timeline_data
from paradiag.app.figures.timeline import timeline_figure
from paradiag.dataset import Job

MAX_RANKS = 6
PIXELS = 800


def shown_ranks(job: Job, selected: list[int] | None) -> list[int]:
    """The selected ranks first, then their stage peers, up to MAX_RANKS (all selected ranks are kept)."""
    mesh = mesh_of(job)
    if not selected:
        return mesh.ranks[:MAX_RANKS]
    out = list(dict.fromkeys(selected))
    for rank in selected:
        for peer in mesh.ranks_of_stage(mesh.stage.get(rank, 0)):
            if len(out) >= MAX_RANKS:
                break
            if peer not in out:
                out.append(peer)
    return out


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
    limit, instance = context.config().max_primitives, instance_of(sel.get("collective"))

    def compute() -> dict[str, Any]:
        return timeline_data(job, ranks, window_ns(job, sel, ranks), pixels=PIXELS, max_primitives=limit, instance=instance)

    if sel.get("window"):
        return compute()
    return store.memo("timeline-step", job.content_hash, [sel.get("step"), ranks, PIXELS, limit, instance], compute)


def render_timeline(sel: dict[str, Any] | None) -> tuple[go.Figure, str] | tuple[Any, Any]:
    if not sel or not sel.get("job"):
        return no_update, no_update
    job = context.job(sel["job"])
    ranks = shown_ranks(job, sel.get("ranks"))
    data = view_data(job, ranks, sel)
    fig = timeline_figure(data, uirevision=f"{sel['job']}|{sel.get('step')}|{','.join(map(str, ranks))}")
    mode = "merged to screen resolution" if data["aggregated"] else "every interval drawn"
    info = f"ranks {', '.join(map(str, ranks))} · {data['num_events']:,} device events in view ({mode}) · black lines join the members of one collective; red: waiting for the last member"
    return fig, info


def register(app: Dash) -> None:
    app.callback(Output(ids.TIMELINE, "figure"), Output(ids.TIMELINE_INFO, "children"), Input(ids.SELECTION, "data"))(render_timeline)
