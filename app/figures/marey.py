"""Marey's graph: stages as stations top to bottom (expandable to devices), time across; each operator instance a
band across its stage's devices (a rectangle on each device joined to the next by a trapezoid); send/recv pairs
drawn as lines between stages, so that micro-batches, the pipeline schedule and its bubbles show."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from paradiag.app import palette
from paradiag.app.figures.common import base_figure, empty_figure, short_name

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
    if not data["stages"] or not any(st["start"] for st in data["stages"]):
        return empty_figure("no device work in this step", height=300)
    stage_y, rank_y, ticks = rows_of(data, expanded)
    fig = base_figure(uirevision=uirevision, height=int(110 + 24 * (max(ticks)[0] + 1)))
    _bubbles(fig, data, stage_y, rank_y, expanded)
    polys: dict[str, tuple[list[Any], list[Any]]] = {c: ([], []) for c in palette.CATEGORY}
    spread: tuple[list[Any], list[Any]] = ([], [])
    for st in data["stages"]:
        ys = [rank_y[r] for r in st["ranks"]]
        for i, cat in enumerate(st["category"]):
            px, py = polys.setdefault(cat, ([], []))
            if expanded:
                _band(px, py, st["start"][i], st["end"][i], ys)
            starts, ends = sorted(st["start"][i]), sorted(st["end"][i])
            med = len(starts) // 2
            _rect(px, py, starts[med], ends[med], stage_y[st["stage"]])
            _rect(spread[0], spread[1], starts[0], ends[-1], stage_y[st["stage"]], half=HALF * 0.45)
    fig.add_trace(go.Scatter(x=spread[0], y=spread[1], fill="toself", mode="none", fillcolor="rgba(120,144,156,0.35)", name="spread over devices", hoverinfo="skip"))
    for cat, (px, py) in polys.items():
        if px:
            fig.add_trace(go.Scatter(x=px, y=py, fill="toself", mode="lines", line={"width": 0.5, "color": palette.CATEGORY[cat]}, fillcolor=palette.CATEGORY[cat], opacity=0.75, name=cat, hoverinfo="skip"))
    _p2p(fig, data, rank_y)
    _markers(fig, data, stage_y)
    if selected_op:
        _highlight(fig, data, stage_y, rank_y, expanded, selected_op)
    fig.update_yaxes(tickvals=[t[0] for t in ticks], ticktext=[t[1] for t in ticks], autorange="reversed", showgrid=False, zeroline=False, fixedrange=True)
    fig.update_xaxes(title=f"time since job start (ms) · step {data['step']}", range=data["window_ms"], showgrid=True)
    fig.update_layout(dragmode="zoom", hovermode="closest", margin={"l": 80, "t": 40}, legend={"font": {"size": 10}, "y": 1.0, "yanchor": "bottom"})
    return fig


def _rect(px: list[Any], py: list[Any], a: float, b: float, y: float, half: float = HALF) -> None:
    px += [a, b, b, a, a, None]
    py += [y - half, y - half, y + half, y + half, y - half, None]


def _band(px: list[Any], py: list[Any], starts: list[float], ends: list[float], ys: list[float]) -> None:
    """One polygon: down the left edges of the band on each device, back up the right edges."""
    left_x, left_y = [], []
    for s, y in zip(starts, ys, strict=True):
        left_x += [s, s]
        left_y += [y - HALF, y + HALF]
    right_x, right_y = [], []
    for e, y in zip(ends, ys, strict=True):
        right_x += [e, e]
        right_y += [y - HALF, y + HALF]
    px += [*left_x, *right_x[::-1], left_x[0], None]
    py += [*left_y, *right_y[::-1], left_y[0], None]


def _bubbles(fig: go.Figure, data: dict[str, Any], stage_y: dict[int, float], rank_y: dict[int, float], expanded: bool) -> None:
    px: list[Any] = []
    py: list[Any] = []
    for st in data["stages"]:
        for rank, gaps in zip(st["ranks"], st["bubbles"], strict=True):
            for a, b in gaps:
                _rect(px, py, a, b, rank_y[rank] if expanded else stage_y[st["stage"]], half=HALF * 1.25)
    if px:
        fig.add_trace(go.Scatter(x=px, y=py, fill="toself", mode="none", fillcolor="rgba(189,189,189,0.35)", fillpattern={"shape": "/", "fgcolor": "#9e9e9e", "size": 6}, name="bubble (no compute)", hoverinfo="skip"))


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
        for i, cat in enumerate(st["category"]):
            starts, ends = sorted(st["start"][i]), sorted(st["end"][i])
            xs.append((starts[len(starts) // 2] + ends[len(ends) // 2]) / 2)
            ys.append(stage_y[st["stage"]])
            custom.append([st["operator"][i], st["stage"], st["label"][i][:200]])
            text.append(f"{short_name(st['label'][i], 70)}<br>{cat} · stage {st['stage']}<br>devices: {starts[0]:.3f}–{ends[-1]:.3f} ms")
            colors.append(palette.CATEGORY.get(cat, "#888"))
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", marker={"size": 7, "color": colors, "line": {"width": 0.5, "color": "#fff"}, "opacity": 0.9}, customdata=custom, text=text, hovertemplate="%{text}<extra></extra>", name="operator", showlegend=False))


def _highlight(fig: go.Figure, data: dict[str, Any], stage_y: dict[int, float], rank_y: dict[int, float], expanded: bool, op: str) -> None:
    px: list[Any] = []
    py: list[Any] = []
    for st in data["stages"]:
        for i, name in enumerate(st["operator"]):
            if name == op:
                if expanded:
                    _band(px, py, st["start"][i], st["end"][i], [rank_y[r] for r in st["ranks"]])
                _rect(px, py, min(st["start"][i]), max(st["end"][i]), stage_y[st["stage"]], half=HALF * 1.3)
    if px:
        fig.add_trace(go.Scatter(x=px, y=py, mode="lines", line={"color": palette.HIGHLIGHT, "width": 2}, name="selected operator", hoverinfo="skip"))
