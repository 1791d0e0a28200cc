"""The execution-flow graph: one row per stage, nodes in execution order, coloured by measured time or imbalance;
communication nodes drawn by role, send/recv pairs joining the stages."""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from paradiag.app import palette
from paradiag.app.data.shapes import FlowData, FlowNode, FlowStage, FlowStrategy, P2PPair
from paradiag.app.figures.common import add_polylines, base_figure, empty_figure, short_name

SHARDED = "#00838f"  # outline of a node holding an operator split across devices (parallel_strategy)
CULPRIT = "#c62828"
SYMBOL = {
    "compute": "circle",
    "collective": "diamond",
    "send": "triangle-right",
    "recv": "triangle-left",
    "memory": "circle",
    "block": "square",
}


def flow_figure(
    data: FlowData,
    color_by: str = "imbalance",
    p2p: list[P2PPair] | None = None,
    selected: tuple[Any, ...] | None = None,
) -> go.Figure:
    """``selected``: (operator, stage or None[, at ms or None]). Colour: each computing node's imbalance over the
    devices of its stage (max / median), or its measured time; communication nodes are grey (their time, and its
    spread over the devices, is mostly waiting; the hover gives both). The stage the top finding is about is emphasised; a stage's hottest node is labelled with its time and its most
    imbalanced one with its imbalance (the others on hover)."""
    if not data["stages"] or not any(st["nodes"] for st in data["stages"]):
        return empty_figure("no operators in this step", height=240)
    fig = base_figure(height=140 + 70 * len(data["stages"]), uirevision=f"flow|{data['step']}")
    xs, ys, colors, sizes, symbols, text, custom, labels = [], [], [], [], [], [], [], []
    outline_color: list[str] = []
    outline_width: list[float] = []
    ex: list[Any] = []
    ey: list[Any] = []
    for st in data["stages"]:
        y = st["stage"]
        label_at = _label_nodes(st["nodes"])
        # The stage's nodes joined in order: one polyline per stage (a line trace draws each piece between two
        # gaps as an SVG node of its own: one per edge, when each edge was a piece).
        ex += [*range(len(st["nodes"])), None]
        ey += [y] * len(st["nodes"]) + [None]
        for i, n in enumerate(st["nodes"]):
            xs.append(i)
            ys.append(y)
            computing = n["kind"] in ("compute", "memory", "block")
            colors.append((n["time_ms"] if color_by == "time" else n["imbalance"]) if computing else None)
            sizes.append(9 + min(9, 3 * n["time_ms"] ** 0.5) + (3 if n["kind"] == "block" else 0))
            symbols.append(SYMBOL.get(n["kind"], "circle"))
            text.append(_hover(n, st))
            custom.append([n["operators"][0], y, n["span_ms"], n.get("key", "")])
            labels.append(label_at.get(i, ""))
            outline_color.append(SHARDED if n.get("sharded") else "#555")
            outline_width.append(2.5 if n.get("sharded") else 0.6)
    _culprit(fig, data)
    fig.add_trace(
        go.Scatter(
            x=np.array(ex, dtype=np.float64),
            y=np.array(ey, dtype=np.float64),
            mode="lines",
            line={"color": "#b0bec5", "width": 1},
            hoverinfo="skip",
            showlegend=False,
        )
    )
    _p2p_edges(fig, data, p2p or [])
    grey = np.array([c is None for c in colors])
    scale = (
        {"cmin": 1.0, "cmax": max(1.5, max(c for c in colors if c is not None))}
        if color_by != "time" and not grey.all()
        else {}
    )
    fig.add_trace(
        go.Scatter(
            x=np.array(xs, dtype=np.int32),
            y=np.array(ys, dtype=np.int32),
            mode="markers+text",
            text=np.array(labels, dtype=object),
            textposition="top center",
            textfont={"size": 10},
            marker={
                "color": [c if c is not None else np.nan for c in colors],
                "size": sizes,
                "symbol": symbols,
                "colorscale": palette.HEAT_SCALE,
                **scale,
                "line": {"width": outline_width, "color": outline_color},
                "colorbar": {
                    "title": {"text": "ms" if color_by == "time" else "max/median", "side": "right"},
                    "thickness": 10,
                },
            },
            customdata=np.array(custom, dtype=object),
            hovertext=np.array(text, dtype=object),
            hovertemplate="%{hovertext}<extra></extra>",
            showlegend=False,
            name="operators",
        )
    )
    if grey.any():
        fig.add_trace(
            go.Scatter(
                x=np.array(xs)[grey],
                y=np.array(ys)[grey],
                mode="markers",
                marker={
                    "color": "#cfd8dc",
                    "size": np.array(sizes)[grey],
                    "symbol": np.array(symbols, dtype=object)[grey],
                    "line": {"width": 0.6, "color": "#555"},
                },
                hoverinfo="skip",
                showlegend=False,
                name="communication (time mostly waiting)",
            )
        )
    _shape_legend(fig)
    if data.get("strategy"):
        _strategy_legend(fig, data["strategy"])
    fig.add_trace(ring(data, selected))
    fig.update_layout(
        yaxis={
            "tickvals": [st["stage"] for st in data["stages"]],
            "ticktext": [_stage_tick(st, data) for st in data["stages"]],
            "autorange": "reversed",
            "range": None,
            "zeroline": False,
            "showgrid": False,
        },
        xaxis={
            "title": "execution order (repeated layers and micro-batches collapsed; click a ▪ block to open it)",
            "showgrid": False,
            "zeroline": False,
        },
        margin={"l": 90},
        hovermode="closest",
        legend={"x": 0, "xanchor": "left"},
    )
    return fig


# Labelled nodes closer than this (in execution order) would write over each other: the second is left to the hover.
LABEL_APART = 4


def _label_nodes(nodes: list[FlowNode]) -> dict[int, str]:
    """The nodes of a stage that get a label, and their labels: its hottest computing node (the most measured
    time: "name · 3.2 ms") and its most imbalanced one when notably so ("name · 1.6x"), unless too close to
    the first to be read apart."""
    computing = [k for k, n in enumerate(nodes) if n["kind"] in ("compute", "memory", "block")]
    if not computing:
        return {}
    hot = max(computing, key=lambda k: nodes[k]["time_ms"])
    out = {hot: f"{short_name(nodes[hot]['label'], 28)} · {nodes[hot]['time_ms']:.1f} ms"}
    worst = max(computing, key=lambda k: nodes[k]["imbalance"])
    if nodes[worst]["imbalance"] > 1.25:
        if worst == hot:
            out[hot] += f" · {nodes[hot]['imbalance']:.2f}x"
        elif abs(worst - hot) >= LABEL_APART:
            out[worst] = f"{short_name(nodes[worst]['label'], 28)} · {nodes[worst]['imbalance']:.2f}x"
    return out


def _stage_tick(st: FlowStage, data: FlowData) -> str:
    return (
        f"<span style='color:{CULPRIT}'><b>stage {st['stage']} ⚠</b></span>"
        if st["stage"] == data.get("culprit_stage")
        else f"stage {st['stage']}"
    )


def _culprit(fig: go.Figure, data: FlowData) -> None:
    """A band behind the row of the stage the top finding is about."""
    stage = data.get("culprit_stage")
    if stage is not None and any(st["stage"] == stage for st in data["stages"]):
        fig.add_hrect(
            y0=stage - 0.4,
            y1=stage + 0.4,
            fillcolor="rgba(198,40,40,0.08)",
            line={"color": CULPRIT, "width": 1},
            layer="below",
        )


def _shape_legend(fig: go.Figure) -> None:
    for kind, name in (
        ("compute", "compute"),
        ("collective", "collective"),
        ("send", "send"),
        ("recv", "receive"),
        ("block", "repeated block"),
    ):
        fig.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="markers",
                marker={
                    "symbol": SYMBOL[kind],
                    "size": 10,
                    "color": "#90a4ae",
                    "line": {"width": 0.6, "color": "#555"},
                },
                name=name,
                showlegend=True,
                hoverinfo="skip",
            )
        )


def _hover(n: FlowNode, st: FlowStage) -> str:
    shards = (
        f"stage {st['stage']} · ranks {', '.join(map(str, st['ranks'][:8]))}{' …' if len(st['ranks']) > 8 else ''}"
        + (f" (TP {st['tp']} × DP {st['dp']})" if len(st["ranks"]) > 1 else "")
    )
    ops = "<br>".join(short_name(o, 60) for o in dict.fromkeys(n["operators"][:6]))
    strategy = ("<br>strategy: " + "<br>  ".join(n["strategy"])) if n.get("strategy") else ""
    return f"<b>{n['label']}</b> ({n['kind']})<br>{n['time_ms']:.3f} ms median · imbalance {n['imbalance']:.2f} (slowest rank {n['slowest_rank']})<br>{shards}<br>{ops}{strategy}"


def _strategy_legend(fig: go.Figure, info: FlowStrategy) -> None:
    """A legend entry for the sharded-node outline, naming the strategy files read (and those that were not)."""
    files = info.get("files", [])
    name = f"sharded (parallel_strategy, {len(files)} file{'s' if len(files) != 1 else ''})"
    problems = info.get("problems", [])
    hover = "<br>".join(
        [
            "read: " + ", ".join(files[:8]) if files else "no readable parallel_strategy file",
            *(f"not read: {p}" for p in problems[:4]),
        ]
    )
    fig.add_trace(
        go.Scatter(
            x=[None],
            y=[None],
            mode="markers",
            marker={
                "size": 12,
                "symbol": "circle-open",
                "color": SHARDED,
                "line": {"width": 2.5, "color": SHARDED},
            },
            name=name,
            hovertext=hover,
            showlegend=True,
        )
    )


def _p2p_edges(fig: go.Figure, data: FlowData, p2p: list[P2PPair]) -> None:
    """A send/recv pair joins the node holding the send on one stage to the node holding the receive."""
    stage_of = {r: st["stage"] for st in data["stages"] for r in st["ranks"]}
    heads = {st["ranks"][0] for st in data["stages"] if st["ranks"]}  # the devices of a stage send alike
    spans: dict[int | None, tuple[np.ndarray, np.ndarray, np.ndarray]] = {
        st["stage"]: _comm_spans(st) for st in data["stages"]
    }
    edges: dict[tuple[Any, ...], None] = {}
    for p in (p for p in p2p if p["src"] in heads or p["dst"] in heads):
        src, dst = stage_of.get(p["src"]), stage_of.get(p["dst"])
        a = _node_at(spans.get(src), p["send_ms"])
        b = _node_at(spans.get(dst), p["recv_ms"])
        if a is not None and b is not None:
            edges[(a, src, b, dst)] = None
    ex = [v for a, src, b, _ in edges for v in (a, b, None)]
    ey = [v for _, src, _, dst in edges for v in (src, dst, None)]
    # One path for all (``add_polylines``), not an SVG node per pair.
    add_polylines(
        fig,
        np.array(ex, dtype=np.float64),
        np.array(ey, dtype=np.float64),
        {"color": palette.CATEGORY["send"], "width": 1, "dash": "dot"},
        "send → recv",
    )


def _comm_spans(st: FlowStage) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(index, start, end) of the stage's nodes that can hold a send or receive, in start order."""
    idx = [i for i, n in enumerate(st["nodes"]) if n["kind"] in ("send", "recv", "block")]
    lo = np.array([st["nodes"][i]["span_ms"][0] for i in idx], dtype=np.float64)
    hi = np.array([st["nodes"][i]["span_ms"][1] for i in idx], dtype=np.float64)
    order = np.argsort(lo, kind="stable")
    return np.array(idx, dtype=np.int64)[order], lo[order], hi[order]


def _node_at(spans: tuple[np.ndarray, np.ndarray, np.ndarray] | None, t: float) -> int | None:
    """The first node (in execution order) whose span holds ``t``."""
    if spans is None:
        return None
    idx, lo, hi = spans
    holding = np.flatnonzero(
        (lo[: np.searchsorted(lo, t, side="right")] <= t) & (hi[: np.searchsorted(lo, t, side="right")] >= t)
    )
    return int(idx[holding].min()) if len(holding) else None


def ring(data: FlowData, selected: tuple[Any, ...] | None) -> go.Scatter:
    """Rings on the nodes holding the selected operator; when one instance was picked (``at``, ms), only the node
    whose span holds it (or the nearest). Always the figure's last trace (empty when nothing is selected), so a
    new selection replaces it alone (a ``Patch``)."""
    op, stage, at = (*(selected or (None,)), None, None)[:3]
    found = [
        (i, st["stage"], n["span_ms"])
        for st in data["stages"]
        if stage is None or st["stage"] == stage
        for i, n in enumerate(st["nodes"])
        if op is not None and op in n["operators"]
    ]
    if at is not None and found:
        found = [min(found, key=lambda f: max(f[2][0] - at, at - f[2][1], 0.0))]
    marker = {"size": 30, "symbol": "circle-open", "color": palette.HIGHLIGHT, "line": {"width": 3}}
    return go.Scatter(
        x=[f[0] for f in found],
        y=[f[1] for f in found],
        mode="markers",
        marker=marker,
        name="selected",
        hoverinfo="skip",
        showlegend=bool(found),
    )
