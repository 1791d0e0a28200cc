"""Layout defaults every figure shares."""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import plotly.graph_objects as go

from paradiag.analysis import operators
from paradiag.app.data.shapes import SharedText

FONT = {"family": "Inter, system-ui, sans-serif", "size": 11, "color": "#2a3f5f"}
_AXIS = {
    "gridcolor": "#EBF0F8",
    "linecolor": "#EBF0F8",
    "zerolinecolor": "#EBF0F8",
    "zerolinewidth": 2,
    "ticks": "",
    "automargin": True,
    "title": {"standoff": 15},
}
# What the figures take from plotly_white (every colour of data is set by the builders). Naming "plotly_white"
# costs ~25 ms of validation and ~6 KB of payload per figure; this template costs ~1 ms and 0.3 KB.
TEMPLATE = go.layout.Template(
    layout={
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "xaxis": _AXIS,
        "yaxis": _AXIS,
        "hoverlabel": {"align": "left"},
    }
)


def add_caption(fig: go.Figure, text: str, left_px: int) -> None:
    """A caption in the figure's top margin, its lines growing upwards from the plot area, from the figure's left
    edge (``left_px``: the left margin). An annotation, not the title: a title of several lines anchored at its
    top draws its first lines above the figure. ``name="caption"`` finds it."""
    fig.add_annotation(
        name="caption",
        text=text,
        xref="paper",
        yref="paper",
        x=0,
        y=1,
        xanchor="left",
        yanchor="bottom",
        xshift=-left_px,
        yshift=6,
        align="left",
        showarrow=False,
        font={"size": 12},
    )


def base_figure(title: str = "", uirevision: Any = None, height: int | None = None) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(
        template=TEMPLATE,
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
    fig.add_annotation(
        text=message,
        showarrow=False,
        x=0.5,
        y=0.5,
        xref="paper",
        yref="paper",
        font={"size": 13, "color": "#777"},
    )
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def compact(values: Any) -> np.ndarray:
    """Coordinates as float32 (half the payload) when that is finer than 1/20,000 of their extent, the width of
    a pixel on any screen; float64 otherwise (a few microseconds seen hours into a run)."""
    out = np.asarray(values, dtype=np.float64)
    finite = out[np.isfinite(out)]
    if not len(finite):
        return out
    extent = float(finite.max() - finite.min())
    if np.spacing(np.float32(np.abs(finite).max())) * 20_000 <= extent:
        return out.astype(np.float32)
    return out


def bars(x0: Any, x1: Any, y: Any, half: float) -> tuple[np.ndarray, np.ndarray]:
    """Horizontal bars from x0 to x1, ``half`` high on either side of y, as NaN-separated closed polygons: one
    trace with ``fill="toself"`` draws them all as one SVG path (a line trace draws one path per NaN-separated
    piece: a 64-rank timeline's 3,687 nodes, each built and styled on every redraw). Numpy arrays travel to
    the browser as typed arrays (base64), far smaller and faster to validate and encode than lists."""
    x0, x1 = np.asarray(x0, dtype=np.float64), np.asarray(x1, dtype=np.float64)
    row = np.asarray(y, dtype=np.float32)
    gap = np.full(len(x0), np.nan)
    xs = np.column_stack([x0, x1, x1, x0, gap]).ravel()
    ys = np.column_stack([row - half, row - half, row + half, row + half, gap.astype(np.float32)]).ravel()
    return compact(xs), ys.astype(np.float32)


def add_polylines(fig: go.Figure, x: Any, y: Any, line: dict[str, Any], name: str, **shape: Any) -> None:
    """``polylines`` added to ``fig``'s shapes, with its legend entry: a line (a path shape's own legend symbol is
    a hexagon), in the shape's legend group, so a click on it hides and shows the lines."""
    drawn = polylines(x, y, line, name, showlegend=False, legendgroup=name, **shape)
    if drawn is None:
        return
    fig.update_layout(shapes=[*fig.layout.shapes, drawn])
    fig.add_trace(
        go.Scatter(
            x=[None],
            y=[None],
            mode="lines",
            line=line,
            opacity=shape.get("opacity"),
            name=name,
            legendgroup=name,
            hoverinfo="skip",
        )
    )


def polylines(
    x: Any, y: Any, line: dict[str, Any], name: str, showlegend: bool = True, **shape: Any
) -> dict[str, Any] | None:
    """NaN- (or None-) separated polylines in data coordinates as one layout shape: a single SVG path of M/L
    commands. A line trace draws one SVG path per piece (a Marey graph's 224 send/recv lines were 224 nodes, a
    third of its drawing time; a zoomed timeline's collective links up to 3,000), each built and styled on every
    redraw. None when there is no segment. ``x`` is written to 1/20,000 of its extent (a pixel on any screen),
    ``y`` (rows) to 0.001."""
    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    ok = np.isfinite(xs) & np.isfinite(ys)
    if not ok.any():
        return None
    start = ok & ~np.r_[False, ok[:-1]]  # the first point of each piece
    extent = float(xs[ok].max() - xs[ok].min()) or 1.0
    digits = max(0, int(np.ceil(-np.log10(extent / 20_000))))
    path = "".join(
        f"{'M' if first else 'L'}{a:.{digits}f},{b:.4g}"
        for a, b, first in zip(xs[ok].tolist(), np.round(ys[ok], 3).tolist(), start[ok].tolist(), strict=True)
    )
    if "L" not in path:
        return None
    return {
        "type": "path",
        "path": path,
        "xref": "x",
        "yref": "y",
        "line": line,
        "layer": "above",
        "name": name,
        "showlegend": showlegend,
        **shape,
    }


# Per-point hover text sent once per distinct string (trace.meta[SHARED_TEXT]): the strings of each part, then per
# point each part's index among them, joined by a separator. assets/plots.js writes the points' text from it before
# plotly draws; ``inline_texts`` does the same for a figure drawn without that script (the snapshot). A Marey graph's
# hover points repeated their band's and row's names on each point: a third of its bytes.
SHARED_TEXT = "pdText"


def shared_text(*parts: Any, sep: str = "<br>") -> dict[str, SharedText]:
    """A trace's ``meta`` carrying per-point text made of ``parts`` (equal-length sequences of strings, joined
    by ``sep``), each part's distinct strings once and an index per point."""
    lists, index = [], []
    for part in parts:
        names, idx = np.unique(np.asarray(part, dtype=object).astype(str), return_inverse=True)
        lists.append(names.tolist())
        index.append(idx.astype(np.int64).tolist())
    return {SHARED_TEXT: {"parts": lists, "index": index, "sep": sep}}


def text_of(trace: Any) -> list[str]:
    """The per-point text of a trace as the browser shows it: its ``text``, else the one its meta shares."""
    meta = trace.meta if hasattr(trace, "meta") else trace.get("meta")
    # a figure's own (plotly's) or read back from its JSON
    shared = cast("SharedText | None", meta.get(SHARED_TEXT)) if isinstance(meta, dict) else None
    if not shared:
        text = trace.text if hasattr(trace, "text") else trace.get("text")
        return [] if text is None else [text] if isinstance(text, str) else list(text)
    columns = [[names[i] for i in idx] for names, idx in zip(shared["parts"], shared["index"], strict=True)]
    return [shared["sep"].join(row) for row in zip(*columns, strict=True)]


def inline_texts(fig: go.Figure) -> go.Figure:
    """``fig`` with each shared text written out per point (for a page without assets/plots.js)."""
    for trace in fig.data:
        if isinstance(trace.meta, dict) and SHARED_TEXT in trace.meta:
            text = text_of(trace)
            trace.meta = {k: v for k, v in trace.meta.items() if k != SHARED_TEXT} or None
            trace.text = np.array(text, dtype=object)
    return fig


def short_name(name: str, width: int = 44) -> str:
    """The analysis' short name of a kernel or operator, cut to ``width`` characters."""
    text = operators.short_name(name)
    return text if len(text) <= width else text[: width - 1] + "…"
