"""Marey's graph: stages as stations top to bottom (expandable to devices), time across; each operator instance a
band across its stage's devices (a rectangle on each device joined to the next by a trapezoid); send/recv pairs
drawn as lines between stages, so that micro-batches, the pipeline schedule and its bubbles show."""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from paradiag.app import palette
from paradiag.app.figures.common import base_figure, compact, empty_figure, short_name

HALF = 0.32  # half the height of a station


def rows_of(data: dict[str, Any], expanded: bool) -> tuple[dict[int, float], dict[int, float], list[tuple[float, str]]]:
    """y of each stage row and of each device (rank) row, and the tick labels."""
    stage_y: dict[int, float] = {}
    rank_y: dict[int, float] = {}
    ticks: list[tuple[float, str]] = []
    y = 0.0
    for st in data["stages"]:
        stage_y[st["stage"]] = y
        ticks.append((y, f"stage {st['stage']}"))
        for rank in st["ranks"]:
            if expanded:
                y += 1
                ticks.append((y, f"  rank {rank}"))
            rank_y[rank] = y if expanded else stage_y[st["stage"]]
        y += 1.6
    return stage_y, rank_y, ticks


def marey_figure(data: dict[str, Any], expanded: bool = True, selected_op: str | None = None, uirevision: Any = None) -> go.Figure:
    if not data["stages"] or not any(len(st["start"]) for st in data["stages"]):
        return empty_figure("no device work in this step", height=300)
    stage_y, rank_y, ticks = rows_of(data, expanded)
    fig = base_figure(uirevision=uirevision, height=int(110 + 24 * (max(ticks)[0] + 1)))
    _bubbles(fig, data, stage_y, rank_y, expanded)
    polys: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {c: [] for c in palette.CATEGORY}
    spread: list[tuple[np.ndarray, np.ndarray]] = []
    for st in data["stages"]:
        if not len(st["start"]):
            continue
        starts, ends = np.asarray(st["start"], dtype=np.float64), np.asarray(st["end"], dtype=np.float64)
        ys = np.array([rank_y[r] for r in st["ranks"]], dtype=np.float64)
        y = stage_y[st["stage"]]
        med_s, med_e = _median_device(starts, ends)
        cats = np.array(st["category"], dtype=object)
        for cat in dict.fromkeys(st["category"]):
            mine = cats == cat
            if expanded:
                polys.setdefault(cat, []).append(_bands(starts[mine], ends[mine], ys))
            polys.setdefault(cat, []).append(_rects(med_s[mine], med_e[mine], y))
        spread.append(_rects(starts.min(axis=1), ends.max(axis=1), y, half=HALF * 0.45))
    fig.add_trace(go.Scatter(**_joined(spread), fill="toself", mode="none", fillcolor="rgba(120,144,156,0.35)", name="spread over devices", hoverinfo="skip"))
    for cat, parts in polys.items():
        if parts:
            color = palette.CATEGORY.get(cat, "#888")
            fig.add_trace(go.Scatter(**_joined(parts), fill="toself", mode="lines", line={"width": 0.5, "color": color}, fillcolor=color, opacity=0.75, name=cat, hoverinfo="skip"))
    _p2p(fig, data, rank_y)
    _markers(fig, data, stage_y)
    if selected_op:
        _highlight(fig, data, stage_y, rank_y, expanded, selected_op)
    fig.update_yaxes(tickvals=[t[0] for t in ticks], ticktext=[t[1] for t in ticks], autorange="reversed", showgrid=False, zeroline=False, fixedrange=True)
    fig.update_xaxes(title=f"time since job start (ms) · step {data['step']}", range=data["window_ms"], showgrid=True)
    fig.update_layout(dragmode="zoom", hovermode="closest", margin={"l": 80, "t": 40}, legend={"font": {"size": 10}, "y": 1.0, "yanchor": "bottom"})
    return fig


def _median_device(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per band, the median device's start and end (what the stage row draws)."""
    mid = starts.shape[1] // 2
    return np.sort(starts, axis=1)[:, mid], np.sort(ends, axis=1)[:, mid]


def _joined(parts: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
    """x and y of one trace drawing all ``parts``."""
    if not parts:
        return {"x": np.array([]), "y": np.array([])}
    return {"x": compact(np.concatenate([p[0] for p in parts])), "y": np.concatenate([p[1] for p in parts]).astype(np.float32)}


def _rects(a: np.ndarray, b: np.ndarray, y: float | np.ndarray, half: float = HALF) -> tuple[np.ndarray, np.ndarray]:
    """Closed rectangles [a, b] x [y - half, y + half], NaN-separated (one polygon each)."""
    n = len(a)
    y = np.broadcast_to(np.asarray(y, dtype=np.float64), (n,))
    gap = np.full(n, np.nan)
    xs = np.column_stack([a, b, b, a, a, gap]).ravel()
    ys = np.column_stack([y - half, y - half, y + half, y + half, y - half, gap]).ravel()
    return xs, ys


def _bands(starts: np.ndarray, ends: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One polygon per band (row of ``starts``/``ends``, one column per device at height ``ys``): down the left
    edges on each device, back up the right edges, closed, NaN-separated."""
    n = len(starts)
    edge_y = np.column_stack([ys - HALF, ys + HALF]).ravel()
    left_x = np.repeat(starts, 2, axis=1)
    right_x = np.repeat(ends, 2, axis=1)[:, ::-1]
    gap = np.full((n, 1), np.nan)
    xs = np.hstack([left_x, right_x, starts[:, :1], gap]).ravel()
    row_y = np.r_[edge_y, edge_y[::-1], edge_y[0], np.nan]
    return xs, np.tile(row_y, n)


def _bubbles(fig: go.Figure, data: dict[str, Any], stage_y: dict[int, float], rank_y: dict[int, float], expanded: bool) -> None:
    parts = []
    for st in data["stages"]:
        for rank, gaps in zip(st["ranks"], st["bubbles"], strict=True):
            if gaps:
                span = np.asarray(gaps, dtype=np.float64)
                parts.append(_rects(span[:, 0], span[:, 1], rank_y[rank] if expanded else stage_y[st["stage"]], half=HALF * 1.25))
    if parts:
        fig.add_trace(go.Scatter(**_joined(parts), fill="toself", mode="none", fillcolor="rgba(189,189,189,0.35)", fillpattern={"shape": "/", "fgcolor": "#9e9e9e", "size": 6}, name="bubble (no compute)", hoverinfo="skip"))


def _p2p(fig: go.Figure, data: dict[str, Any], rank_y: dict[int, float]) -> None:
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
    if lx:
        fig.add_trace(go.Scatter(x=lx, y=ly, mode="lines", line={"color": "#37474f", "width": 1.2}, name="send → recv (micro-batch)", hoverinfo="skip"))
    if wx:
        fig.add_trace(go.Scatter(x=wx, y=wy, mode="lines", line={"color": palette.WAIT, "width": 4}, name="receiver waiting", hoverinfo="skip"))


def _markers(fig: go.Figure, data: dict[str, Any], stage_y: dict[int, float]) -> None:
    """One clickable marker per band on its stage row (hover names the operator; click selects it)."""
    xs, ys, custom, text, colors = [], [], [], [], []
    for st in data["stages"]:
        if not len(st["start"]):
            continue
        starts, ends = np.asarray(st["start"], dtype=np.float64), np.asarray(st["end"], dtype=np.float64)
        med_s, med_e = _median_device(starts, ends)
        first, last = starts.min(axis=1), ends.max(axis=1)
        xs.append((med_s + med_e) / 2)
        ys += [stage_y[st["stage"]]] * len(starts)
        for i, cat in enumerate(st["category"]):
            custom.append([st["operator"][i], st["stage"]])
            text.append(f"{short_name(st['label'][i], 70)}<br>{cat} · stage {st['stage']}<br>devices: {first[i]:.3f}–{last[i]:.3f} ms")
            colors.append(palette.CATEGORY.get(cat, "#888"))
    marker = {"size": 7, "color": np.array(colors, dtype=object), "line": {"width": 0.5, "color": "#fff"}, "opacity": 0.9}
    fig.add_trace(go.Scatter(x=compact(np.concatenate(xs)), y=np.array(ys, dtype=np.float32), mode="markers", marker=marker, customdata=np.array(custom, dtype=object), text=np.array(text, dtype=object), hovertemplate="%{text}<extra></extra>", name="operator", showlegend=False))


def _highlight(fig: go.Figure, data: dict[str, Any], stage_y: dict[int, float], rank_y: dict[int, float], expanded: bool, op: str) -> None:
    parts = []
    for st in data["stages"]:
        mine = np.array([name == op for name in st["operator"]], dtype=bool)
        if not mine.any():
            continue
        starts, ends = np.asarray(st["start"], dtype=np.float64)[mine], np.asarray(st["end"], dtype=np.float64)[mine]
        if expanded:
            parts.append(_bands(starts, ends, np.array([rank_y[r] for r in st["ranks"]], dtype=np.float64)))
        parts.append(_rects(starts.min(axis=1), ends.max(axis=1), stage_y[st["stage"]], half=HALF * 1.3))
    if parts:
        fig.add_trace(go.Scatter(**_joined(parts), mode="lines", line={"color": palette.HIGHLIGHT, "width": 2}, name="selected operator", hoverinfo="skip"))
