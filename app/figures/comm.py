"""The communication matrix: sender x receiver (ranks, or blocks of them by stage or node), coloured by how much
slower each link is than comparable links (or by bandwidth, bytes or busy time)."""

from __future__ import annotations

import plotly.graph_objects as go

from paradiag.app import palette
from paradiag.app.data.shapes import CommMetric, CommView
from paradiag.app.figures.common import base_figure, empty_figure

LABELS: dict[CommMetric, str] = {"slowness": "× slower", "bandwidth": "GB/s", "bytes": "MB", "time": "ms"}
LEVELS = {
    "rank": "by rank",
    "node": "by node (click a block to open it)",
    "stage": "by pipeline stage (click a block to open it)",
}


def comm_figure(view: CommView, metric: CommMetric, selected: list[int] | None = None) -> go.Figure:
    """``view``: from ``paradiag.app.data.comm.view``; ``selected``: a link (src, dst ranks) to outline."""
    z = view["cells"][metric]
    if not any(v is not None for row in z for v in row):
        return empty_figure("no rank-to-rank communication in this job", height=300)
    rows, cols = [g["label"] for g in view["src"]], [g["label"] for g in view["dst"]]
    fig = base_figure(title=LEVELS[view["level"]], height=min(900, max(320, 100 + 20 * len(rows))))
    values = [v for row in z for v in row if v is not None]
    # Slowness starts at 1 (as fast as comparable links); low bandwidth is the problem, so it runs hot to pale.
    scale = {"zmin": 1.0, "zmax": max(2.0, max(values))} if metric == "slowness" else {}
    fig.add_trace(
        go.Heatmap(
            z=z,
            x=cols,
            y=rows,
            text=view["hover"],
            hovertemplate="%{text}<extra></extra>",
            colorscale=palette.HEAT_SCALE,
            reversescale=metric == "bandwidth",
            xgap=1 if len(cols) <= 64 else 0,
            ygap=1 if len(rows) <= 64 else 0,
            colorbar={"title": {"text": LABELS[metric], "side": "right"}, "thickness": 10},
            **scale,
        )
    )
    fig.update_layout(
        xaxis={"title": f"receiver (dst) · figures from {view['source']}", "type": "category"},
        yaxis={"title": "sender (src)", "type": "category", "autorange": "reversed"},
        shapes=comm_shapes(view, selected),
        # read in the browser (views/comm/live.BLOCK_CLICK): a click on a block opens it, one on a link does not
        meta={"level": view["level"]},
    )
    return fig


def comm_shapes(view: CommView, selected: list[int] | None) -> list[dict[str, object]]:
    """The outline of link ``selected`` (src, dst ranks) where the matrix shows it (by rank), else none: the
    figure's shapes, which a click on another link replaces alone."""
    rows, cols = [g["label"] for g in view["src"]], [g["label"] for g in view["dst"]]
    if not (
        selected
        and len(selected) == 2
        and view["level"] == "rank"
        and str(selected[0]) in rows
        and str(selected[1]) in cols
    ):
        return []
    i, j = rows.index(str(selected[0])), cols.index(str(selected[1]))
    return [
        {
            "type": "rect",
            "x0": j - 0.5,
            "x1": j + 0.5,
            "y0": i - 0.5,
            "y1": i + 0.5,
            "line": {"color": palette.HIGHLIGHT, "width": 3},
        }
    ]
