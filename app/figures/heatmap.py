"""The overview heatmap: ranks (or folded groups of alike ranks) x steps, grouped by pipeline stage, the ranks a
finding blames outlined in red, the selection in black."""

from __future__ import annotations

import re
from typing import Any

import plotly.graph_objects as go

from paradiag.analysis.focus import SEPARATES_PCT, wrap
from paradiag.app import palette
from paradiag.app.data.shapes import HeatmapMark, HeatmapRow
from paradiag.app.figures.common import add_caption, base_figure, empty_figure

Z_FLOOR = (
    3.0  # a z-score colour scale spans at least ±3: within it, ranks differ as much as jitter makes them
)
CAPTION_WIDTH = 60  # characters a caption line holds in the overview panel
PCT_FLOOR = (
    SEPARATES_PCT  # a % against the job's median spans at least ±10 %: launch jitter moves a rank by a few %
)


def heatmap_figure(
    rows: list[HeatmapRow],
    steps: list[int],
    metric: str,
    label: str,
    selected: HeatmapMark | None = None,
    diverging: bool | None = None,
    caption: str = "",
) -> go.Figure:
    """``rows``: ``{"label", "ranks", "stage", "values" (per step), "spread" (per step "min/median/max" or
    None), "culprit" (the kind of finding that blames the row's ranks, or None), "reason" (why, a few words)}`` top
    to bottom. ``selected``: ``{"ranks": [...], "step": s}`` is outlined. A z-score or a % against the job's
    median (``diverging``, by default when the metric's name ends in ``_z``/``_pct`` or is ``zscore``) is centred
    on 0; a time starts at 0 so that a 1 % spread looks like one. ``caption``: the title, what the cells show."""
    if not rows or not steps:
        return empty_figure("no steps in this job")
    pct = metric.endswith("_pct")
    diverging = metric.endswith(("_z", "_pct")) or metric == "zscore" if diverging is None else diverging
    z = [r["values"] for r in rows]
    finite = [abs(v) for row in z for v in row if v is not None]
    top = max(finite, default=1.0)
    hover = [[_hover(r, j, s, label) for j, s in enumerate(steps)] for r in rows]
    custom = [[",".join(map(str, r["ranks"]))] * len(steps) for r in rows]
    floor = PCT_FLOOR if pct else Z_FLOOR
    scale = (
        {"colorscale": palette.DIVERGING_SCALE, "zmid": 0, "zmin": -max(top, floor), "zmax": max(top, floor)}
        if diverging
        else {"colorscale": palette.HEAT_SCALE, "zmin": 0, "zmax": top or 1.0}
    )
    caption = wrap(caption, CAPTION_WIDTH) if caption else ""
    lines = caption.count("<br>") + 1 if caption else 0
    fig = base_figure(uirevision="heatmap", height=max(240, 60 + 18 * len(rows) + 16 * lines))
    fig.add_trace(
        go.Heatmap(
            z=z,
            x=[str(s) for s in steps],
            y=list(range(len(rows))),
            text=hover,
            customdata=custom,
            hovertemplate="%{text}<extra></extra>",
            xgap=1,
            ygap=1,
            colorbar={
                "title": {"text": "%" if pct else "z" if diverging else "ms", "side": "top"},
                "thickness": 10,
                "len": 0.9,
            },
            **scale,
        )
    )
    # Room above the cells for the modebar (and the caption), so that it never covers the top rows.
    # The labels' room, from their text (a blamed row's carries its reason), so that the caption starts at the
    # figure's left edge.
    left = min(max(110, 20 + 7 * max(len(re.sub("<[^>]+>", "", row_label(r))) for r in rows)), 320)
    fig.update_layout(
        margin={"l": left, "t": 30 + 16 * lines, "r": 10},
        shapes=heatmap_shapes(rows, steps, selected),
        yaxis={
            "tickvals": list(range(len(rows))),
            "ticktext": [row_label(r) for r in rows],
            "autorange": "reversed",
            "showgrid": False,
        },
        xaxis={"title": "step", "type": "category", "showgrid": False},
    )
    if caption:
        add_caption(fig, caption, left - 8)
    return fig


def row_label(row: HeatmapRow) -> str:
    """A row's tick label; a blamed row's starts with ⚠ and ends with why (bold red: visible without a hover)."""
    if not row.get("culprit"):
        return str(row["label"])
    why = row.get("reason") or str(row["culprit"]).replace("_", " ")
    return f"⚠ {row['label']} <span style='color:{palette.CULPRIT}'><b>· {why}</b></span>"


def heatmap_shapes(
    rows: list[HeatmapRow], steps: list[int], selected: HeatmapMark | None
) -> list[dict[str, Any]]:
    """Stage separators, culprit rows (red, whole row) and the selected cells (black): every shape of the
    heatmap, so that a new selection only replaces this list (a ``Patch``), not the figure."""
    n = len(steps)
    shapes: list[dict[str, Any]] = [
        {
            "type": "line",
            "xref": "paper",
            "x0": 0,
            "x1": 1,
            "y0": i - 0.5,
            "y1": i - 0.5,
            "line": {"color": "#222", "width": 2},
        }
        for i in range(1, len(rows))
        if rows[i]["stage"] != rows[i - 1]["stage"]
    ]
    shapes += [_rect(-0.5, n - 0.5, i, palette.CULPRIT, 3) for i, r in enumerate(rows) if r.get("culprit")]
    ranks = set((selected.get("ranks") if selected else None) or [])
    step = selected.get("step") if selected else None
    if step in steps:
        j = steps.index(step)
        shapes += [
            _rect(j - 0.5, j + 0.5, i, palette.HIGHLIGHT, 2)
            for i, r in enumerate(rows)
            if ranks & set(r["ranks"])
        ]
    return shapes


def _rect(x0: float, x1: float, row: int, color: str, width: int) -> dict[str, Any]:
    return {
        "type": "rect",
        "x0": x0,
        "x1": x1,
        "y0": row - 0.45,
        "y1": row + 0.45,
        "line": {"color": color, "width": width},
    }


def _hover(row: HeatmapRow, j: int, step: int, label: str) -> str:
    spreads = row.get("spread")
    spread = spreads[j] if spreads else None
    text = f"{row['label']} · step {step}<br>{label}: {_fmt(row['values'][j])}"
    text += f"<br>min / median / max: {spread}" if spread else ""
    return text + (
        f"<br>blamed by a finding: {row['culprit']}" + (f" ({row['reason']})" if row.get("reason") else "")
        if row.get("culprit")
        else ""
    )


def _fmt(v: float | None) -> str:
    return "–" if v is None else f"{v:.3f}"
