"""The overview heatmap: ranks (or groups of ranks) x steps, grouped by pipeline stage."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from paradiag.app import palette
from paradiag.app.figures.common import base_figure, empty_figure


def heatmap_figure(rows: list[dict[str, Any]], steps: list[int], metric: str, label: str, selected: dict[str, Any] | None = None) -> go.Figure:
    """``rows``: ``{"label", "ranks", "stage", "values" (per step), "spread" (per step "min/median/max" or None)}``
    top to bottom. ``selected``: ``{"ranks": [...], "step": s}`` is outlined."""
    if not rows or not steps:
        return empty_figure("no steps in this job")
    z = [r["values"] for r in rows]
    hover = [
        [f"{r['label']} · step {s}<br>{label}: {_fmt(v)}" + (f"<br>min/median/max: {sp}" if sp else "") for s, v, sp in zip(steps, r["values"], r["spread"], strict=True)]
        for r in rows
    ]
    custom = [[",".join(map(str, r["ranks"]))] * len(steps) for r in rows]
    diverging = metric == "zscore"
    fig = base_figure(uirevision="heatmap", height=max(220, 24 + 18 * len(rows)))
    fig.add_trace(
        go.Heatmap(
            z=z,
            x=[str(s) for s in steps],
            y=list(range(len(rows))),
            text=hover,
            customdata=custom,
            hovertemplate="%{text}<extra></extra>",
            colorscale=palette.DIVERGING_SCALE if diverging else palette.HEAT_SCALE,
            zmid=0 if diverging else None,
            xgap=1,
            ygap=1,
            colorbar={"title": {"text": label, "side": "right"}, "thickness": 10},
        )
    )
    fig.update_yaxes(tickvals=list(range(len(rows))), ticktext=[r["label"] for r in rows], autorange="reversed", showgrid=False)
    fig.update_xaxes(title="step", type="category", showgrid=False)
    for i in range(1, len(rows)):
        if rows[i]["stage"] != rows[i - 1]["stage"]:
            fig.add_hline(y=i - 0.5, line={"color": "#222", "width": 2})
    if selected:
        _outline(fig, rows, steps, selected)
    fig.update_layout(margin={"l": 90})
    return fig


def _outline(fig: go.Figure, rows: list[dict[str, Any]], steps: list[int], selected: dict[str, Any]) -> None:
    ranks = set(selected.get("ranks") or [])
    step = selected.get("step")
    if step not in steps:
        return
    j = steps.index(step)
    for i, r in enumerate(rows):
        if ranks & set(r["ranks"]):
            fig.add_shape(type="rect", x0=j - 0.5, x1=j + 0.5, y0=i - 0.5, y1=i + 0.5, line={"color": palette.HIGHLIGHT, "width": 3})


def _fmt(v: float | None) -> str:
    return "–" if v is None else f"{v:.3f}"
