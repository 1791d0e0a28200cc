"""The Gantt timeline: one row per rank and stream, intervals coloured by kind, collectives linked across ranks;
alike ranks folded into a row per lane with their spread; the critical path outlined over them."""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from paradiag.app import palette
from paradiag.app.data.shapes import (
    Bars,
    CollectiveLink,
    FoldedIntervals,
    Intervals,
    MergedIntervals,
    PathSegments,
    TimelineData,
    TimelineRow,
    Waits,
)
from paradiag.app.figures.common import (
    Traces,
    add_filled,
    add_polylines,
    assembled,
    base_layout,
    boxes_path,
    compact,
    empty_figure,
    scatter,
    shared_text,
)

ROW_PX = 22
SEPARATOR = "#999"  # the line between two ranks' (or folds') rows
TOP_PX, BOTTOM_PX, LEGEND_PX = (
    84,
    12,
    50,
)  # margins (the time axis is on top) and the legend's height above the area


def timeline_figure(data: TimelineData, uirevision: Any = None, marked: list[int] | None = None) -> go.Figure:
    """``data`` as ``timeline_data`` returns it. One filled path shape per kind (its bars, ``add_filled``), one
    trace of undrawn points per kind for hover and click, the waits likewise, one path of collective links. Plain SVG traces, not
    WebGL: a WebGL canvas costs the browser in proportion to its pixels (and headless or GPU-less browsers draw
    it in software), so a tall timeline (a folded heatmap row's eight ranks) took seconds to draw. The rows
    of the ``marked`` ranks (the selection, or the ranks a finding blames) are shaded and their names bold."""
    rows = data["rows"]
    if not rows:
        return empty_figure("no device events for these ranks in this window", height=220)
    height = TOP_PX + BOTTOM_PX + 20 + ROW_PX * len(rows)
    width = max(3.0, min(16.0, ROW_PX * 0.7))
    traces: Traces = []  # the figure is built once, unchecked (``common.assembled``)
    shapes: list[dict[str, Any]] = []  # the bars, in drawing order
    path = data.get("path")
    if path and path["x0"]:  # under the intervals: what lies on the path gets a thick outline
        _bars(traces, shapes, path, palette.CRITICAL_PATH, width + 7, "critical path", legendgroup="path")
    for kind, spans in data.get("folded", {}).items():
        _add_folded(traces, shapes, kind, spans, width, legend=kind not in data["kinds"])
    for kind, seg in data["kinds"].items():
        _add_intervals(traces, shapes, kind, seg, palette.KIND[kind], width)
    waits = data["waits"]
    if waits["x0"]:
        _add_intervals(traces, shapes, "wait", waits, palette.WAIT, width * 0.45)
    selected = data.get("selected")
    if selected and selected["x0"]:
        _selected(traces, shapes, selected, width)
    if path:
        _path_hover(traces, path, width)
    _handles(traces, rows, data["window_ms"][0])
    if data["links"]:  # one path for all (a line trace drew each instance as an SVG node of its own)
        line = {"color": "rgba(60,60,60,0.45)", "width": 1}
        add_polylines(traces, *_polylines(data["links"]), line, "collective instance", shapes=shapes)
    layout = base_layout(uirevision=uirevision, height=height)
    _axes(layout, rows, data["window_ms"], set(marked or []), path.get("ranks", {}) if path else {}, shapes)
    if data.get("aggregated"):
        layout["annotations"] = [
            {
                "text": f"{data['num_events']:,} events merged to screen resolution: zoom in for single kernels",
                "xref": "paper",
                "yref": "paper",
                "x": 1,
                "y": 1.0,
                "yanchor": "bottom",
                "xanchor": "right",
                "yshift": LEGEND_PX + 4,
                "showarrow": False,
                "font": {"size": 10, "color": "#666"},
            }
        ]
    return assembled(traces, layout)


def _add_folded(
    traces: Traces, shapes: list[dict[str, Any]], kind: str, seg: FoldedIntervals, width: float, legend: bool
) -> None:
    """A fold's instances of one kind: from the earliest start to the latest end over its ranks, light, and the
    median span over it; the hover names the operator and the slowest rank."""
    color = palette.KIND[kind]
    spread: Bars = {"x0": seg["lo"], "x1": seg["hi"], "row": seg["row"]}
    _bars(traces, shapes, spread, _light(color), width, f"{kind} spread", legendgroup=kind, showlegend=False)
    _bars(traces, shapes, seg, color, width * 0.5, kind, legendgroup=kind, showlegend=legend)
    _hover_points(
        traces,
        seg,
        color,
        kind,
        f"{kind} folded",
        meta=shared_text(seg["hover"]),
        customdata=np.column_stack([seg["dur_us"], seg["count"], seg["slow_rank"], seg["slow_us"]]).astype(
            np.float32
        ),
        hovertemplate="%{text} (%{customdata[1]} merged at this zoom)<br>median %{customdata[0]:.1f} µs over the folded ranks · at %{x:.3f} ms"
        "<br>slowest: rank %{customdata[2]}, %{customdata[3]:.1f} µs · light band: earliest start to latest end<extra>"
        + kind
        + "</extra>",
    )


def _handles(traces: Traces, rows: list[TimelineRow], x: float) -> None:
    """A ▸ at the start of each folded row, beside its label: a click on it (or on any of the row's bars) opens
    the fold."""
    folded = [i for i, r in enumerate(rows) if r["rank"] is None]
    if not folded:
        return
    text = np.array([_handle_text(rows[i]) for i in folded], dtype=object)
    traces.append(
        scatter(
            x=np.full(len(folded), x, dtype=np.float64),
            y=np.asarray(folded, dtype=np.int16),
            mode="markers",
            marker={"symbol": "triangle-right", "size": 10, "color": palette.STAGE},
            text=text,
            hovertemplate="%{text}<extra></extra>",
            name="open a fold",
            showlegend=False,
        )
    )


def _handle_text(row: TimelineRow) -> str:
    if row["fold"].endswith(".rest"):
        return f"{row['members']} more ranks (select them to see them one by one)"
    read = row.get("read", row["members"])
    if not read:
        return f"{row['fold']}: {row['members']} ranks folded, none read in this step · click to open"
    common = "" if row.get("instances", 1) else " · they run no operator in common (nothing to fold)"
    part = f" (median and spread over the {read} read)" if read < row["members"] else ""
    return f"{row['fold']}: {row['members']} ranks folded{part}{common} · click to open"


def _light(color: str) -> str:
    r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},0.3)"


def _path_hover(traces: Traces, path: PathSegments, width: float) -> None:
    """The path's hover (kind, rank, operator, duration) and its edges: a line from the rank waited for to the
    rank that waited, at the moment it was released."""
    edges = path["edges"]
    if edges["x"]:
        n = len(edges["x"])
        xs = np.column_stack([edges["x"], edges["x"], np.full(n, np.nan)]).ravel()
        ys = np.column_stack([edges["y0"], edges["y1"], np.full(n, np.nan)]).ravel()
        traces.append(
            scatter(
                x=compact(xs),
                y=ys.astype(np.float32),
                mode="lines",
                line={"color": palette.CRITICAL_PATH, "width": 2.5},
                name="critical path",
                hoverinfo="skip",
                legendgroup="path",
                showlegend=False,
            )
        )
        traces.append(
            scatter(
                x=compact(edges["x"]),
                y=(np.asarray(edges["y0"], dtype=np.float32) + np.asarray(edges["y1"], dtype=np.float32)) / 2,
                mode="none",
                hoveron="points",
                hoverlabel={"bgcolor": palette.CRITICAL_PATH},
                text=np.array(edges["hover"], dtype=object),
                hovertemplate="%{text}<extra>critical path</extra>",
                name="critical path",
                legendgroup="path",
                showlegend=False,
            )
        )
    if path["x0"]:
        _hover_points(
            traces,
            path,
            palette.CRITICAL_PATH,
            "path",
            "critical path",
            text=np.array(path["hover"], dtype=object),
            customdata=np.asarray(path["dur_us"], dtype=np.float32),
            hovertemplate="%{text}<br>%{customdata:.1f} µs on the critical path · at %{x:.3f} ms<extra>critical path</extra>",
        )


def _add_intervals(
    traces: Traces,
    shapes: list[dict[str, Any]],
    name: str,
    seg: Intervals | MergedIntervals | Waits,
    color: str,
    width: float,
) -> None:
    _bars(traces, shapes, seg, color, width, name)
    _hover_points(traces, seg, color, name, name, **_hover(name, seg))


def _bars(
    traces: Traces,
    shapes: list[dict[str, Any]],
    seg: Bars,
    color: str,
    px: float,
    name: str,
    legendgroup: str | None = None,
    showlegend: bool = True,
) -> None:
    """``seg``'s intervals (x0, x1, row) as bars ``px`` pixels high (the rows are ROW_PX apart and the y axis
    does not zoom), all in one filled path (``add_filled``)."""
    row, half = np.asarray(seg["row"], dtype=np.float64), px / 2 / ROW_PX
    path = boxes_path(seg["x0"], seg["x1"], row - half, row + half)
    add_filled(traces, shapes, path, color, name, legendgroup=legendgroup, showlegend=showlegend)


def _hover_points(traces: Traces, seg: Bars, color: str, group: str, name: str, **hover: Any) -> None:
    """Points at the middles of ``seg``'s intervals (x0, x1, row) that carry their hover and click (the filled bars
    drawing the intervals do not answer the mouse: one path holds them all). Drawn as nothing (``mode="none"``), not as transparent
    markers: each marker is an SVG node (2,670 of the 6,721 nodes of a 64-rank timeline), built and styled on
    every redraw; plotly finds the nearest point to hover or click either way."""
    mid = (np.asarray(seg["x0"], dtype=np.float64) + np.asarray(seg["x1"], dtype=np.float64)) / 2
    traces.append(
        scatter(
            x=compact(mid),
            y=np.asarray(seg["row"], dtype=np.int16),
            mode="none",
            hoveron="points",
            hoverlabel={"bgcolor": color},
            showlegend=False,
            legendgroup=group,
            name=name,
            **hover,
        )
    )


def _hover(name: str, seg: Intervals | MergedIntervals | Waits) -> dict[str, Any]:
    """Hover text and numbers of one trace's intervals: the numbers travel as typed arrays and the sentence is the
    template, so only names (which differ per interval) travel as text."""
    if "count" in seg:  # merged columns
        return {
            "customdata": np.asarray(seg["count"], dtype=np.int32),
            "hovertemplate": f"{name}: %{{customdata}} intervals merged at this zoom<br>%{{x:.3f}} ms<extra></extra>",
        }
    if "wait_us" in seg:
        return {
            "customdata": np.asarray(seg["wait_us"], dtype=np.float32),
            "hovertemplate": "waited %{customdata:.1f} µs for the last member<br>%{x:.3f} ms<extra>"
            + name
            + "</extra>",
        }
    text = shared_text(seg["hover"])  # names repeat (a kernel's name on each of its launches): each sent once
    if "dur_us" not in seg:
        return {"meta": text, "hovertemplate": "%{text}<br>%{x:.3f} ms<extra>" + name + "</extra>"}
    return {
        "meta": text,
        "customdata": np.asarray(seg["dur_us"], dtype=np.float32),
        "hovertemplate": "%{text}<br>%{customdata:.1f} µs · at %{x:.3f} ms<extra>" + name + "</extra>",
    }


def _selected(traces: Traces, shapes: list[dict[str, Any]], members: Bars, width: float) -> None:
    """The selected collective instance: its members outlined, joined at their starts."""
    _bars(traces, shapes, members, palette.HIGHLIGHT, width * 0.35, "selected collective")
    order = sorted(range(len(members["row"])), key=lambda i: members["row"][i])
    traces.append(
        scatter(
            x=[members["x0"][i] for i in order],
            y=[members["row"][i] for i in order],
            mode="lines+markers",
            line={"color": palette.HIGHLIGHT, "width": 2},
            marker={"size": 6, "color": palette.HIGHLIGHT},
            showlegend=False,
            name="selected collective",
            hoverinfo="skip",
        )
    )


def _polylines(links: list[CollectiveLink]) -> tuple[np.ndarray, np.ndarray]:
    """Collective instances as one NaN-separated polyline each through its members' start points."""
    xs: list[float] = []
    ys: list[float] = []
    for link in links:
        xs += [*link["x"], np.nan]
        ys += [*link["row"], np.nan]
    return compact(xs), np.array(ys, dtype=np.float32)


def _axes(
    layout: dict[str, Any],
    rows: list[TimelineRow],
    window: list[float],
    marked: set[int],
    on_path: dict[int, list[int]],
    bars: list[dict[str, Any]],
) -> None:
    # Separators between blocks of rows (a rank's streams, a fold's lanes) as the y axis' minor grid lines, and the
    # shading of the marked ranks' and the folds' rows as one rectangle per run of neighbouring blocks of one colour:
    # plotly draws each shape on its own (path, clip, style) at every redraw and zoom, and 31 shapes of a 256-rank
    # timeline were a third of its drawing time; grid lines are one cheap path each.
    starts = [i for i in range(len(rows)) if i == 0 or _block(rows[i]) != _block(rows[i - 1])]
    shade = [
        (a, b, palette.CULPRIT if rows[a]["rank"] is not None else palette.STAGE)
        for a, b in zip(starts, [*starts[1:], len(rows)], strict=True)
        if rows[a]["rank"] in marked or rows[a]["rank"] is None
    ]
    runs: list[list[Any]] = []
    for a, b, color in shade:
        if runs and runs[-1][1] == a and runs[-1][2] == color:
            runs[-1][1] = b
        else:
            runs.append([a, b, color])
    bands = [
        {
            "type": "rect",
            "xref": "paper",
            "x0": 0,
            "x1": 1,
            "yref": "y",
            "y0": a - 0.5,
            "y1": b - 0.5,
            "fillcolor": color,
            "opacity": 0.08,
            "line": {"width": 0},
            "layer": "below",
        }
        for a, b, color in runs
    ]
    # The legend on the left: the modebar takes the top right corner.
    # The legend above the axis: LEGEND_PX above the plotting area, in its fraction of the area's height.
    area = max(1, layout.get("height", 400) - TOP_PX - BOTTOM_PX)
    layout["margin"].update({"l": 120, "t": TOP_PX, "b": BOTTOM_PX})
    layout["legend"].update({"x": 0, "xanchor": "left", "y": 1 + LEGEND_PX / area, "yanchor": "bottom"})
    layout.update(
        yaxis={
            "tickvals": list(range(len(rows))),
            "ticktext": [_label(r, r["rank"] in marked, on_path.get(i)) for i, r in enumerate(rows)],
            "range": [len(rows) - 0.5, -0.5],
            "showgrid": False,
            "zeroline": False,
            "fixedrange": True,
            "minor": {
                "tickmode": "array",
                "tickvals": [i - 0.5 for i in starts[1:]],
                "showgrid": True,
                "gridcolor": SEPARATOR,
                "gridwidth": 1,
                "ticks": "",
            },
        },
        # The time axis on top: a tall timeline's bottom is screens down, and its unit is read first.
        xaxis={
            "title": {"text": "time since job start (ms)", "standoff": 4},
            "side": "top",
            "range": window,
            "showgrid": True,
            "zeroline": False,
        },
        dragmode="zoom",
        hovermode="closest",
        shapes=[*bands, *bars],
    )


def _block(row: TimelineRow) -> int | str:
    return row["rank"] if row["rank"] is not None else row["fold"]


def _label(row: TimelineRow, marked: bool, path_ranks: list[int] | None) -> str:
    """A rank's row bold when marked; a folded row with ▸ (a click opens it) and, when the critical path crosses
    it, ◆ (the ranks it passes are in the hover)."""
    if row["rank"] is not None:
        return f"<b>{row['label']}</b>" if marked else row["label"]
    return f"▸ {row['label']}" + (" <b>◆</b>" if path_ranks else "")
