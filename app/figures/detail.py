"""Per-device detail: top operators against peers, the breakdown, one operator's durations, collective waits."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from paradiag.app import palette
from paradiag.app.data.shapes import DetailData, OperatorTime
from paradiag.app.figures.common import base_figure, empty_figure, short_name

PEER = "#9aa5b1"
_PART_COLOR = {
    "compute": palette.KIND["compute"],
    "comm_exposed": palette.KIND["communication"],
    "memory_exposed": palette.KIND["memory"],
    "sync_exposed": palette.KIND["sync"],
    "idle": palette.BUBBLE,
}


def operators_figure(data: DetailData) -> go.Figure:
    ops = data["operators"]
    if not ops:
        return empty_figure("no device work for this rank in this step", height=300)
    # The operators that stand out from the peers' come first, marked ▲ with how many times the peers' time (the
    # title stays short: a longer one ran into the legend of the half-width panel).
    names = [_standout_label(o) if o.get("standout") else short_name(o["name"]) for o in ops][::-1]
    fig = base_figure(title=f"top operators: rank {data['rank']} vs peers", height=60 + 22 * len(ops))
    full = [o["name"] for o in ops][::-1]
    fig.add_trace(
        go.Bar(
            y=names,
            x=[o["peer_ms"] for o in ops][::-1],
            orientation="h",
            name="peer median",
            marker_color=PEER,
            customdata=full,
            hovertemplate="%{customdata}<br>%{x:.3f} ms<extra>peers</extra>",
        )
    )
    fig.add_trace(
        go.Bar(
            y=names,
            x=[o["rank_ms"] for o in ops][::-1],
            orientation="h",
            name=f"rank {data['rank']}",
            marker_color=palette.KIND["compute"],
            customdata=full,
            hovertemplate="%{customdata}<br>%{x:.3f} ms<extra>this rank</extra>",
        )
    )
    fig.update_layout(
        barmode="group",
        margin={"l": 230},
        bargap=0.25,
        xaxis={"title": "time in step (ms)", "tickformat": ".3~f"},
    )
    return fig


def _standout_label(o: OperatorTime) -> str:
    """``▲ flash_bwd_dq_dk_dv_loop_seqk_parall… 5.96x``: an operator that stands out, with its ratio to the peers'."""
    ratio = f" {o['rank_ms'] / o['peer_ms']:.2f}x" if o["peer_ms"] else ""
    return f"▲ {short_name(o['name'], 44 - len(ratio))}{ratio}"


def breakdown_figure(data: DetailData) -> go.Figure:
    b = data["breakdown"]
    if not b["rank_ms"]:
        return empty_figure("no breakdown for this rank", height=180)
    fig = base_figure(title="where the step went", height=210)
    labels = [f"rank {data['rank']}"] + (["peer median"] if b["peer_ms"] else [])
    for i, part in enumerate(b["parts"]):
        values = [b["rank_ms"][i]] + ([b["peer_ms"][i]] if b["peer_ms"] else [])
        fig.add_trace(
            go.Bar(
                y=labels,
                x=values,
                orientation="h",
                name=part.replace("_", " "),
                marker_color=_PART_COLOR.get(part, "#ccc"),
                hovertemplate="%{x:.3f} ms<extra>" + part + "</extra>",
            )
        )
    fig.update_layout(
        barmode="stack",
        margin={"l": 90},
        legend={"orientation": "v", "y": 1, "yanchor": "top", "x": 1.02, "xanchor": "left"},
        xaxis={"title": "ms"},
    )
    return fig


def distribution_figure(data: DetailData) -> go.Figure:
    op = data.get("operator")
    dist = data["distribution"]
    if not op or not dist["rank_us"]:
        return empty_figure("select an operator", height=200)
    fig = base_figure(title=f"durations of {short_name(op, 24)}", height=200)
    fig.add_trace(
        go.Box(
            x=[v / 1e3 for v in dist["peer_us"]],
            name="peers",
            marker_color=PEER,
            boxpoints="outliers",
            hovertemplate="%{x:.3f} ms<extra>peers</extra>",
        )
    )
    fig.add_trace(
        go.Box(
            x=[v / 1e3 for v in dist["rank_us"]],
            name=f"rank {data['rank']}",
            marker_color=palette.KIND["compute"],
            boxpoints="all",
            jitter=0.4,
            hovertemplate="%{x:.3f} ms<extra>this rank</extra>",
        )
    )
    fig.update_layout(showlegend=False, margin={"l": 70}, xaxis={"title": "ms", "tickformat": ".3~f"})
    return fig


def collectives_figure(data: DetailData) -> go.Figure:
    rows = data["collectives"]
    if not rows:
        return empty_figure("no collectives on this rank in this step", height=180)
    names = [f"{r['collective']} ×{r['count']}" for r in rows][::-1]
    fig = base_figure(title="collectives: wait vs transfer", height=60 + 26 * len(rows))
    fig.add_trace(
        go.Bar(
            y=names,
            x=[r["wait_ms"] for r in rows][::-1],
            orientation="h",
            name="wait",
            marker_color=palette.WAIT,
            hovertemplate="%{x:.3f} ms<extra>wait</extra>",
        )
    )
    fig.add_trace(
        go.Bar(
            y=names,
            x=[r["transfer_ms"] for r in rows][::-1],
            orientation="h",
            name="transfer",
            marker_color=palette.KIND["communication"],
            hovertemplate="%{x:.3f} ms<extra>transfer</extra>",
        )
    )
    fig.update_layout(barmode="stack", margin={"l": 120}, xaxis={"title": "ms"})
    return fig


# The device detail as one figure: its four graphs drawn as four cells of one plot. Four plots cost the browser a
# plot's fixed work four times over on every step change (its axes, its layout measured; Dash's renderer told of four
# figures). Put together from the four graphs' own figures as plain data (built with plotly's subplot helpers and
# checked again attribute by attribute, it took 44 ms of the server's time against their 13).
CELLS = {  # each cell's graph: its builder, row and column
    "operators": (operators_figure, 1, 1),
    "breakdown": (breakdown_figure, 1, 2),
    "distribution": (distribution_figure, 2, 1),
    "collectives": (collectives_figure, 2, 2),
}
# The cell whose traces the legend lists (above the figure); the others' keys are in their titles.
LEGEND = "breakdown"
ROW_GAP_PX, TOP_PX, BOTTOM_PX = 96, 30, 58
# Between the two columns, a fraction of the plot's width (each column's names lie outside it).
COLUMN_GAP = 0.05


def detail_figure(data: DetailData) -> go.Figure:
    """The rank's top operators against its peers' (left, above), where its step went (right, above), the
    selected operator's durations (left, below) and its collectives' wait and transfer (right, below): each cell
    titled under its axis, with the key to its colours (the breakdown's: the legend above); the left column's
    names on its left, the right column's on its right. A stacked graph's bars are laid on one another (``base``):
    the figure's bars are grouped side by side."""
    parts = {name: build(data).to_plotly_json() for name, (build, _, _) in CELLS.items()}
    heights = [
        max(_plot_px(parts["operators"]), _plot_px(parts["breakdown"])),
        max(_plot_px(parts["distribution"]), _plot_px(parts["collectives"])),
    ]
    plot = sum(heights) + ROW_GAP_PX
    layout = base_figure(height=plot + TOP_PX + BOTTOM_PX).to_plotly_json()["layout"]
    layout.update(
        barmode="group",
        bargap=0.25,
        margin={"l": 230, "r": 10, "t": TOP_PX, "b": BOTTOM_PX},
        legend={"orientation": "h", "x": 0, "xanchor": "left", "y": 1.0, "yanchor": "bottom"},
        annotations=[],
    )
    rows = {1: [1 - heights[0] / plot, 1.0], 2: [0.0, heights[1] / plot]}
    cols = {1: [0.0, (1 - COLUMN_GAP) / 2], 2: [(1 + COLUMN_GAP) / 2, 1.0]}
    traces: list[dict[str, Any]] = []
    for name, (_, row, col) in CELLS.items():
        n = "" if (row, col) == (1, 1) else str((row - 1) * 2 + col)
        x_axis, y_axis = _cell(name, parts[name], f"x{n}", f"y{n}", traces, layout["annotations"])
        layout[f"xaxis{n}"] = {**x_axis, "domain": cols[col], "anchor": f"y{n}"}
        layout[f"yaxis{n}"] = {**y_axis, "domain": rows[row], "anchor": f"x{n}"}
    return go.Figure({"data": traces, "layout": layout}, _validate=False)


def _plot_px(part: dict[str, Any]) -> int:
    """The height of a graph's plot area, as drawn alone (its figure's height less its margins)."""
    return max(90, int(part["layout"].get("height") or 200) - 70)


def _cell(
    name: str, part: dict[str, Any], x: str, y: str, traces: list[dict[str, Any]], notes: list[dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Graph ``part`` (its figure as data) drawn on axes ``x``, ``y``: its traces appended to ``traces`` (a
    stacked graph's bars given their base); its axes' settings returned, its title under its x axis; a message in
    the cell (``notes``) when it has nothing to show."""
    lay = part["layout"]
    y_axis: dict[str, Any] = {"automargin": True, **({"side": "right"} if x in ("x2", "x4") else {})}
    if not part["data"]:
        message = (lay.get("annotations") or [{}])[0].get("text", "")
        notes.append(
            {
                "text": message,
                "showarrow": False,
                "xref": f"{x} domain",
                "yref": f"{y} domain",
                "x": 0.5,
                "y": 0.5,
            }
            | {"font": {"size": 13, "color": "#777"}}
        )
        return {"visible": False}, {"visible": False}
    stacked = lay.get("barmode") == "stack"
    base: dict[Any, float] = {}
    for trace in part["data"]:
        drawn = {**trace, "xaxis": x, "yaxis": y, "showlegend": name == LEGEND}
        if trace["type"] == "bar":
            drawn["offsetgroup"] = name if stacked else f"{name}:{trace['name']}"
        if trace["type"] == "bar" and stacked:
            drawn["base"] = [base.get(v, 0.0) for v in trace["y"]]
            for v, w in zip(trace["y"], trace["x"], strict=True):
                base[v] = base.get(v, 0.0) + float(w or 0.0)
        traces.append(drawn)
    title = (lay.get("title") or {}).get("text") or ""
    x_title = ((lay.get("xaxis") or {}).get("title") or {}).get("text") or ""
    text = " · ".join(t for t in (title, x_title) if t)
    if name != LEGEND and lay.get("showlegend") is not False and len(part["data"]) > 1:
        text += "<br>" + "  ".join(
            f'<span style="color:{t["marker"]["color"]}">■</span> {t["name"]}'
            for t in part["data"]
            if (t.get("marker") or {}).get("color")
        )
    x_axis = {"title": {"text": text, "font": {"size": 12}}}
    if (lay.get("xaxis") or {}).get("tickformat"):
        x_axis["tickformat"] = lay["xaxis"]["tickformat"]
    return x_axis, y_axis
