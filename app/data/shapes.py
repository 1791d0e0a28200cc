"""The shapes of the view data the figure builders read, as TypedDicts: plain dicts at run time (the aggregate
store keeps and gives them back as it did), checked by mypy where they are built (``paradiag.app.data``) and read
(``paradiag.app.figures``), so a renamed or misspelt key fails the type check instead of a page."""

from __future__ import annotations

from typing import Any, Literal, TypedDict

# Marey's graph (``paradiag.app.data.marey.marey_data`` -> ``paradiag.app.figures.marey.marey_figure``).


class MareyRow(TypedDict):
    """One row of a stage as drawn: a stage's alike devices, a mesh group or one device."""

    kind: str  # "stage", "group" or "device"
    label: str
    ranks: list[int]  # those read first, then the others it stands for
    anomalous: list[int]
    why: list[str]  # why each of the first anomalous ranks is (busy compute against the stage's median)
    group: int  # the mesh (DP) group of its first device


# A stage's bands in the window, merged (band x row where two lists deep; times in ms since the job origin).
# Functional form: "pass" is a Python keyword.
MareyBands = TypedDict(
    "MareyBands",
    {
        "start": list[list[float]],
        "end": list[list[float]],
        "lo": list[list[float]],  # the earliest start of the row's devices
        "hi": list[list[float]],  # the latest end
        "slow_rank": list[list[int]],  # the slowest device of the row in the band, and its time
        "slow_ms": list[list[float]],
        "category": list[str],  # the band's dominant category
        "shares": list[
            list[list[Any]]
        ],  # per band, [category, share of the band's time] of each category in it
        "label": list[str],
        "pass": list[str],  # the training pass ("forward", "backward", ...) or ""
        "operator": list[str],
    },
)

# The band arrays a figure reads by name, band x row.
MareyTimes = Literal["start", "end", "lo", "hi", "slow_rank", "slow_ms"]


class MareyStage(MareyBands):
    stage: int
    rows: list[MareyRow]
    bubbles: list[list[list[float]]]  # per row, [start, end] (ms) of its gaps with no compute


class P2PPair(TypedDict):
    """A send/recv pair the analysis matched: sender, receiver, send start and receive end (ms), the receiver's
    wait."""

    src: int
    dst: int
    send_ms: float
    recv_ms: float
    recv_start_ms: float
    wait_ms: float


class FocusMarks(TypedDict):
    """What the graph marks of the top finding."""

    kind: str | None
    stage: int | None  # a whole stage's finding, else None
    ranks: list[int]
    reasons: dict[int, str]  # rank -> why
    headline: str


class ExpandOption(TypedDict):
    label: str
    value: str


class MareyData(TypedDict):
    """Everything Marey's graph draws for a step."""

    step: int
    window_ms: list[float]  # [start, end]
    stages: list[MareyStage]
    p2p: list[P2PPair]
    expandable: list[ExpandOption]
    focus: FocusMarks


class PathPiece(TypedDict):
    """A piece of a step's critical path (``paradiag.app.data.marey.critical_path``)."""

    rank: int
    kind: str
    operator: str
    start_ms: float
    end_ms: float
    segments: int
