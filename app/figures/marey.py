"""Marey's graph: stages as stations top to bottom, each drawn with a few rows (alike devices folded into one row
with their spread, a late mesh group, anomalous devices single and marked), time across. Each operator instance
is a bar on every row of its stage, joined row to row by a trapezoid; the bars answer the mouse (durations, the
slowest device) and a click selects that one instance. Send/recv pairs drawn as lines between stages, so that
micro-batches, the pipeline schedule and its bubbles show."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import plotly.graph_objects as go

from paradiag.app import palette
from paradiag.app.figures.common import (
    Traces,
    add_polylines,
    assembled,
    base_layout,
    compact,
    empty_figure,
    polylines,
    scatter,
    shared_text,
    short_name,
)

if TYPE_CHECKING:  # the view data's shapes (the figure reads them, the data layer builds them)
    from paradiag.app.data.shapes import MareyData, MareyStage, MareyTimes, PathPiece

HALF = 0.32  # half the height of a row
# A window's width in pixels, at most: what is narrower than window / PIXELS is less than a pixel on any screen.
PIXELS = 2000
STAGE_GAP = 0.7  # extra space between stages
ANOMALY = "#c62828"
# The operators' names, once per figure (layout.meta[OPERATORS]): a hover point's customdata holds its operator's
# index there (a name per point was most of the figure's bytes and of the time it took to build and encode).
OPERATORS = "operators"
HIGHLIGHT_NAME = "selected operator"  # the selected instance's outline: the figure's last shape
HOVER_STEP = 1 / 80  # the hover points along a long bar: this fraction of the window apart at most


def rows_of(data: MareyData) -> tuple[list[list[float]], dict[int, float], list[tuple[float, str]]]:
    """y of each row of each stage, the y of each rank (its row's), and the tick labels (anomalies in red)."""
    row_y: list[list[float]] = []
    rank_y: dict[int, float] = {}
    ticks: list[tuple[float, str]] = []
    y = 0.0
    for st in data["stages"]:
        ys = []
        for row in st["rows"]:
            ys.append(y)
            rank_y.update(dict.fromkeys(row["ranks"], y))
            label = row["label"]
            ticks.append(
                (y, f"<span style='color:{ANOMALY}'><b>{label} ⚠</b></span>" if row["anomalous"] else label)
            )
            y += 1
        row_y.append(ys)
        y += STAGE_GAP
    return row_y, rank_y, ticks


def marey_figure(
    data: MareyData,
    selected: tuple[Any, ...] | None = None,
    uirevision: Any = None,
    path: list[PathPiece] | None = None,
) -> go.Figure:
    """``selected``: (operator, stage or None, at ms or None): the instance holding ``at`` (else every instance
    of the operator, in that stage when given) is outlined. ``path``: the step's critical path
    (``paradiag.app.data.marey.critical_path``), drawn through the rows of the ranks it passes."""
    if not data["stages"] or not any(len(st["start"]) for st in data["stages"]):
        return empty_figure("no device work in this step", height=300)
    row_y, rank_y, ticks = rows_of(data)
    traces: Traces = []  # the figure is built once, unchecked (``common.assembled``)
    shapes: list[dict[str, Any]] = []
    _bubbles(traces, data, row_y)
    _spread(traces, data, row_y)
    _connectors(traces, data, row_y)
    operators = _bars(traces, data, row_y)
    _p2p(traces, shapes, data, rank_y)
    notes = _anomalies(traces, shapes, data, row_y)
    if path is not None:
        traces.append(critical_path_trace(path, rank_y))
    layout = base_layout(uirevision=uirevision, height=int(120 + 26 * (ticks[-1][0] + 1)))
    layout["margin"].update({"l": 90, "t": 40})
    layout["legend"].update({"font": {"size": 10}, "y": 1.0, "yanchor": "bottom"})
    layout.update(
        shapes=[*shapes, highlight(data, selected)],
        **({"annotations": notes} if notes else {}),
        yaxis={
            "tickvals": [t[0] for t in ticks],
            "ticktext": [t[1] for t in ticks],
            "autorange": "reversed",
            "showgrid": False,
            "zeroline": False,
            "fixedrange": True,
        },
        xaxis={
            "title": {"text": f"time since job start (ms) · step {data['step']}"},
            "range": data["window_ms"],
            "showgrid": True,
        },
        dragmode="zoom",
        hovermode="closest",
        meta={OPERATORS: operators},
    )
    return assembled(traces, layout)


def _arrays(st: MareyStage, key: MareyTimes) -> np.ndarray:
    return np.asarray(st[key], dtype=np.float64).reshape(len(st[key]), len(st["rows"]))


def _joined(parts: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
    """x and y of one trace drawing all ``parts``."""
    if not parts:
        return {"x": np.array([]), "y": np.array([])}
    return {
        "x": compact(np.concatenate([p[0] for p in parts])),
        "y": np.concatenate([p[1] for p in parts]).astype(np.float32),
    }


def _filled(
    traces: Traces,
    parts: list[tuple[np.ndarray, np.ndarray]],
    color: str,
    name: str,
    legendgroup: str | None = None,
    showlegend: bool = True,
    opacity: float | None = None,
) -> None:
    """``parts`` (NaN-separated polygons: ``_rects``, ``_trapezoids``, ``_boxes``) as one trace filled
    ``toself``, which answers no mouse. A trace, not a path shape as the timeline's bars (``add_filled``): in
    the page, a Marey graph drawn from shapes cost the browser more (256 ranks, headless Chromium: 1,270 against
    1,000-1,180 ms of CPU per zoom), though a lone plot of it took less."""
    if parts:
        traces.append(
            scatter(
                **_joined(parts),
                fill="toself",
                mode="none",
                fillcolor=color,
                opacity=opacity,
                name=name,
                legendgroup=legendgroup or name,
                showlegend=showlegend,
                hoverinfo="skip",
            )
        )


def _rects(
    a: np.ndarray, b: np.ndarray, y: float | np.ndarray, half: float = HALF, closed: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Rectangles [a, b] x [y - half, y + half], NaN-separated (one polygon each): their corners alone (a filled
    path closes each piece, ``_path``); an outline (``closed``) returns to its first corner."""
    n = len(a)
    y = np.broadcast_to(np.asarray(y, dtype=np.float64), (n,))
    gap = np.full(n, np.nan)
    xs = [a, b, b, a, *([a] if closed else []), gap]
    ys = [y - half, y - half, y + half, y + half, *([y - half] if closed else []), gap]
    return np.column_stack(xs).ravel(), np.column_stack(ys).ravel()


def _trapezoids(starts: np.ndarray, ends: np.ndarray, ys: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """Per band (row of ``starts``/``ends``) and pair of neighbouring rows, the trapezoid from the bottom of one
    row's bar to the top of the next's."""
    xs, yv = [], []
    for i in range(len(ys) - 1):
        a, b = ys[i] + HALF, ys[i + 1] - HALF
        n = len(starts)
        gap = np.full(n, np.nan)
        xs.append(np.column_stack([starts[:, i], ends[:, i], ends[:, i + 1], starts[:, i + 1], gap]).ravel())
        yv.append(np.tile([a, a, b, b, np.nan], n))  # filled: closed by plotly (``_rects``)
    return (np.concatenate(xs), np.concatenate(yv)) if xs else (np.array([]), np.array([]))


def _bubbles(traces: Traces, data: MareyData, row_y: list[list[float]]) -> None:
    parts = []
    for st, ys in zip(data["stages"], row_y, strict=True):
        for y, gaps in zip(ys, st["bubbles"], strict=True):
            if gaps:
                span = np.asarray(gaps, dtype=np.float64)
                parts.append(_rects(span[:, 0], span[:, 1], y, half=HALF * 1.25))
    if parts:
        traces.append(
            scatter(
                **_joined(parts),
                fill="toself",
                mode="none",
                fillcolor="rgba(189,189,189,0.35)",
                fillpattern={"shape": "/", "fgcolor": "#9e9e9e", "size": 6},
                name="bubble (no compute)",
                hoverinfo="skip",
            )
        )


def _spread(traces: Traces, data: MareyData, row_y: list[list[float]]) -> None:
    """Behind each band of a folded row: from its devices' earliest start to their latest end (where that is
    wider than the bar by a pixel or more)."""
    parts = []
    pixel = _pixel(data)
    for st, ys in zip(data["stages"], row_y, strict=True):
        if not len(st["start"]):
            continue
        lo, hi = _arrays(st, "lo"), _arrays(st, "hi")
        wider = (hi - lo) - (_arrays(st, "end") - _arrays(st, "start")) > pixel
        for j, (row, y) in enumerate(zip(st["rows"], ys, strict=True)):
            if len(row["ranks"]) > 1 and wider[:, j].any():
                a, b, y0, y1 = _merged(
                    lo[wider[:, j], j], hi[wider[:, j], j], y - HALF * 1.15, y + HALF * 1.15, pixel
                )
                parts.append(_boxes(a, b, y0, y1))
    _filled(traces, parts, "rgba(120,144,156,0.3)", "spread over the row's devices")


def _connectors(traces: Traces, data: MareyData, row_y: list[list[float]]) -> None:
    polys: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for st, ys in zip(data["stages"], row_y, strict=True):
        if len(ys) < 2 or not len(st["start"]):
            continue
        starts, ends = _arrays(st, "start"), _arrays(st, "end")
        cats = np.array(st["category"], dtype=object)
        for cat in dict.fromkeys(st["category"]):
            polys.setdefault(cat, []).append(_trapezoids(starts[cats == cat], ends[cats == cat], ys))
    for cat, parts in polys.items():
        color = palette.CATEGORY.get(cat, "#888")
        _filled(traces, parts, color, f"{cat} (row to row)", legendgroup=cat, showlegend=False, opacity=0.35)


def _bars(traces: Traces, data: MareyData, row_y: list[list[float]]) -> list[str]:
    """Per category, its bars as one filled path (NaN-separated polygons: one SVG node, where a ``go.Bar``
    draws a path per bar and a 256-rank graph took 0.4-0.5 s to redraw) and undrawn points carrying their hover
    and click (:func:`_hover_points`). A band merged from neighbours of several categories is drawn stacked: each
    category a slice of the bar's height by its share of the band's time."""
    parts: dict[str, list[dict[str, np.ndarray]]] = {}
    boxes: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    ops: dict[str, int] = {}
    for st, ys in zip(data["stages"], row_y, strict=True):
        if len(st["start"]):
            for cat, part in _stage_bars(st, ys, ops).items():
                parts.setdefault(cat, []).append(part)
            for cat, box in _stacked(st, ys).items():
                boxes.setdefault(cat, []).append(box)
    step = HOVER_STEP * (data["window_ms"][1] - data["window_ms"][0])
    for cat in dict.fromkeys([*boxes, *parts]):
        color = palette.CATEGORY.get(cat, "#888")
        if cat in boxes:
            _filled(traces, boxes[cat], color, cat, opacity=0.85)
        if cat in parts:
            bar = {k: np.concatenate([c[k] for c in parts[cat]]) for k in parts[cat][0]}
            _hover_points(traces, cat, color, bar, step, data["window_ms"])
    return list(ops)


def _stacked(st: MareyStage, ys: list[float]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per category, the slices of a stage's bars it holds (x, y of NaN-separated closed polygons): a band's
    categories stacked top to bottom in one order for every band (compute first: its share compares across
    stages at a glance), each as high as its share of the band's time. Not merged per pixel as the spreads are
    (:func:`_merged`): a band's slices are as high as its shares, which neighbours seldom have alike (none merged on
    three 256-rank jobs, for 3.5 ms a build)."""
    starts, ends = _arrays(st, "start"), _arrays(st, "end")
    y = np.asarray(ys, dtype=np.float64)
    mixes = st.get("shares") or [[[c, 1.0]] for c in st["category"]]
    order = {c: k for k, c in enumerate(palette.CATEGORY)}
    slices: dict[str, tuple[list[int], list[float], list[float]]] = {}  # per category: band, low, share
    for i, mix in enumerate(mixes):
        low = 0.0
        for cat, share in sorted(mix, key=lambda cs: order.get(cs[0], len(order))):
            if share <= 0:
                continue
            band, lows, shares = slices.setdefault(cat, ([], [], []))
            band.append(i)
            lows.append(low)
            shares.append(share)
            low += share
    out = {}
    for cat, (band, lows, shares) in slices.items():
        idx = np.asarray(band)
        y0 = y[None, :] - HALF + 2 * HALF * np.asarray(lows)[:, None]  # band x row
        y1 = y0 + 2 * HALF * np.asarray(shares)[:, None]
        out[cat] = _boxes(starts[idx].ravel(), ends[idx].ravel(), y0.ravel(), y1.ravel())
    return out


def _pixel(data: MareyData) -> float:
    """Less than a pixel of the graph's window (ms): the server draws a zoom again (the graph has no wheel zoom)."""
    return (data["window_ms"][1] - data["window_ms"][0]) / PIXELS


def _merged(
    a: np.ndarray, b: np.ndarray, y0: np.ndarray | float, y1: np.ndarray | float, pixel: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rectangles [a, b] x [y0, y1] with those of the same [y0, y1] that touch, overlap or stand less than
    ``pixel`` apart made one: what the screen shows as one bar is one polygon (a 256-rank step's spreads behind
    its folded rows, band after band: 1,200 polygons that plotly clips, paths and fills one by one, 8 drawn). A
    rectangle with an end that is not a number (a band not on this row) is left out."""
    n = len(a)
    x0, x1 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    lo = np.broadcast_to(np.asarray(y0, dtype=np.float64), (n,))
    hi = np.broadcast_to(np.asarray(y1, dtype=np.float64), (n,))
    if n < 2 or pixel <= 0:
        return x0, x1, lo, hi
    keep = np.isfinite(x0) & np.isfinite(x1) & np.isfinite(lo) & np.isfinite(hi)
    order = np.lexsort((x0[keep], hi[keep], lo[keep]))
    x0, x1, lo, hi = x0[keep][order], x1[keep][order], lo[keep][order], hi[keep][order]
    n = len(x0)
    if not n:
        return x0, x1, lo, hi
    row = np.r_[True, (lo[1:] != lo[:-1]) | (hi[1:] != hi[:-1])]  # the first rectangle of each [y0, y1]
    reach = x1.copy()  # the right end of the run each rectangle ends: a running max within its row
    starts = np.flatnonzero(row)
    for s, e in zip(starts, [*starts[1:], n], strict=True):
        reach[s:e] = np.maximum.accumulate(x1[s:e])
    new = row.copy()
    new[1:] |= x0[1:] > reach[:-1] + pixel
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, n - 1]
    return x0[first], reach[last], lo[first], hi[first]


def _boxes(a: np.ndarray, b: np.ndarray, y0: np.ndarray, y1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Filled rectangles [a, b] x [y0, y1], NaN-separated (their corners: ``_rects``)."""
    gap = np.full(len(a), np.nan)
    return np.column_stack([a, b, b, a, gap]).ravel(), np.column_stack([y0, y0, y1, y1, gap]).ravel()


def _stage_bars(st: MareyStage, ys: list[float], ops: dict[str, int]) -> dict[str, dict[str, np.ndarray]]:
    """Per category, a stage's bars (band by band, row by row): extent, row, and what the hover and the click
    carry: the operator (its index in ``ops``, which it is added to), the instance's middle (which instance a click selects), the row's time and spread over
    its devices, the slowest device and its time, the band's head line and the row's label."""
    starts, ends, lo, hi = _arrays(st, "start"), _arrays(st, "end"), _arrays(st, "lo"), _arrays(st, "hi")
    rows = len(ys)
    per_band = {
        "op": np.array([ops.setdefault(name, len(ops)) for name in st["operator"]], dtype=np.float64),
        "mid": ((lo.min(axis=1) + hi.max(axis=1)) / 2).round(4),
        # the band's head line in three parts, each sent once per distinct string (shared_text): its name, its
        # categories' shares, its pass
        "name": np.array([short_name(label, 48) for label in st["label"]], dtype=object),
        "mix": np.array(
            [
                f" · {_mix_text(mix) or cat}"
                for cat, mix in zip(st["category"], st.get("shares") or [[]] * len(st["label"]), strict=True)
            ],
            dtype=object,
        ),
        "pass": np.array([_pass_text(p) for p in st.get("pass") or [""] * len(st["label"])], dtype=object),
        "merged": np.array([op != label for op, label in zip(st["operator"], st["label"], strict=True)]),
    }
    per_row = {
        "y": np.asarray(ys, dtype=np.float32),
        "label": np.array([r["label"] for r in st["rows"]], dtype=object),
        "many": np.array([len(r["ranks"]) > 1 for r in st["rows"]]),
    }
    cats = np.array(st["category"], dtype=object)
    out = {}
    for cat in dict.fromkeys(st["category"]):
        idx = np.flatnonzero(cats == cat)
        out[cat] = {
            "start": starts[idx].ravel(),
            "end": ends[idx].ravel(),
            "lo": lo[idx].ravel(),
            "hi": hi[idx].ravel(),
            "slow_rank": _arrays(st, "slow_rank")[idx].astype(np.int64).ravel(),
            "slow_ms": _arrays(st, "slow_ms")[idx].ravel(),
            "stage": np.full(len(idx) * rows, st["stage"], dtype=np.int64),
            **{k: np.repeat(v[idx], rows) for k, v in per_band.items()},
            **{k: np.tile(v, len(idx)) for k, v in per_row.items()},
        }
    return out


def _hover_points(
    traces: Traces,
    cat: str,
    color: str,
    bar: dict[str, np.ndarray],
    step: float,
    window: list[float],
) -> None:
    """Undrawn points (``mode="none"``: no SVG node each) that carry the bars' hover and click: plotly answers
    the point nearest the mouse, so a bar has one at its middle or, when longer than ``step``, evenly spaced
    along it at most ``step`` apart (with a point at its middle only, the mouse on a long bar's end is too far from
    it to be answered, or answered by a neighbour).
    customdata = (operator's index in layout.meta[OPERATORS], stage, the instance's middle in ms: what a click selects; then the row's time, the
    slowest device and its time, the spread over the row's devices); the sentence is the template, so the only
    text a point carries is its band's name and pass and its row's label, each name sent once (``shared_text``). One trace per wording: a row of
    several devices shows their spread, a merged band names its longest single operator.
    Points lie in the part of a bar inside ``window`` (ms): a zoom is drawn again by the server, and a 3 ms wait
    under a 0.1 ms window (a comm-matrix link's instance) held 2,400 points, 0.5 MB of a 256-rank figure. A bar
    outside the window (a merged band reaching past it) keeps one point, at its middle."""
    inside = (bar["end"] > window[0]) & (bar["start"] < window[1])
    middle = (bar["start"] + bar["end"]) / 2
    start = np.where(inside, np.maximum(bar["start"], window[0]), middle)
    end = np.where(inside, np.minimum(bar["end"], window[1]), middle)
    length = end - start
    count = (
        np.maximum(1, np.ceil(length / step)).astype(np.int64)
        if step > 0
        else np.ones(len(length), dtype=np.int64)
    )
    which = np.repeat(np.arange(len(length)), count)
    nth = np.arange(len(which)) - np.repeat(np.cumsum(count) - count, count)
    x = start[which] + (nth + 0.5) * (length / count)[which]
    for many in (True, False):
        for merged in (False, True):
            keep = (bar["many"][which] == many) & (bar["merged"][which] == merged)
            if keep.any():
                traces.append(
                    _point_trace(
                        cat, color, x[keep], {k: v[which[keep]] for k, v in bar.items()}, many, merged
                    )
                )


def _point_trace(
    cat: str, color: str, x: np.ndarray, bar: dict[str, np.ndarray], many: bool, merged: bool
) -> dict[str, Any]:
    columns = [
        bar["op"],
        bar["stage"],
        bar["mid"],
        (bar["end"] - bar["start"]).round(4),
        bar["slow_rank"],
        bar["slow_ms"],
    ]
    spread = ""
    if many:
        columns += [bar["lo"].round(2), bar["hi"].round(2)]
        spread = " (devices %{customdata[6]:.2f}–%{customdata[7]:.2f})"
    slowest = "longest single operator" if merged else "slowest device"
    return scatter(
        x=compact(x),
        y=bar["y"],
        mode="none",
        hoveron="points",
        hoverlabel={"bgcolor": color},
        customdata=np.column_stack(columns).astype(np.float32),
        meta=shared_text(bar["name"], bar["mix"], bar["pass"], "<br>" + bar["label"], sep=""),
        hovertemplate="%{text}: %{customdata[3]:.3f} ms"
        + spread
        + f"<br>{slowest}: rank %{{customdata[4]}}: %{{customdata[5]:.3f}} ms<extra></extra>",
        name=cat,
        legendgroup=cat,
        showlegend=False,
    )


def _mix_text(mix: list[list[Any]]) -> str:
    """ "collective 62% · compute 38%" for a band of several categories; "" for one of a single category."""
    return " · ".join(f"{c} {100 * f:.0f}%" for c, f in mix) if len(mix) > 1 else ""


def _pass_text(label: str) -> str:
    """ "F3" -> " · micro-batch 3 forward", "B3 c1" -> " · micro-batch 3 backward (chunk 1)", "" -> ""."""
    if not label:
        return ""
    mb, _, chunk = label[1:].partition(" c")
    return f" · micro-batch {mb} {'forward' if label[0] == 'F' else 'backward'}" + (
        f" (chunk {chunk})" if chunk else ""
    )


def _p2p(traces: Traces, shapes: list[dict[str, Any]], data: MareyData, rank_y: dict[int, float]) -> None:
    lx: list[Any] = []
    ly: list[Any] = []
    wx: list[Any] = []
    wy: list[Any] = []
    for p in data["p2p"]:
        if p["src"] in rank_y and p["dst"] in rank_y:
            lx += [p["send_ms"], p["recv_ms"], None]
            ly += [rank_y[p["src"]], rank_y[p["dst"]], None]
            if p["wait_ms"] > 0:
                wx += [p["recv_start_ms"], p["recv_start_ms"] + p["wait_ms"], None]
                wy += [rank_y[p["dst"]], rank_y[p["dst"]], None]
    # One path each (``polylines``): a line trace drew every send/recv pair as an SVG node of its own.
    pairs = {"color": "#37474f", "width": 1}
    add_polylines(traces, lx, ly, pairs, "send → recv (micro-batch)", shapes=shapes, opacity=0.6)
    add_polylines(traces, wx, wy, {"color": palette.WAIT, "width": 4}, "receiver waiting", shapes=shapes)


def _anomalies(
    traces: Traces, shapes: list[dict[str, Any]], data: MareyData, row_y: list[list[float]]
) -> list[dict[str, Any]]:
    """The paper's anomaly marks: a red mark at the left of each row holding an anomalous device, and a red
    outline around the row; the top finding (``data["focus"]``) marked in its own terms, its reason written on the
    graph: a whole stage's rows outlined together, a named rank's row with why (the notes returned, for the
    figure's annotations set at once: plotly checks every annotation again each time one is added, 90 ms of a
    1024-rank zoom's 200 for 16 notes)."""
    ys, text, notes = [], [], []
    x0 = data["window_ms"][0]
    focus = data.get("focus") or {}
    named = set(focus.get("ranks") or [])
    reasons = {int(r): t for r, t in (focus.get("reasons") or {}).items()}
    for st, rows in zip(data["stages"], row_y, strict=True):
        if focus.get("stage") is not None and st["stage"] == focus["stage"] and rows:
            shapes.append(
                {
                    "type": "rect",
                    "xref": "paper",
                    "x0": 0,
                    "x1": 1,
                    "y0": rows[0] - 0.55,
                    "y1": rows[-1] + 0.55,
                    "line": {"color": ANOMALY, "width": 2.5},
                    "fillcolor": "rgba(198,40,40,0.05)",
                    "layer": "below",
                }
            )
            notes.append(_note(rows[0] - 0.5, f"⚠ {focus.get('headline') or 'stage ' + str(st['stage'])}"))
        for row, y in zip(st["rows"], rows, strict=True):
            mine = [r for r in row["ranks"] if r in named]
            if mine and focus.get("stage") is None and len(mine) == len(row["ranks"]):
                why = reasons.get(mine[0], str(focus.get("kind") or "").replace("_", " "))
                notes.append(_note(y - HALF, f"⚠ {row['label']}: {why}"))
            if row["anomalous"]:
                ys.append(y)
                more = (
                    f"<br>… {len(row['anomalous']) - len(row.get('why', []))} more"
                    if len(row["anomalous"]) > len(row.get("why", []))
                    else ""
                )
                text.append(
                    "<b>anomalous</b> (stands out from its stage, or named by the top finding)<br>"
                    + "<br>".join(row.get("why", []))
                    + more
                )
                shapes.append(
                    {
                        "type": "rect",
                        "xref": "paper",
                        "x0": 0,
                        "x1": 1,
                        "y0": y - 0.5,
                        "y1": y + 0.5,
                        "line": {"color": ANOMALY, "width": 1.5},
                        "fillcolor": "rgba(198,40,40,0.06)",
                        "layer": "below",
                    }
                )
    if ys:
        traces.append(
            scatter(
                x=[x0] * len(ys),
                y=ys,
                mode="markers",
                marker={"symbol": "triangle-right", "size": 13, "color": ANOMALY},
                hovertext=text,
                hovertemplate="%{hovertext}<extra></extra>",
                name="anomalous device",
                cliponaxis=False,
            )
        )
    return notes


def _note(y: float, text: str) -> dict[str, Any]:
    """A red note at the right end of a row, above its bars: why the row is marked, readable without a hover."""
    return {
        "xref": "paper",
        "x": 0.995,
        "y": y,
        "yref": "y",
        "xanchor": "right",
        "yanchor": "bottom",
        "text": f"<b>{text}</b>",
        "showarrow": False,
        "font": {"color": ANOMALY, "size": 11},
        "bgcolor": "rgba(255,255,255,0.85)",
        "borderpad": 1,
    }


def critical_path_trace(path: list[PathPiece], rank_y: dict[int, float]) -> dict[str, Any]:
    """The critical path as one thick line: along the row of each rank it passes for as long as it stays there,
    jumping to the next rank where that rank released it; the hover names kind, rank, operator and duration."""
    xs: list[float] = []
    ys: list[float] = []
    text: list[str] = []
    for p in (p for p in path if p["rank"] in rank_y):
        what = f"critical path · {p['kind']} · rank {p['rank']}" + (
            f"<br>{short_name(p['operator'], 60)}" if p["operator"] else ""
        )
        many = f" ({p['segments']} segments)" if p.get("segments", 1) > 1 else ""
        hover = f"{what}<br>{p['end_ms'] - p['start_ms']:.3f} ms{many}"
        xs += [p["start_ms"], p["end_ms"]]
        ys += [rank_y[p["rank"]]] * 2
        text += [hover, hover]
    return scatter(
        x=compact(np.array(xs, dtype=np.float64)),
        y=np.array(ys, dtype=np.float32),
        mode="lines",
        line={"color": palette.CRITICAL_PATH, "width": 4},
        opacity=0.85,
        hovertext=np.array(text, dtype=object),
        hovertemplate="%{hovertext}<extra></extra>",
        name="critical path",
    )


def highlight(data: MareyData, selected: tuple[Any, ...] | None) -> dict[str, Any]:
    """The outline of the selected instance (or instances) as one path shape named "selected operator"; always
    the figure's last shape, hidden when nothing is selected, so a new selection replaces it alone (a ``Patch``).
    A shape, not a trace: plotly redraws a changed shape alone, where a changed trace has it compute every trace
    again (70-100 ms of a 256-rank graph's redraw per click)."""
    row_y = rows_of(data)[0]
    op, stage, at = (*(selected or (None,)), None, None)[:3]
    parts = []
    for st, ys in zip(data["stages"], row_y, strict=True):
        if op is None or (stage is not None and st["stage"] != stage):
            continue
        mine = np.flatnonzero([name == op for name in st["operator"]])
        if not len(mine):
            continue
        starts, ends = _arrays(st, "start")[mine], _arrays(st, "end")[mine]
        if at is not None:
            far = np.maximum(np.maximum(starts.min(axis=1) - at, at - ends.max(axis=1)), 0.0)
            keep = [int(np.argmin(far))]
            starts, ends = starts[keep], ends[keep]
        for j, y in enumerate(ys):
            parts.append(_rects(starts[:, j], ends[:, j], y, half=HALF * 1.3, closed=True))
    outline = _joined(parts)
    # Not in the legend (the panel's help line says what the outline is): plotly computes a figure again when a
    # shape of its legend changes (80-130 ms of a click), and draws a shape that is not in it alone (3-8 ms).
    drawn = polylines(
        outline["x"],
        outline["y"],
        {"color": palette.HIGHLIGHT, "width": 2.5},
        HIGHLIGHT_NAME,
        showlegend=False,
    )
    return drawn or {"type": "path", "path": "M0,0", "name": HIGHLIGHT_NAME, "visible": False}
