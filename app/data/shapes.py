"""The shapes of the view data the figure builders read, as TypedDicts: plain dicts at run time (the aggregate
store keeps and gives them back as it did), checked by mypy where they are built (``paradiag.app.data``) and read
(``paradiag.app.figures``), so a renamed or misspelt key fails the type check instead of a page."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict, final

import numpy as np

from paradiag.analysis.kinds import Kind

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


# The execution flow (``paradiag.app.data.flow.flow_view`` -> ``paradiag.app.figures.flow.flow_figure``).


class FlowNode(TypedDict):
    """A node of a stage's flow as drawn: a run of operators, or a block of repeated nodes (``kind`` "block")."""

    kind: str  # "compute", "memory", "collective", "send", "recv", ... or "block"
    label: str
    operators: list[str]  # in execution order, each once for a block
    time_ms: float  # median over the stage's devices (a block: its members' sum)
    imbalance: float  # max / median over the devices (a block: its worst computing member's)
    slowest_rank: int
    repeat: int  # a block: how many times its unit repeats
    span_ms: list[float]  # [first start, last end] since the job origin
    key: NotRequired[str]  # a block's: "stage:index", then ".index" per nesting level
    contains: NotRequired[list[str]]  # a block's: the kinds of its members
    members: NotRequired[list[FlowNode]]  # a block's, until it is drawn (flow_view takes them out)
    within: NotRequired[str]  # an opened block's member: the key of the block it was in
    strategy: NotRequired[list[str]]  # the parallel_strategy lines of what it holds
    sharded: NotRequired[bool]  # whether it holds an operator split across devices


class FlowStage(TypedDict):
    stage: int
    ranks: list[int]  # the devices its times are over
    tp: int
    dp: int
    nodes: list[FlowNode]


class FlowStrategy(TypedDict):
    """The parallel_strategy files read (and those that were not), and how many operator instances matched."""

    files: list[str]
    problems: list[str]
    matched: int


class FlowData(TypedDict):
    step: int
    stages: list[FlowStage]
    culprit_stage: int | None  # the stage the top finding is about
    strategy: NotRequired[FlowStrategy]  # where the job's folder held parallel_strategy files


# The communication matrix (``paradiag.app.data.comm`` -> ``paradiag.app.figures.comm.comm_figure``).


class CommCell(TypedDict):
    """One directed link of the Diagnosis's matrix (``CommLink`` as a dict)."""

    src: int
    dst: int
    link_type: str
    bytes: int
    time_ns: int
    instances: int
    bandwidth_gbps: float | None


class CommMatrix(TypedDict):
    ranks: list[int]  # the job's ranks and those only named as link ends
    cells: list[CommCell]
    source: str  # where the figures come from, in words
    slowness: list[float | None]  # per cell: comparable links' median bandwidth over its own


class RankGroup(TypedDict):
    """A row or column of the matrix: a rank, a node's or a stage's ranks."""

    label: str
    ranks: list[int]


CommMetric = Literal["slowness", "bandwidth", "bytes", "time"]


class CommView(TypedDict):
    level: Literal["rank", "node", "stage"]
    src: list[RankGroup]
    dst: list[RankGroup]
    source: str
    cells: dict[CommMetric, list[list[float | None]]]  # per metric, rows x columns
    hover: list[list[str]]


class BlockRanks(TypedDict):
    src: list[int]
    dst: list[int]


class LinkInstance(TypedDict):
    """A collective instance (or send/recv pair) both ends of a link took part in."""

    collective: str
    group: str
    step: int
    transfer_ms: float
    wait_ms: float
    bytes: int
    instance: int
    ranks: list[int]  # [src, dst]
    window: list[float]  # [start, end] ms: the timeline window that shows it


# The per-device detail (``paradiag.app.data.detail.detail_data`` -> ``paradiag.app.figures.detail``).


class OperatorTime(TypedDict):
    name: str
    rank_ms: float
    peer_ms: float | None  # the median over the stage peers that ran it
    standout: (
        bool  # it stands out from the peers' (``paradiag.analysis.kinds.standout_operators``): listed first
    )


class DetailBreakdown(TypedDict):
    parts: list[str]  # "compute", "comm_exposed", ...
    rank_ms: list[float] | None  # per part
    peer_ms: list[float] | None  # the peers' median per part


class Durations(TypedDict):
    rank_us: list[float]
    peer_us: list[float]


class CollectiveTime(TypedDict):
    collective: str
    wait_ms: float
    transfer_ms: float
    count: int


class DetailData(TypedDict):
    rank: int
    step: int
    peers: list[int]
    operators: list[OperatorTime]  # the rank's top operators, most time first
    breakdown: DetailBreakdown
    operator: str | None  # the operator whose durations are shown
    distribution: Durations
    collectives: list[CollectiveTime]  # most wait and transfer first


# The timeline's event search (``paradiag.app.data.search.search_events``).


class NameMatch(TypedDict):
    name: str
    count: int
    total_ms: float


class EventMatch(TypedDict):
    rank: int
    kind: str
    name: str
    start_ms: float
    dur_us: float


class SearchResult(TypedDict):
    text: str
    step: int
    count: int  # events matched
    names: list[NameMatch]  # most frequent first
    matches: list[EventMatch]


# The Gantt timeline (``paradiag.app.data.timeline.timeline_data``, with ``paradiag.app.data.timeline_fold``'s folds
# and critical path -> ``paradiag.app.figures.timeline.timeline_figure``). Times in ms since the job origin, rows
# indexes into ``rows``.


class FoldEntry(TypedDict):
    """A fold of alike ranks the timeline draws (``timeline_fold.fold_plan``): "s3", "s3.dp1" or "s3.rest"."""

    key: str
    stage: int
    ranks: list[int]


class FoldTimes(TypedDict):
    """A fold's operator instances in a step (``timeline_fold.fold_times``), per instance (ns): the median start
    and end over its ranks, the earliest start, the latest end, the slowest rank and its time."""

    start: np.ndarray
    end: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    slow_ns: np.ndarray
    slow_rank: np.ndarray
    names: list[str]  # per instance, its operator
    category: list[str]  # per instance, "compute", "memory", "collective", "send" or "recv"
    read: int  # how many of the fold's ranks the band model read


class TimelineRow(TypedDict):
    """A row of the timeline: a rank's stream (``rank``, ``track``) or a lane of a fold (``rank`` None)."""

    rank: int | None
    label: str
    track: NotRequired[int]  # a rank's row
    fold: NotRequired[str]  # a fold's row: its key, ...
    members: NotRequired[int]  # ... how many ranks it holds, ...
    lane: NotRequired[str]  # ... its lane ("compute", "collective", "p2p"), ...
    instances: NotRequired[int]  # ... the operator instances its ranks all run ...
    read: NotRequired[int]  # ... over how many of its ranks


class Bars(TypedDict):
    """Intervals ``x0``-``x1`` on rows (the members of the selected collective instance are just these)."""

    x0: list[float]
    x1: list[float]
    row: list[int]


@final
class Intervals(Bars):
    """A kind's intervals one by one: a short name each (``hover``) and the duration."""

    hover: list[str]
    dur_us: list[float]


@final
class MergedIntervals(Bars):
    """Intervals (or waits) merged to screen resolution: the union per row of the pixel columns they touch, with
    how many merged in each run."""

    count: list[int]


@final
class Waits(Bars):
    """Each collective member's wait, from its start to the last member's arrival."""

    wait_us: list[float]


class FoldedSpans(TypedDict):
    """A folded lane's merged instances of one kind: the median span (``x0``-``x1``), the spread (``lo``-``hi``),
    the (first) operator's short name, the median duration, how many merged, the slowest rank and its time."""

    x0: list[float]
    x1: list[float]
    lo: list[float]
    hi: list[float]
    hover: list[str]
    dur_us: list[float]
    count: list[int]
    slow_rank: list[int]
    slow_us: list[float]


class FoldedIntervals(FoldedSpans):
    row: list[int]


class CollectiveLink(TypedDict):
    """A collective instance in view: its members' start points (x) and rows, joined by a polyline."""

    x: list[float]
    row: list[int]


class PathEdges(TypedDict):
    """Where the critical path leaves a rank for the one it waited for: at x, from row y0 to row y1."""

    x: list[float]
    y0: list[int]
    y1: list[int]
    hover: list[str]


class PathSegments(Bars):
    """The critical path on the rows drawn: its segments (runs of them on one row and kind in a long window),
    the edges between ranks, and per row the ranks it passes there."""

    kind: list[str]  # the path's kind of each segment ("compute", "communication", "host", ...)
    hover: list[str]
    dur_us: list[float]
    edges: PathEdges
    ranks: dict[int, list[int]]


class TimelineData(TypedDict):
    rows: list[TimelineRow]
    origin_ns: int
    window_ms: list[float]  # [start, end]
    aggregated: bool  # whether the intervals are merged to screen resolution
    num_events: int
    folded: dict[str, FoldedIntervals]  # per kind
    kinds: (
        dict[str, Intervals] | dict[str, MergedIntervals]
    )  # per device kind ("compute", "communication", ...)
    links: list[CollectiveLink]  # none when aggregated
    waits: Waits | MergedIntervals
    selected: Bars | None  # the drawn members of the selected collective instance
    path: PathSegments | None  # the step's critical path, where asked for


# The overview heatmap and the step chart (``paradiag.app.data.overview`` -> ``paradiag.app.figures.heatmap`` and
# ``paradiag.app.figures.steps``).


class Overview(TypedDict):
    """Per metric a value per rank and step (ranks in mesh order, None where the rank has none)."""

    ranks: list[int]
    steps: list[int]
    stage: list[int]  # per rank
    dp: list[int]  # per rank, its mesh (DP) group
    metrics: dict[str, list[list[float | None]]]  # per metric, ranks x steps
    found_by: str  # how the mesh was found, in words


class HeatmapRow(TypedDict):
    """A row of the heatmap: a rank, or a group of alike ranks coloured by their median."""

    label: str
    ranks: list[int]
    stage: int
    values: list[float | None]  # per step
    spread: list[str] | None  # a group's, per step: "min / median / max"
    group: str | None  # the fold ("s3", "s3.dp1") it is in or is
    culprit: Kind | None  # the kind of finding that blames the row's ranks
    reason: str | None  # why, in a few words


class HeatmapMark(TypedDict):
    """The selected cells: the ranks' rows in the step."""

    ranks: list[int]
    step: int | None


class StepsFocus(TypedDict):
    """What the step chart says of the top finding."""

    what: str  # the finding in a few words
    predicted_ms: float | None  # the replay's step time without its cause (None without a replay)
    saving_pct: float | None  # what that saves of the measured step
    # the finding's own estimate where it stands over the replay's (counted work on CPU ranks), else None
    estimate_pct: float | None
    step: int | None  # the step it cites


# The text a figure's points share (``paradiag.app.figures.common.shared_text``): the distinct strings of each part,
# per point each part's index among them, joined by ``sep``.


class SharedText(TypedDict):
    parts: list[list[str]]
    index: list[list[int]]
    sep: str
