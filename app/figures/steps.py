"""The step chart: step time per step (the median rank, the slowest, the spread over the ranks as a band), the
step time the replay predicts with the top finding's cause removed, the selected step marked. Its axis spans the
data, not 0: in a synchronous job every rank's step time is within a few % of the others', which a chart from 0
draws as one line. Click a step or brush a range of steps (the slowest step of the range is taken) to pick one."""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from paradiag.app import palette
from paradiag.app.data.shapes import StepsFocus
from paradiag.app.figures.common import add_caption, base_figure, empty_figure

SPREAD = "rgba(96,125,139,0.25)"
APART = 0.005  # a blamed rank's line is drawn where it leaves the median by 0.5 % in some step (else it is the median)


def steps_figure(
    steps: list[int],
    ranks: list[int],
    step_ms: list[list[float | None]],
    culprit: list[int] | None = None,
    selected: int | None = None,
    focus: StepsFocus | None = None,
) -> go.Figure:
    """``step_ms``: ranks x steps (rows in ``ranks`` order). ``culprit``: ranks a finding blames, the first drawn
    as its own line where it is not the median's (the others are alike, or their own lines). ``focus``: ``{"what": the top finding in a few
    words, "predicted_ms": the replay's step time without its cause (or None), "saving_pct": what it saves of the
    measured step, "step": the step it cites}``."""
    if not steps:
        return empty_figure("no steps in this job", height=150)
    block = np.array([[np.nan if v is None else v for v in row] for row in step_ms], dtype=float)
    fig = base_figure(uirevision="steps", height=210)
    with np.errstate(all="ignore"):
        median, lo, hi = np.nanmedian(block, axis=0), np.nanmin(block, axis=0), np.nanmax(block, axis=0)
    hover = "step %{x}: %{y:.2f} ms<extra>"
    fig.add_trace(
        go.Scatter(x=steps, y=lo, mode="lines", line={"width": 0}, showlegend=False, hoverinfo="skip")
    )
    fig.add_trace(
        go.Scatter(
            x=steps,
            y=hi,
            mode="lines",
            line={"width": 0},
            fill="tonexty",
            fillcolor=SPREAD,
            name="fastest–slowest rank",
            hoverinfo="skip",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=steps,
            y=median,
            mode="lines+markers",
            name="median rank",
            line={"color": palette.STAGE, "width": 2},
            hovertemplate=hover + "median rank</extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=steps,
            y=hi,
            mode="markers",
            name="slowest rank",
            marker={"color": palette.KIND["communication"], "size": 6, "symbol": "triangle-up"},
            hovertemplate=hover + "slowest rank</extra>",
        )
    )
    row = {r: i for i, r in enumerate(ranks)}
    for r in [r for r in culprit or [] if r in row][:1]:
        values = block[row[r]]
        with np.errstate(all="ignore"):
            if np.nanmax(np.abs(values - median) / median) >= APART:
                fig.add_trace(
                    go.Scatter(
                        x=steps,
                        y=values,
                        mode="lines",
                        name=f"rank {r}",
                        line={"color": palette.CULPRIT, "width": 1.5, "dash": "dot"},
                        hovertemplate=hover + f"rank {r}</extra>",
                    )
                )
    predicted = focus.get("predicted_ms") if focus else None
    if predicted:
        what = focus.get("what", "the cause") if focus else "the cause"
        fig.add_trace(
            go.Scatter(
                x=[steps[0] - 0.5, steps[-1] + 0.5],
                y=[predicted] * 2,
                mode="lines",
                name=f"without it (replay): {predicted:.1f} ms",
                line={"color": palette.CULPRIT, "width": 1.5, "dash": "dash"},
                hovertemplate=f"without {what}: %{{y:.2f}} ms<extra>replay</extra>",
            )
        )
    caption = summary(steps, median, lo, hi, focus)
    top = 44 + 15 * max(caption.count("<br>") - 1, 0)  # two lines fit the margin
    fig.update_layout(
        shapes=step_marker(steps, selected),
        xaxis={
            "title": None,
            "tickprefix": "step ",
            "tickmode": "array",
            "tickvals": steps,
            "range": [min(steps) - 0.5, max(steps) + 0.5],
        },
        yaxis={
            "title": "ms",
            "range": y_range([lo, hi, np.array([predicted or np.nan])]),
            "fixedrange": True,
        },
        dragmode="select",
        selectdirection="h",
        margin={"t": top, "b": 30, "r": 10},
        hovermode="x unified",
        legend={
            "orientation": "h",
            "x": 0,
            "xanchor": "left",
            "y": -0.3,
            "yanchor": "top",
            "font": {"size": 10},
        },
    )
    add_caption(fig, caption, 50)
    return fig


def y_range(parts: list[np.ndarray]) -> list[float]:
    """The y axis around the data: its extent padded by a tenth (at least 1 % of its top, so that a flat line
    sits in the middle), not from 0."""
    values = np.concatenate([np.asarray(p, dtype=float).ravel() for p in parts])
    values = values[np.isfinite(values)]
    if not len(values):
        return [0.0, 1.0]
    a, b = float(values.min()), float(values.max())
    pad = max(0.1 * (b - a), 0.01 * abs(b), 1e-3)
    return [max(a - pad, 0.0), b + pad]


def summary(
    steps: list[int], median: np.ndarray, lo: np.ndarray, hi: np.ndarray, focus: StepsFocus | None
) -> str:
    """The chart's title: the step time, how far apart the ranks are, what the replay saves without the top
    finding's cause."""
    with np.errstate(all="ignore"):
        mid = float(np.nanmedian(median))
        spread = float(np.nanmax(hi - lo))
    text = (
        f"step {mid:.1f} ms (median) · ranks within {spread:.1f} ms ({100 * spread / mid:.0f}%)"
        if mid == mid and mid > 0
        else "step time"
    )
    predicted, saving = (focus.get("predicted_ms"), focus.get("saving_pct")) if focus else (None, None)
    if predicted:
        saves = f" (saves {saving:.0f}% of the step)" if saving is not None else ""
        what = focus.get("what", "the top finding") if focus else "the top finding"
        text += f"<br>without {what} (replay): {predicted:.1f} ms{saves}"
        # A CPU job keeps a finding's own estimate where the replay of the clock's durations cannot tell it.
        estimate = focus.get("estimate_pct") if focus else None
        if estimate is not None:
            text += f"<br>its own estimate: ~{estimate:.2f}% of the step"
    return text


def step_marker(steps: list[int], selected: int | None) -> list[dict[str, Any]]:
    """The shapes of the chart: the selected step's line. A new selection replaces only these (a ``Patch``)."""
    if selected not in steps:
        return []
    return [
        {
            "type": "line",
            "xref": "x",
            "yref": "paper",
            "x0": selected,
            "x1": selected,
            "y0": 0,
            "y1": 1,
            "line": {"color": palette.HIGHLIGHT, "width": 2},
        }
    ]
