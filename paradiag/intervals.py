"""Interval arithmetic on numpy arrays of [start, end) nanoseconds (the parsers and the analysis share it)."""

from __future__ import annotations

import numpy as np


def merge(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals as sorted, disjoint intervals (touching intervals are joined)."""
    if len(start) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    order = np.argsort(start, kind="stable")
    s = np.asarray(start)[order]
    e = np.maximum.accumulate(np.asarray(end)[order])
    # A new run begins where an interval starts after everything before it has ended.
    new_run = np.empty(len(s), dtype=bool)
    new_run[0] = True
    new_run[1:] = s[1:] > e[:-1]
    firsts = np.flatnonzero(new_run)
    lasts = np.append(firsts[1:] - 1, len(s) - 1)
    return s[firsts], e[lasts]


def union_length(start: np.ndarray, end: np.ndarray) -> int:
    """Total time covered by at least one interval."""
    s, e = merge(start, end)
    return int((e - s).sum())


def clip(start: np.ndarray, end: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Intervals cut to [lo, hi); empty ones dropped."""
    s = np.maximum(start, lo)
    e = np.minimum(end, hi)
    keep = e > s
    return s[keep], e[keep]


def covered_within(start: np.ndarray, end: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """For each window [lo[i], hi[i]), the time covered by the union of the intervals."""
    s, e = merge(start, end)
    if len(s) == 0:
        return np.zeros(len(lo), dtype=np.int64)
    # Cumulative covered time up to t, evaluated at the window bounds.
    cum = np.concatenate(([0], np.cumsum(e - s)))

    def covered_until(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(s, t, side="right")  # intervals starting at or before t
        partial = np.where(i > 0, np.clip(t - s[np.maximum(i - 1, 0)], 0, None), 0)
        last_len = np.where(i > 0, (e - s)[np.maximum(i - 1, 0)], 0)
        return cum[np.maximum(i - 1, 0)] * (i > 0) + np.minimum(partial, last_len)

    return (covered_until(np.asarray(hi)) - covered_until(np.asarray(lo))).astype(np.int64)


def longest_gap_within(start: np.ndarray, end: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """For each window [lo[i], hi[i]), its longest stretch that no interval covers (the whole window where none
    does)."""
    s, e = merge(start, end)  # disjoint and sorted: the ends are sorted too
    out = np.zeros(len(lo), dtype=np.int64)
    for i, (a, b) in enumerate(zip(np.asarray(lo).tolist(), np.asarray(hi).tolist(), strict=True)):
        first, stop = np.searchsorted(e, a, side="right"), np.searchsorted(s, b, side="left")
        if first >= stop:
            out[i] = max(b - a, 0)
            continue
        ss, ee = np.maximum(s[first:stop], a), np.minimum(e[first:stop], b)
        out[i] = max(int(ss[0]) - a, int((ss[1:] - ee[:-1]).max(initial=0)), b - int(ee[-1]), 0)
    return out
