"""One palette: a colour means the same thing in every view (timeline, Marey graph, detail, flow graph)."""

from __future__ import annotations

# What a stretch of device time was spent on.
KIND = {
    "compute": "#4e9a5b",
    "communication": "#e08a2c",
    "memory": "#7f6fb5",
    "sync": "#9e9e9e",
    "host": "#5b8fc9",
    "annotation": "#c8c8c8",
}
# Marey bands split communication into its three roles, in the same orange family plus the paper's send/recv hues.
CATEGORY = {
    "compute": KIND["compute"],
    "collective": KIND["communication"],
    "send": "#b65fcf",
    "recv": "#3d8fd1",
    "memory": KIND["memory"],
}
WAIT = "#d62728"  # time inside a collective before the last participant arrived
BUBBLE = "#bdbdbd"  # a device idle inside the step
HIGHLIGHT = "#111111"  # the selection's outline
CULPRIT = "#d62728"  # a rank a finding blames: outlined in every view
CRITICAL_PATH = "#f2b705"  # the step's critical path (timeline, Marey, snapshot): apart from the kinds, the categories and red
STAGE = "#78909c"
HEAT_SCALE = "YlOrRd"  # more time (or more imbalance) is hotter
DIVERGING_SCALE = "RdBu_r"  # z-scores: blue faster than peers, red slower
SEVERITY = {"high": "#d62728", "medium": "#ff7f0e", "low": "#8c8c8c"}


def category_of(kind: str, collective: str | None) -> str:
    """The Marey category of a device event: compute, send, recv, collective or memory."""
    if kind == "communication":
        if collective == "send":
            return "send"
        if collective == "recv":
            return "recv"
        return "collective"
    return "memory" if kind in ("memory", "sync") else "compute"
