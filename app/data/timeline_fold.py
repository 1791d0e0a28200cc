"""The timeline at any scale: alike ranks folded into one row per stage (or mesh group) showing their spread, and
the step's critical path placed on the rows drawn.

Which ranks keep a row of their own is the heatmap's rule (``overview.apart``: a culprit, or own time out of its
stage's noise band), plus the ranks of interest and those of an opened group. A folded row draws, per lane (compute,
communication), the operator instances its ranks run in common (the analysis' Marey model, ``analysis.marey``):
the median span as a bar and the earliest start to the latest end as a lighter band, neighbours merged to screen
resolution. The critical path is the Diagnosis': a segment on a folded rank lands on its row, which is marked.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Literal, cast

import numpy as np
import pyarrow.compute as pc

from paradiag.analysis import marey as model
from paradiag.app import store
from paradiag.app.data.common import diagnosis
from paradiag.app.data.marey import stage_bands
from paradiag.app.data.mesh import mesh_of
from paradiag.app.data.shapes import (
    FoldedIntervals,
    FoldedSpans,
    FoldEntry,
    FoldTimes,
    PathEdges,
    PathSegments,
)
from paradiag.app.figures.common import short_name
from paradiag.job import Job

SMALL_JOB = 8  # ranks up to which every rank has its rows (nothing folds)
MAX_SINGLE_RANKS = 32  # ranks drawn one by one at most; an opened group beyond it stays folded
MAX_RANKS = 8  # in a small job, the ranks drawn: the focus' and those that wait for them the longest
MAX_SELECTED = (
    MAX_RANKS  # a folded heatmap row, or a stage's finding, names many ranks: the first ones are drawn
)
LIMITS = (
    SMALL_JOB,
    MAX_SELECTED,
    MAX_RANKS,
    MAX_SINGLE_RANKS,
)  # the shown ranks' (``analysis.focus.shown_ranks``)
# A fold's lanes: compute, collectives (data and tensor parallel) and the pipeline's send/recv, which on one lane
# would tile the step (collectives run between the pipeline's transfers) and hide each other's gaps.
LANE = {"compute": "compute", "memory": "compute", "collective": "collective", "send": "p2p", "recv": "p2p"}
LANES = ("compute", "collective", "p2p")
KIND = {
    "compute": "compute",
    "memory": "memory",
    "collective": "communication",
    "send": "communication",
    "recv": "communication",
}
FOLD_BANDS = 1600  # merged instances over all folded lanes of a drawing ...
MIN_BANDS = 24  # ... at least this many a lane
MAX_PATH = 1500  # path segments drawn one by one; beyond, runs on one row and kind merge
HOVER_NAME = 36


def timeline_rows(job: Job, ranks: list[int], expand: list[str] | None) -> list[int | FoldEntry]:
    """What a timeline draws top to bottom (the dashboard's and the snapshot's): ``ranks``, then (beyond SMALL_JOB
    ranks) every other rank in the fold of its stage or, where ``expand`` opened them, of its mesh group or on its
    own."""
    return list(ranks) if len(mesh_of(job).ranks) <= SMALL_JOB else fold_plan(job, ranks, expand)


def fold_plan(job: Job, singles: list[int], expand: list[str] | None) -> list[int | FoldEntry]:
    """The timeline's entries top to bottom: ``singles`` (the ranks of interest first), then per stage its alike
    ranks folded into one entry (``{"key": "s3", "stage", "ranks"}``), or, for a stage in ``expand``, one per mesh
    group (``s3.dp1``) whose ranks are drawn one by one when the group is in ``expand`` too. At most
    MAX_SINGLE_RANKS ranks are drawn one by one: groups of one rank (a layout without groups in a stage) beyond
    that fold together (``s3.rest``, which opens no further)."""
    mesh = mesh_of(job)
    opened = set(expand or [])
    out: list[int | FoldEntry] = list(dict.fromkeys(singles))
    count = len(out)
    for stage in mesh.stages:
        ranks = [r for r in mesh.ranks_of_stage(stage) if r not in singles]
        if f"s{stage}" not in opened:
            out += _fold(f"s{stage}", stage, ranks)
            continue
        rest: list[int] = []
        for group in dict.fromkeys(mesh.dp[r] for r in ranks):
            members = [r for r in ranks if mesh.dp[r] == group]
            key = f"s{stage}.dp{group}"
            if (key in opened or len(members) == 1) and count + len(members) <= MAX_SINGLE_RANKS:
                out += members
                count += len(members)
            elif len(members) == 1:
                rest += members
            else:
                out += _fold(key, stage, members)
        out += _fold(f"s{stage}.rest", stage, rest)
    return out


def _fold(key: str, stage: int, members: list[int]) -> list[int | FoldEntry]:
    """A group of one is no fold: that rank is drawn as itself."""
    return [{"key": key, "stage": stage, "ranks": members}] if len(members) > 1 else list(members)


def fold_times(job: Job, step: int, folds: list[FoldEntry]) -> list[FoldTimes]:
    """Per fold, its operator instances in ``step`` (those every rank of its stage runs): per instance the median
    start and end over its ranks, the earliest start, the latest end and the slowest rank, and over how many of
    its ranks (``read``: those the band model read); memoised per fold, a stage's bands read once for all its
    folds not memoised yet."""
    read: dict[int, dict[str, Any]] = {}

    def compute(fold: FoldEntry) -> FoldTimes:
        if fold["stage"] not in read:
            read[fold["stage"]] = stage_bands(job, step, fold["stage"])
        st = read[fold["stage"]]
        column = {r: i for i, r in enumerate(st["ranks"])}
        cols = [column[r] for r in fold["ranks"] if r in column]  # the model may read a stage's ranks in part
        if not cols:
            none = np.zeros(0, dtype=np.int64)
            return {
                "start": none,
                "end": none,
                "lo": none,
                "hi": none,
                "slow_ns": none,
                "slow_rank": none,
                "names": [],
                "category": [],
                "read": 0,
            }
        times = model.row_times(st["start"], st["end"], cols)
        return {
            "start": times["start"],
            "end": times["end"],
            "lo": times["lo"],
            "hi": times["hi"],
            "slow_ns": times["slow_ns"],
            "slow_rank": np.asarray(st["ranks"], dtype=np.int64)[times["slow_col"]],
            "names": st["names"],
            "category": st["category"],
            "read": len(cols),
        }

    return [
        store.memo("timeline-fold", job, [step, f["key"], f["ranks"]], partial(compute, f)) for f in folds
    ]


def lanes_of(times: FoldTimes) -> list[str]:
    """The lanes a fold has (compute first), whatever the window shows: its rows stay put while zooming. A fold
    whose ranks run no operator instance in common still gets its (empty) compute row: its ranks are not hidden."""
    present = {LANE[c] for c in times["category"]}
    return [lane for lane in LANES if lane in present] or ["compute"]


def folded_intervals(
    folds: list[tuple[FoldTimes, dict[str, int]]], window: tuple[int, int], pixels: int, t0: int
) -> dict[str, FoldedIntervals]:
    """Per kind, the merged instances of every folded lane in the window (ms): median span ``x0``-``x1``, spread
    ``lo``-``hi``, row, operator name (``hover``; its first when several merged), median duration, how many merged,
    the slowest rank and its time. ``folds``: (fold times, lane -> row)."""
    lo, hi = window
    lanes = sum(len(rows) for _, rows in folds)
    most = max(MIN_BANDS, min(model.MAX_BANDS, FOLD_BANDS // max(lanes, 1)))
    parts: dict[str, list[FoldedIntervals]] = {}
    for times, rows in folds:
        for lane, row in rows.items():
            for kind, part in _lane(times, lane, (lo, hi, pixels), most, t0).items():
                parts.setdefault(kind, []).append({**part, "row": [row] * len(part["x0"])})
    return {kind: _joined(ps) for kind, ps in parts.items()}


def _joined(parts: list[FoldedIntervals]) -> FoldedIntervals:
    """One kind's merged instances of every folded lane, lane after lane."""
    return {
        "x0": [v for p in parts for v in p["x0"]],
        "x1": [v for p in parts for v in p["x1"]],
        "lo": [v for p in parts for v in p["lo"]],
        "hi": [v for p in parts for v in p["hi"]],
        "hover": [v for p in parts for v in p["hover"]],
        "dur_us": [v for p in parts for v in p["dur_us"]],
        "count": [v for p in parts for v in p["count"]],
        "slow_rank": [v for p in parts for v in p["slow_rank"]],
        "slow_us": [v for p in parts for v in p["slow_us"]],
        "row": [v for p in parts for v in p["row"]],
    }


def _lane(
    times: FoldTimes, lane: str, screen: tuple[int, int, int], most: int, t0: int
) -> dict[str, FoldedSpans]:
    """One lane's instances in [lo, hi), neighbours closer than a pixel merged, split by kind."""
    lo, hi, pixels = screen
    mine = np.flatnonzero(np.array([LANE[c] == lane for c in times["category"]], dtype=bool))
    cats = [times["category"][i] for i in mine.tolist()]
    visible, group = _merge(
        times["start"][mine, None], times["end"][mine, None], cats, (lo, hi, pixels), most
    )
    if not len(visible):
        return {}
    idx = mine[visible]
    first = np.r_[0, np.flatnonzero(np.diff(group)) + 1]
    count = np.bincount(group)
    kinds = np.array(
        [
            KIND[c]
            for c in model.dominant(
                [cats[i] for i in visible.tolist()],
                (times["end"][idx] - times["start"][idx]).astype(np.float64),
                group,
            )
        ]
    )
    spans: tuple[tuple[Literal["start", "end", "lo", "hi"], str], ...] = (
        ("start", "min"),
        ("end", "max"),
        ("lo", "min"),
        ("hi", "max"),
    )
    ms = {k: ((model.merged(times[k][idx], group, how) - t0) / 1e6).round(4) for k, how in spans}
    slow_rank, slow_ns = _slowest(times["slow_rank"][idx], times["slow_ns"][idx], group)
    names = [short_name(times["names"][int(idx[f])], HOVER_NAME) for f in first.tolist()]
    columns = {
        "x0": ms["start"],
        "x1": ms["end"],
        "lo": ms["lo"],
        "hi": ms["hi"],
        "hover": np.array(names, dtype=object),  # the numbers travel apart: the names are most of the payload
        "dur_us": ((ms["end"] - ms["start"]) * 1e3).round(1),
        "count": count,
        "slow_rank": np.asarray(slow_rank),
        "slow_us": (np.asarray(slow_ns) / 1e3).round(1),
    }
    return {  # the columns as lists: FoldedSpans
        kind: cast("FoldedSpans", {k: v[kinds == kind].tolist() for k, v in columns.items()})
        for kind in dict.fromkeys(kinds.tolist())
    }


def _merge(
    start: np.ndarray, end: np.ndarray, cats: list[str], screen: tuple[int, int, int], most: int
) -> tuple[np.ndarray, np.ndarray]:
    """Neighbours of one category closer than a pixel merge; while more than ``most`` remain, closer than 2, 4, ...
    pixels: a gap wider than that stays visible (the model's last resort, merging runs whatever their gaps, would
    draw a lane busy across its idle time)."""
    lo, hi, pixels = screen
    frac = 1 / max(pixels, 1)
    visible, group = model.merge_bands(start, end, cats, lo, hi, frac, len(start) + 1)
    while len(group) and int(group[-1]) + 1 > most and frac < 1:
        frac *= 2
        visible, group = model.merge_bands(start, end, cats, lo, hi, frac, len(start) + 1)
    return (
        model.merge_bands(start, end, cats, lo, hi, frac, most)
        if len(group) and int(group[-1]) + 1 > most
        else (visible, group)
    )


def _slowest(rank: np.ndarray, ns: np.ndarray, group: np.ndarray) -> tuple[list[int], list[int]]:
    """Per merged group, the slowest rank of its instances and that instance's time on it."""
    order = np.lexsort((ns, group))
    last = order[np.r_[np.flatnonzero(np.diff(group[order])), len(order) - 1]]
    return rank[last].tolist(), ns[last].tolist()


def path_segments(
    job: Job, step: int, window: tuple[int, int], place: Callable[[int, int, str], int | None], t0: int
) -> PathSegments:
    """The critical path of ``step`` in the window, on the rows drawn: its segments (``place(rank, track, lane)``
    gives a segment's row, None where the rank is not drawn), the edges where it leaves a rank for the rank
    that rank waited for, and the ranks it passes on each row (a folded row names them)."""
    lo, hi = window
    table = diagnosis(job).critical_path
    part = table.filter(
        pc.and_(
            pc.equal(table.column("step"), step),
            pc.and_(pc.less(table.column("start_ns"), hi), pc.greater(table.column("end_ns"), lo)),
        )
    ).sort_by("start_ns")
    seg = part.select(["rank", "track", "kind", "operator", "start_ns", "end_ns"]).to_pydict()
    rows = [
        place(r, t, lane_of(k, op))
        for r, t, k, op in zip(seg["rank"], seg["track"], seg["kind"], seg["operator"], strict=True)
    ]
    edges = _edges(seg, rows, t0)
    keep = [i for i, row in enumerate(rows) if row is not None]
    runs = _runs(keep, rows, seg["kind"]) if len(keep) > MAX_PATH else [[i] for i in keep]
    out: PathSegments = {
        "x0": [],
        "x1": [],
        "row": [],
        "kind": [],
        "hover": [],
        "dur_us": [],
        "edges": edges,
        "ranks": {},
    }
    on_row: dict[int, dict[int, None]] = {}  # per row, the ranks the path passes there, in order
    for run in runs:
        a, b = run[0], run[-1]
        ranks = list(dict.fromkeys(seg["rank"][i] for i in run))
        who = (
            f"rank {ranks[0]}"
            if len(ranks) == 1
            else "ranks " + ", ".join(map(str, ranks[:4])) + (" …" if len(ranks) > 4 else "")
        )
        what = (
            short_name(seg["operator"][a], HOVER_NAME)
            if seg["operator"][a]
            else "host (no device work launched)"
        )
        row = rows[a]
        assert row is not None  # runs hold the segments on a row drawn only
        out["x0"].append(round((seg["start_ns"][a] - t0) / 1e6, 4))
        out["x1"].append(round((seg["end_ns"][b] - t0) / 1e6, 4))
        out["row"].append(row)
        out["kind"].append(seg["kind"][a])
        out["hover"].append(
            f"{seg['kind'][a]} · {who} · " + (what if len(run) == 1 else f"{len(run)} segments from {what}")
        )
        out["dur_us"].append(round(sum(seg["end_ns"][i] - seg["start_ns"][i] for i in run) / 1e3, 1))
        for r in ranks:
            on_row.setdefault(row, {})[r] = None
    out["ranks"] = {row: list(ranks) for row, ranks in on_row.items()}
    return out


def lane_of(kind: str, operator: str | None) -> str:
    """The fold lane a critical-path segment belongs to (host time and waits on the compute lane)."""
    if kind != "communication":
        return "compute"
    return "p2p" if operator in ("send", "recv") else "collective"


def _runs(keep: list[int], rows: list[int | None], kinds: list[str]) -> list[list[int]]:
    """Consecutive segments on one row and of one kind, as runs: a long window's path stays a few traces' worth."""
    runs: list[list[int]] = []
    for i in keep:
        if (
            runs
            and rows[runs[-1][-1]] == rows[i]
            and kinds[runs[-1][-1]] == kinds[i]
            and runs[-1][-1] == i - 1
        ):
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def _edges(seg: dict[str, list[Any]], rows: list[int | None], t0: int) -> PathEdges:
    """Where the path goes from one rank to another (drawn rows apart): the second rank waited for the first one
    until that moment (its arrival in a collective, or its half of a send/recv)."""
    out: PathEdges = {"x": [], "y0": [], "y1": [], "hover": []}
    for i in range(1, len(rows)):
        a, b = rows[i - 1], rows[i]
        if (
            seg["rank"][i] == seg["rank"][i - 1]
            or a is None
            or b is None
            or a == b
            or len(out["x"]) >= MAX_PATH
        ):
            continue
        x = round((seg["start_ns"][i] - t0) / 1e6, 4)
        out["x"].append(x)
        out["y0"].append(a)
        out["y1"].append(b)
        out["hover"].append(
            f"waiting · rank {seg['rank'][i]} waited for rank {seg['rank'][i - 1]} until {x:.3f} ms"
        )
    return out
