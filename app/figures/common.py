"""Layout defaults every figure shares."""

from __future__ import annotations

import copy
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
    # Tick labels drawn where they fall: plotly's default for a linear axis ("hide past div") measures every label's
    # box after each draw to hide those past the figure's edge (getBoundingClientRect per label: a tenth of a
    # 256-rank timeline's redraw); the margins grow to hold them (automargin), so none lies past it.
    "ticklabeloverflow": "allow",
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


TEMPLATE_JSON = TEMPLATE.to_plotly_json()
# A figure's traces as plotly's JSON has them, while it is built (:func:`assembled` makes the figure once).
Traces = list[dict[str, Any]]


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


def base_layout(title: str = "", uirevision: Any = None, height: int | None = None) -> dict[str, Any]:
    """The layout every figure starts from, as plotly's JSON has it (unset entries left out)."""
    layout = {
        "template": TEMPLATE_JSON,
        "font": FONT,
        "title": {"text": title, "x": 0.01, "font": {"size": 13}} if title else None,
        "margin": {"l": 60, "r": 16, "t": 32 if title else 8, "b": 36},
        "uirevision": uirevision,
        "height": height,
        "hoverlabel": {"font": {"size": 11}},
        "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 1, "xanchor": "right"},
    }
    return copy.deepcopy({k: v for k, v in layout.items() if v is not None})


def base_figure(title: str = "", uirevision: Any = None, height: int | None = None) -> go.Figure:
    # The layout given to the constructor: validated once, a third of what ``update_layout`` on a new figure costs
    # (plotly's relayout path splits every key path: ~8 ms a figure, and a step change builds about seven)
    return go.Figure(layout=base_layout(title, uirevision, height))


def scatter(**props: Any) -> dict[str, Any]:
    """A scatter trace as plotly's JSON has it, for :func:`assembled` (``props`` as ``go.Scatter`` takes them,
    nested as dicts: ``marker={"color": ...}``, not ``marker_color``)."""
    return {"type": "scatter", **{k: v for k, v in props.items() if v is not None}}


def assembled(traces: Traces, layout: dict[str, Any]) -> go.Figure:
    """A figure of ``traces`` and ``layout`` (plotly's JSON: :func:`scatter`, :func:`base_layout`) built without
    plotly checking each value: a checked figure runs a validator per property of every trace, then copies each
    trace again as it is added (a 256-rank Marey graph: ~15 of its ~45 ms, every redraw). The builders that use it
    are checked against plotly's schema by their tests (``tests/test_figures_unchecked.py``)."""
    return go.Figure({"data": traces, "layout": layout}, _validate=False)


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


def _digits(x: np.ndarray) -> int:
    """Decimals that write ``x`` to 1/20,000 of its extent (a pixel on any screen)."""
    extent = float(x.max() - x.min()) or 1.0
    return max(0, int(np.ceil(-np.log10(extent / 20_000))))


def boxes_path(x0: Any, x1: Any, y0: Any, y1: Any) -> str:
    """Rectangles [x0, x1] x [y0, y1] as one SVG path in data coordinates (``M x0,y0 H x1 V y1 H x0 Z`` each); x
    written to 1/20,000 of its extent (a pixel on any screen), y (rows) to 0.001. A bar with a non-finite end is
    left out."""
    a, b = np.asarray(x0, dtype=np.float64), np.asarray(x1, dtype=np.float64)
    lo = np.broadcast_to(np.asarray(y0, dtype=np.float64), a.shape)
    hi = np.broadcast_to(np.asarray(y1, dtype=np.float64), a.shape)
    keep = np.isfinite(a) & np.isfinite(b) & np.isfinite(lo) & np.isfinite(hi)
    if not keep.any():
        return ""
    a, b, lo, hi = a[keep], b[keep], lo[keep], hi[keep]
    d = _digits(np.concatenate([a, b]))
    one = f"M%.{d}f,%.3fH%.{d}fV%.3fH%.{d}fZ"
    return (one * len(a)) % tuple(np.column_stack([a, lo, b, hi, a]).ravel().tolist())


def add_filled(
    traces: Traces,
    shapes: list[dict[str, Any]],
    path: str,
    color: str,
    name: str,
    legendgroup: str | None = None,
    showlegend: bool = True,
    opacity: float | None = None,
) -> None:
    """Filled rectangles (``boxes_path``) as one layout shape between the grid and the traces, appended to
    ``shapes`` (the builder sets the figure's shapes once), with a legend entry (a square in ``color``) appended to
    ``traces`` (a figure being built: :func:`assembled`) in its legend group: a click on it hides and shows them.
    A shape, not a trace filled ``toself``: plotly computes, clips and styles every point of a trace on each draw,
    and a 256-rank timeline's or Marey graph's bars took half of its drawing time that way; a shape's path is only
    scaled to pixels (the timeline; a Marey graph's bars, drawn so, cost the page more:
    ``paradiag.app.figures.marey._filled``). The bars' hover and click come from their points' traces (drawn as
    nothing)."""
    if not path:
        return
    group = legendgroup or name
    shape = {
        "type": "path",
        "path": path,
        "xref": "x",
        "yref": "y",
        "fillcolor": color,
        "fillrule": "nonzero",  # overlapping bars stay filled (evenodd would cut their overlap out)
        "line": {"width": 0},
        "layer": "between",
        "name": name,
        "legendgroup": group,
        "showlegend": False,
    }
    shapes.append(shape | ({"opacity": opacity} if opacity is not None else {}))
    if showlegend:
        marker = {"symbol": "square", "size": 10, "color": color, "opacity": opacity}
        traces.append(
            scatter(
                x=[None],
                y=[None],
                mode="markers",
                marker={k: v for k, v in marker.items() if v is not None},
                name=name,
                legendgroup=group,
                hoverinfo="skip",
                hoveron="fills",  # a legend entry alone: not one of the traces whose points answer the mouse
            )
        )


def add_polylines(
    fig: go.Figure | Traces,
    x: Any,
    y: Any,
    line: dict[str, Any],
    name: str,
    shapes: list[dict[str, Any]] | None = None,
    **shape: Any,
) -> None:
    """``polylines`` added to ``fig``'s shapes (to ``shapes`` when given, which the builder sets at once: setting
    a figure's shapes validates each again, 10 ms per bar shape of a 256-rank timeline), with its legend entry: a
    line (a path shape's own legend symbol is a hexagon), in the shape's legend group, so a click on it hides and
    shows the lines. ``fig``: a figure, or the traces of one being built (:func:`assembled`; ``shapes`` given)."""
    drawn = polylines(x, y, line, name, showlegend=False, legendgroup=name, **shape)
    if drawn is None:
        return
    key = scatter(
        x=[None],
        y=[None],
        mode="lines",
        line=line,
        opacity=shape.get("opacity"),
        name=name,
        legendgroup=name,
        hoverinfo="skip",
    )
    if isinstance(fig, list):
        assert shapes is not None, "a figure being built takes its shapes at once"
        shapes.append(drawn)
        fig.append(key)
        return
    if shapes is not None:
        shapes.append(drawn)
    else:
        fig.update_layout(shapes=[*fig.layout.shapes, drawn])
    fig.add_trace(key)


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
    digits = _digits(xs[ok])
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
