"""Per-device detail: top operators against peers, the breakdown, one operator's durations, collective waits."""

from __future__ import annotations

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
    fig = base_figure(title=f"durations of {short_name(op, 32)}", height=200)
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
