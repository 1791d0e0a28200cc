"""The Marey (pipeline) model of one step: stages as stations, each operator instance a band across the devices
of its stage, devices folded into rows by mesh group and similarity.

``instance_matrix`` pairs the events of a stage's devices into operator instances (the same operator at the same
position, its n-th occurrence in the step, on every device): a bands x devices matrix of event indices.
``fold_rows`` decides which rows a stage is drawn with: alike devices become one row (the stage, or a mesh group
that runs late), anomalous devices stay single. ``row_times`` gives each row's band times (median over its
devices, spread, slowest device) and ``merge_bands`` merges neighbouring bands for a window so the drawing's size
is bounded at any zoom. ``pass_labels`` names the pipeline pass (micro-batch, direction) each band belongs to, from
the passes the analysis stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from paradiag.analysis.frame import OUTLIER_DEVIATIONS, robust_spread

FLOOR_FRAC = 0.01  # ... and at least this fraction of the step, so near-identical devices are never outliers
MAX_BANDS = 150  # per stage and view (a row ~1000 px wide); beyond it, neighbours merge whatever their category (dominant colour kept)


def instance_matrix(column: np.ndarray, name: np.ndarray, start: np.ndarray, columns: int) -> np.ndarray:
    """Indices (into the event arrays) of the operator instances common to every device, bands x devices, bands
    in order of their median start. ``column``: each event's device column (0..columns-1); ``name``: an
    integer code of its operator name."""
    if len(column) == 0 or columns == 0:
        return np.zeros((0, columns), dtype=np.int64)
    order = np.lexsort((start, name, column))
    col, nm = column[order], name[order]
    first = np.r_[True, (col[1:] != col[:-1]) | (nm[1:] != nm[:-1])]
    position = np.arange(len(col))
    occurrence = position - np.maximum.accumulate(np.where(first, position, 0))
    key = nm.astype(np.int64) * (int(occurrence.max()) + 1) + occurrence
    unique, counts = np.unique(key, return_counts=True)
    common = np.isin(key, unique[counts == columns])
    idx, key, col = order[common], key[common], col[common]
    matrix = idx[np.lexsort((col, key))].reshape(-1, columns)
    return matrix[np.argsort(np.median(start[matrix], axis=1), kind="stable")]


def pass_labels(passes: pa.Table, rank: int, step: int, times: np.ndarray) -> list[str]:
    """For each time (a band's start on ``rank``), the pipeline pass of the analysis (``Diagnosis.passes``)
    holding it: "F3" or "B3" (micro-batch 3; "F3 c1" for model chunk 1 of an interleaved schedule), "" outside
    every pass (the optimizer, DP syncs)."""
    mine = passes.filter(
        pc.and_(pc.equal(passes.column("rank"), rank), pc.equal(passes.column("step"), step))
    ).sort_by("start_ns")
    rows = mine.select(["direction", "micro_batch", "chunk", "start_ns", "end_ns"]).to_pylist()
    chunked = any(r["chunk"] for r in rows)
    labels = [
        f"{r['direction'][0].upper()}{r['micro_batch']}" + (f" c{r['chunk']}" if chunked else "")
        for r in rows
    ]
    lo = np.array([r["start_ns"] for r in rows], dtype=np.int64)
    hi = np.array([r["end_ns"] for r in rows], dtype=np.int64)
    at = np.searchsorted(lo, times, side="right") - 1
    return [
        labels[i] if i >= 0 and t <= hi[i] else "" for i, t in zip(at.tolist(), times.tolist(), strict=True)
    ]


def outliers(values: np.ndarray, floor: float) -> np.ndarray:
    """Values more than OUTLIER_DEVIATIONS robust deviations (at least ``floor``) from their median."""
    if len(values) < 3:
        return np.zeros(len(values), dtype=bool)
    med = float(np.median(values))
    spread = max(robust_spread(values), floor)
    return np.abs(values - med) > OUTLIER_DEVIATIONS * spread


@dataclass
class Row:
    kind: str  # "stage" (alike devices), "group" (a mesh group folded), "device"
    label: str
    members: list[int]  # device columns
    anomalous: list[int] = field(
        default_factory=list
    )  # columns among the members that stand out by busy time


def device_scores(start: np.ndarray, end: np.ndarray, compute: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per device: its busy compute time, and how late its band ends run (median over bands, against each
    band's median end)."""
    busy = (end[compute] - start[compute]).sum(axis=0).astype(np.float64)
    if len(end) == 0:
        return busy, np.zeros(end.shape[1])
    late = np.median(end - np.median(end, axis=1, keepdims=True), axis=0)
    return busy, late


def fold_rows(
    start: np.ndarray,
    end: np.ndarray,
    compute: np.ndarray,
    names: list[str],
    groups: list[int],
    step_ns: float,
    expand: str = "",
    keep: frozenset[int] = frozenset(),
    opened: frozenset[int] = frozenset(),
) -> list[Row]:
    """The rows of one stage (``names``: each device column's label, ``groups``: its mesh group). ``expand`` is
    "" (folded), "groups" (a row per group) or "devices" (a row per device); ``keep``: columns that stay single
    whatever their figures (the culprits of the findings); ``opened``: groups whose devices all get a row."""
    columns = list(range(len(names)))
    busy, late = device_scores(start, end, compute)
    floor = FLOOR_FRAC * step_ns
    odd = set(np.flatnonzero(outliers(busy, floor)).tolist())
    marked = odd | (keep & set(columns))
    if expand == "devices" or len(columns) <= 1:
        return _devices(columns, names, marked)
    if keep >= set(columns):  # the finding is about the whole stage: its rows are marked, not split
        marked, keep = set(columns), frozenset()
    single = sorted(odd | keep | {c for c in columns if groups[c] in opened})
    by_group: dict[int, list[int]] = {}
    for c in columns:
        by_group.setdefault(groups[c], []).append(c)
    grouped = [g for g in by_group if len(by_group[g]) > 1]
    if not grouped and expand == "groups":  # groups of one device: opening the stage shows its devices
        return _devices(columns, names, marked)
    if not grouped:  # no mesh groups to fold by: late devices stay single too
        single = sorted(set(single) | set(np.flatnonzero(outliers(late, floor)).tolist()))
    group_late = np.array([np.median(late[by_group[g]]) for g in grouped])
    late_groups = {
        g for g, out in zip(grouped, outliers(group_late, floor), strict=True) if out or expand == "groups"
    }
    rows: list[Row] = []
    rest = [c for c in columns if c not in single and groups[c] not in late_groups]
    if rest:
        rows.append(Row("stage", "", rest, [c for c in rest if c in marked]))
    for g in sorted(late_groups):
        members = [c for c in by_group[g] if c not in single]
        if members:
            rows.append(Row("group", "", members, [c for c in members if c in marked]))
    return rows + _devices(single, names, marked)


def _devices(columns: list[int], names: list[str], marked: set[int]) -> list[Row]:
    return [Row("device", names[c], [c], [c] if c in marked else []) for c in columns]


def row_times(start: np.ndarray, end: np.ndarray, members: list[int]) -> dict[str, np.ndarray]:
    """Per band, over a row's devices: median start and end, earliest start and latest end (the spread), and
    the slowest device (column) with its time."""
    st, ed = start[:, members], end[:, members]
    dur = ed - st
    slowest = np.argmax(dur, axis=1) if st.shape[1] else np.zeros(len(st), dtype=np.int64)
    return {
        "start": np.median(st, axis=1).astype(np.int64),
        "end": np.median(ed, axis=1).astype(np.int64),
        "lo": st.min(axis=1) if st.shape[1] else np.zeros(len(st), dtype=np.int64),
        "hi": ed.max(axis=1) if st.shape[1] else np.zeros(len(st), dtype=np.int64),
        "slow_col": np.asarray(members, dtype=np.int64)[slowest] if len(members) else slowest,
        "slow_ns": dur[np.arange(len(st)), slowest] if st.shape[1] else np.zeros(len(st), dtype=np.int64),
    }


def merge_bands(
    start: np.ndarray,
    end: np.ndarray,
    category: list[str],
    lo: int,
    hi: int,
    merge_frac: float,
    max_bands: int = MAX_BANDS,
) -> tuple[np.ndarray, np.ndarray]:
    """Which of a stage's bands (rows of ``start``/``end``: bands x rows of the drawing) overlap [lo, hi), and
    the merged band each falls into: neighbours of one category merge when every row's gap between them is
    under ``merge_frac`` of the window; beyond ``max_bands`` runs of neighbours merge whatever their category.
    Returns (visible band indices, merged group of each); an empty window, or one outside the step, has none."""
    if len(start) == 0 or start.shape[1] == 0 or hi <= lo:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    visible = np.flatnonzero((end.max(axis=1) > lo) & (start.min(axis=1) < hi))
    if len(visible) == 0:
        return visible, np.zeros(0, dtype=np.int64)
    st, ed = start[visible], end[visible]
    cats = np.asarray(category, dtype=object)[visible]
    gap = (st[1:] - np.maximum.accumulate(ed, axis=0)[:-1]).max(axis=1)
    joins = (cats[1:] == cats[:-1]) & (gap <= merge_frac * (hi - lo))
    group = np.r_[0, np.cumsum(~joins)]
    n = int(group[-1]) + 1
    if n > max_bands:
        group = group * max_bands // n
    return visible, group


def merged(values: np.ndarray, group: np.ndarray, how: str) -> np.ndarray:
    """``values`` (bands x rows) reduced over each merged group: "min" or "max"."""
    n = int(group[-1]) + 1 if len(group) else 0
    fill = np.iinfo(np.int64).max if how == "min" else np.iinfo(np.int64).min
    out = np.full((n, *values.shape[1:]), fill, dtype=np.int64)
    (np.minimum if how == "min" else np.maximum).at(out, group, values)
    return out


def dominant(category: list[str], dur: np.ndarray, group: np.ndarray) -> list[str]:
    """Per merged group, the category holding most of its time."""
    totals: dict[tuple[int, str], float] = {}
    for g, c, d in zip(group.tolist(), category, dur.tolist(), strict=True):
        totals[(g, c)] = totals.get((g, c), 0.0) + d
    best: dict[int, tuple[float, str]] = {}
    for (g, c), t in totals.items():
        if t > best.get(g, (-1.0, ""))[0]:
            best[g] = (t, c)
    return [best[g][1] for g in range(len(best))]


def shares(category: list[str], dur: np.ndarray, group: np.ndarray) -> list[list[tuple[str, float]]]:
    """Per merged group, each category's share of its time, largest first: a band merged from neighbours of
    several categories shows each (the dominant alone would paint a stage of compute and collectives as all
    collectives)."""
    totals: dict[int, dict[str, float]] = {}
    for g, c, d in zip(group.tolist(), category, dur.tolist(), strict=True):
        mine = totals.setdefault(g, {})
        mine[c] = mine.get(c, 0.0) + max(d, 0.0)
    out = []
    for g in range(len(totals)):
        total = sum(totals[g].values())
        parts = sorted(totals[g].items(), key=lambda kv: -kv[1])
        out.append([(c, round(t / total, 4)) for c, t in parts] if total > 0 else [(parts[0][0], 1.0)])
    return out


def bubbles(
    start: np.ndarray, end: np.ndarray, compute: np.ndarray, lo: int, hi: int, min_ns: float
) -> list[np.ndarray]:
    """Per row (column of ``start``/``end``): [start, end] pairs of the gaps with no compute longer than
    ``min_ns`` within the step, that overlap [lo, hi)."""
    if len(start) == 0:
        return [np.zeros((0, 2), dtype=np.int64) for _ in range(start.shape[1])]
    step_lo, step_hi = int(start.min()), int(end.max())
    out = []
    for j in range(start.shape[1]):
        order = np.argsort(start[compute, j], kind="stable")
        s, e = start[compute, j][order], end[compute, j][order]
        a = np.r_[step_lo, np.maximum.accumulate(e) if len(e) else e]
        b = np.r_[s, step_hi]
        keep = (b - a > min_ns) & (b > lo) & (a < hi)
        out.append(np.column_stack([a[keep], b[keep]]))
    return out
