"""The step chart: step time per step (median over the ranks, and the slowest rank), the selected step marked.
Click a step or brush a range of steps (the slowest step of the range is taken) to pick one."""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from paradiag.app import palette
from paradiag.app.figures.common import base_figure, empty_figure


def steps_figure(steps: list[int], ranks: list[int], step_ms: list[list[float | None]], culprit: list[int] | None = None, selected: int | None = None) -> go.Figure:
    """``step_ms``: ranks x steps (rows in ``ranks`` order). ``culprit``: ranks a finding blames, each drawn as
    its own line (the first three)."""
    if not steps:
        return empty_figure("no steps in this job", height=150)
    block = np.array([[np.nan if v is None else v for v in row] for row in step_ms], dtype=float)
    fig = base_figure(uirevision="steps", height=160)
    with np.errstate(all="ignore"):
        lines = {"median rank": np.nanmedian(block, axis=0), "slowest rank": np.nanmax(block, axis=0)}
    for name, values in lines.items():
        fig.add_trace(go.Scatter(x=steps, y=values, mode="lines+markers", name=name, line={"color": palette.STAGE if name == "median rank" else palette.KIND["communication"], "width": 2}, hovertemplate="step %{x}: %{y:.2f} ms<extra>" + name + "</extra>"))
    row = {r: i for i, r in enumerate(ranks)}
    for r in (culprit or [])[:3]:
        if r in row:
            fig.add_trace(go.Scatter(x=steps, y=block[row[r]], mode="lines", name=f"rank {r}", line={"color": palette.CULPRIT, "width": 1, "dash": "dot"}, hovertemplate="step %{x}: %{y:.2f} ms<extra>rank " + str(r) + "</extra>"))
    fig.update_layout(shapes=step_marker(steps, selected))
    fig.update_xaxes(title="step", tickmode="array", tickvals=steps, range=[min(steps) - 0.5, max(steps) + 0.5])
    fig.update_yaxes(title="ms", rangemode="tozero", fixedrange=True)
    fig.update_layout(dragmode="select", selectdirection="h", margin={"t": 24, "b": 30}, hovermode="x unified", legend={"orientation": "v", "x": 1.02, "xanchor": "left", "y": 1, "yanchor": "top"})
    return fig


def step_marker(steps: list[int], selected: int | None) -> list[dict[str, Any]]:
    """The shapes of the chart: the selected step's line. A new selection replaces only these (a ``Patch``)."""
    if selected not in steps:
        return []
    return [{"type": "line", "xref": "x", "yref": "paper", "x0": selected, "x1": selected, "y0": 0, "y1": 1, "line": {"color": palette.HIGHLIGHT, "width": 2}}]
