"""Comparing two runs (a ``paradiag.compare/1`` document): per-rank change bars and the operators that moved.
Pure builders; the dashboard's compare panel and the static diff page (``paradiag compare -o``) both draw these."""

from __future__ import annotations

import plotly.graph_objects as go

from paradiag.analysis.compare import CompareDoc
from paradiag.app import palette
from paradiag.app.figures.common import base_figure, empty_figure, short_name

FASTER, SLOWER, STEP = "#2e7d32", "#c62828", "#455a64"


def rank_changes_figure(doc: CompareDoc, height: int = 320) -> go.Figure:
    """Per paired rank (or mesh position, where an axis was folded), the change of step time and of compute time
    (percent of the baseline), side by side."""
    ranks = doc["ranks"]
    if not ranks:
        return empty_figure("no rank in common", height=height)
    fig = base_figure(height=height)
    names = [r["label"] for r in ranks]
    what = "rank" if all(r["rank"] is not None for r in ranks) else "position"
    fig.add_bar(
        x=names,
        y=[r["step_time_ns"]["delta_pct"] for r in ranks],
        name="step time",
        marker_color=STEP,
        hovertemplate=what + " %{x}: step time %{y:+.1f}%<extra></extra>",
    )
    fig.add_bar(
        x=names,
        y=[r["compute_ns"]["delta_pct"] for r in ranks],
        name="compute",
        marker_color=palette.KIND["compute"],
        hovertemplate=what + " %{x}: compute %{y:+.1f}%<extra></extra>",
    )
    fig.update_layout(
        barmode="group",
        yaxis_title="change (%)",
        xaxis_title=f"{what}, paired by {doc['rank_pairing']['by']}",
        margin={"t": 28},
    )
    fig.update_xaxes(type="category")
    return fig


def operator_changes_figure(doc: CompareDoc, top: int = 8, height: int = 300) -> go.Figure:
    """The operators that got slower (red) or faster (green), by change of device time per step (ms)."""
    ops = doc["operators"]["slower"][:top] + doc["operators"]["faster"][:top]
    if not ops:
        return empty_figure("no operator changed beyond noise", height=height)
    ops = sorted(ops, key=lambda op: op["change_ns_per_step"])
    fig = base_figure(height=height)
    fig.add_bar(
        y=[short_name(op["operator"], 40) for op in ops],
        x=[op["change_ns_per_step"] / 1e6 for op in ops],
        orientation="h",
        marker_color=[SLOWER if op["change_ns_per_step"] > 0 else FASTER for op in ops],
        customdata=[[op["operator"][:120], op["category"]] for op in ops],
        hovertemplate="%{customdata[0]}<br>%{customdata[1]}: %{x:+.3f} ms per step<extra></extra>",
        showlegend=False,
    )
    fig.update_layout(
        xaxis_title=f"change of device time per step (ms), matched by {doc['operators']['matched_by']}",
        margin={"l": 200, "t": 12},
    )
    fig.update_yaxes(type="category", automargin=True)
    return fig
