"""The communication matrix: sender x receiver, coloured by bandwidth, bytes or busy time."""

from __future__ import annotations

import plotly.graph_objects as go

from paradiag.app import palette
from paradiag.app.figures.common import base_figure, empty_figure

LABELS = {"bandwidth": "GB/s", "bytes": "MiB", "time": "ms"}


def comm_figure(ranks: list[int], z: list[list[float | None]], hover: list[list[str]], metric: str, source: str, selected: list[int] | None = None) -> go.Figure:
    if not any(v is not None for row in z for v in row):
        return empty_figure("no rank-to-rank communication in this job", height=300)
    fig = base_figure(height=max(300, 60 + 22 * len(ranks)))
    # Low bandwidth is the problem, so bandwidth runs from hot (slow) to pale; bytes and time run the other way.
    fig.add_trace(
        go.Heatmap(
            z=z,
            x=[str(r) for r in ranks],
            y=[str(r) for r in ranks],
            text=hover,
            hovertemplate="%{text}<extra></extra>",
            colorscale=palette.HEAT_SCALE,
            reversescale=metric == "bandwidth",
            xgap=1,
            ygap=1,
            colorbar={"title": {"text": LABELS[metric], "side": "right"}, "thickness": 10},
        )
    )
    fig.update_xaxes(title="receiver (dst)", type="category")
    fig.update_yaxes(title="sender (src)", type="category", autorange="reversed")
    if selected and len(selected) == 2:
        a, b = (str(r) for r in selected)
        fig.add_shape(type="rect", x0=ranks.index(int(b)) - 0.5, x1=ranks.index(int(b)) + 0.5, y0=ranks.index(int(a)) - 0.5, y1=ranks.index(int(a)) + 0.5, line={"color": palette.HIGHLIGHT, "width": 3})
    fig.add_annotation(text=f"from {source}", xref="paper", yref="paper", x=0, y=1.0, yanchor="bottom", xanchor="left", showarrow=False, font={"size": 10, "color": "#666"})
    return fig
