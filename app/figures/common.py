"""Layout defaults every figure shares."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

FONT = {"family": "Inter, system-ui, sans-serif", "size": 11}


def base_figure(title: str = "", uirevision: Any = None, height: int | None = None) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(
        template="plotly_white",
        font=FONT,
        title={"text": title, "x": 0.01, "font": {"size": 13}} if title else None,
        margin={"l": 60, "r": 16, "t": 32 if title else 8, "b": 36},
        uirevision=uirevision,
        height=height,
        hoverlabel={"font": {"size": 11}},
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 1, "xanchor": "right"},
    )
    return fig


def empty_figure(message: str, height: int | None = None) -> go.Figure:
    fig = base_figure(height=height)
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper", font={"size": 13, "color": "#777"})
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def segments(x0: list[float], x1: list[float], y: list[float]) -> tuple[list[float | None], list[float | None]]:
    """Horizontal segments as one None-separated polyline (one trace draws them all)."""
    xs: list[float | None] = []
    ys: list[float | None] = []
    for a, b, row in zip(x0, x1, y, strict=True):
        xs += [a, b, None]
        ys += [row, row, None]
    return xs, ys


def short_name(name: str, width: int = 44) -> str:
    """A kernel or operator name without namespaces, template and argument lists, cut to ``width``."""
    text = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    text = text.split("<", 1)[0].split("(", 1)[0].rsplit("::", 1)[-1].strip() or name
    return text if len(text) <= width else text[: width - 1] + "…"
