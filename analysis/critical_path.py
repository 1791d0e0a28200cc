"""The critical path of each step through the multi-rank dependency graph, and what it is made of.

A step ends with the last device work of any rank. Walking back from there, each piece of work was released by
what came right before it:

* on one rank, device work runs after the work that ended last before it started (whatever its stream: a kernel
  waits on its own stream and on the events other streams record) and was launched before it: the dependency
  graph's rule (``paradiag.analysis.depgraph.released_by``), the one the what-if replays; the time between the two
  is a **host** gap (the device had nothing launched: the host was late);
* a collective kernel cannot finish before its last member arrives: where this rank arrived before the last one,
  the path goes to the last arrival (``late_rank`` in ``participation``) and continues on that rank from its
  arrival; the time after the last arrival is **communication**;
* a receive that started before its send was released by the sender (and a send that waited for its receive by
  the receiver): the path continues on the other rank from the moment it started its half;
* a compute or memory kernel is **compute**; a device-side wait (``sync``) is **waiting** until the end of the
  work of another stream that ended last while it ran (what it waited for: the path goes on there). Waiting in a
  collective or a receive is never on the path: the path leaves for the rank that was waited for.

The walk stops on the rank where the step's device work began, at that rank's host start of the step (the time
before its first kernel is host time). The segments tile the path without gaps, so their sum is the path length.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from paradiag.analysis.depgraph import END_TOLERANCE_NS, EndIndex, released_by
from paradiag.analysis.frame import Frame, find_rows
from paradiag.units import ms

__all__ = ["END_TOLERANCE_NS", "PATH_KINDS", "TOP_OPERATORS", "composition", "critical_path"]
PATH_KINDS = ("compute", "communication", "waiting", "host")
TOP_OPERATORS = 10


def _releases(participation: pa.Table, p2p: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """The communication kernels that waited for another rank: (rank, start, end) of each (columns of the first
    array, rows sorted) and, in the same rows of the second, (that rank, its arrival). A kernel listed twice keeps
    its last release (the send/receive pairs' over the collectives'). Numbers, not a dict of tuples: at 1024 ranks
    a dict of the million waits held hundreds of MB of Python objects."""

    def col(table: pa.Table, name: str) -> np.ndarray:
        return np.asarray(table.column(name).to_numpy(), dtype=np.int64)

    rank, start, end, last, late = (
        col(participation, k) for k in ("rank", "start_ns", "end_ns", "last_arrival_ns", "late_rank")
    )
    src, dst, s0, s1, r0, r1 = (
        col(p2p, k) for k in ("src", "dst", "send_start_ns", "send_end_ns", "recv_start_ns", "recv_end_ns")
    )
    c = (late >= 0) & (late != rank) & (last > start)
    recv_waited = (s0 > r0) & (src != dst)
    send_waited = ~recv_waited & (r0 > s0) & (src != dst)
    parts = (
        (c, rank, start, end, late, last),
        (recv_waited, dst, r0, r1, src, s0),
        (send_waited, src, s0, s1, dst, r0),
    )
    keys = np.stack([np.concatenate([p[i][p[0]] for p in parts]) for i in (1, 2, 3)], axis=1)
    values = np.stack([np.concatenate([p[i][p[0]] for p in parts]) for i in (4, 5)], axis=1)
    listed = np.concatenate(
        [np.flatnonzero(c), len(c) + np.flatnonzero(recv_waited), len(c) + np.flatnonzero(send_waited)]
    )
    order = np.lexsort((listed, keys[:, 2], keys[:, 1], keys[:, 0]))
    keys, values = keys[order], values[order]
    last_of_key = np.append((keys[1:] != keys[:-1]).any(axis=1), True)[
        : len(keys)
    ]  # the last listed of equal keys
    return keys[last_of_key], values[last_of_key]


def _released(work: Frame, releases: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Per row of ``work``, its release (the rank it waited for and that rank's arrival; -1, -1 for none)."""
    keys, values = releases
    out = np.full((len(work), 2), -1, np.int64)
    comm = np.flatnonzero(
        work.kind == work.code("kinds", "communication")
    )  # only a transfer waits for a rank
    if not len(keys) or not len(comm):
        return out
    inside = (keys[:, 1] >= work.start.min()) & (keys[:, 1] <= work.start.max())  # this step's, give or take
    keys, values = keys[inside], values[inside]
    rows = np.stack([work.rank[comm].astype(np.int64), work.start[comm], work.end[comm]], axis=1)
    found = find_rows(keys, rows)
    hit = found >= 0
    out[comm[hit]] = values[found[hit]]
    return out


def critical_path(frame: Frame, participation: pa.Table, p2p: pa.Table, steps: pa.Table) -> pa.Table:
    """Per step, the segments of its critical path: step, rank, track (-1 for host gaps), kind (one of
    ``PATH_KINDS``), operator (the ATen operator or kernel; the collective; null for host gaps), start_ns,
    end_ns; in time order."""
    releases = _releases(participation, p2p)
    host_start = {
        (r, s): t
        for r, s, t in zip(*steps.select(["rank", "step", "start_ns"]).to_pydict().values(), strict=True)
    }
    timed = frame.end > frame.start
    rows: list[tuple[Any, ...]] = []
    for step in np.unique(
        frame.step[timed & (frame.step >= 0)]
    ).tolist():  # one step's events copied at a time
        work = frame.take(timed & (frame.step == step))
        rows += reversed(_walk(work, step, _released(work, releases), host_start))
    cols: list[Any] = list(zip(*rows, strict=True)) if rows else [()] * 7
    return pa.table(
        {
            "step": pa.array(cols[0], pa.int32()),
            "rank": pa.array(cols[1], pa.int32()),
            "track": pa.array(cols[2], pa.int32()),
            "kind": pa.array(cols[3], pa.string()),
            "operator": pa.array(cols[4], pa.string()),
            "start_ns": pa.array(cols[5], pa.int64()),
            "end_ns": pa.array(cols[6], pa.int64()),
        }
    )


def _by_end(work: Frame, index: EndIndex) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """rank -> (ends in increasing order, the matching row indices of ``work``), from its ``index``."""
    order = index.by_end
    ranks, firsts = np.unique(work.rank[order], return_index=True)
    bounds = np.append(firsts, len(order))
    return {
        int(r): (work.end[order[a:b]], order[a:b])
        for r, a, b in zip(ranks.tolist(), bounds[:-1], bounds[1:], strict=True)
    }


def _walk(
    work: Frame, step: int, released: np.ndarray, host_start: dict[tuple[int, int], int]
) -> list[tuple[Any, ...]]:
    """The segments of one step's path, latest first."""
    index, arriving = EndIndex.of(work), _arriving(work)
    ends = _by_end(work, index)
    # What released each event's start, asked once for all of them: the walk's answer unless it is on the path
    # already (then asked again, the path left out: the answer is the same wherever it is not on the path).
    anchor = released_by(
        work, index.by_end, index.position(work.rank, work.start), work.rank, work.start, work.launch
    )
    last = int(np.argmax(work.end))
    rank, t, launch = int(work.rank[last]), int(work.end[last]), -1
    visited = np.zeros(len(work), bool)
    out: list[tuple[Any, ...]] = []
    at_start: int | None = None  # the event whose start ``t`` is
    while True:
        a = int(anchor[at_start]) if at_start is not None else -2
        if a == -1 or (a >= 0 and not visited[a]):
            e: int | None = a if a >= 0 else None
        else:
            e = _released_at(work, index, rank, t, launch, visited)
        if e is None:
            begin = host_start.get((rank, step))
            if begin is not None and begin < t:
                out.append((step, rank, -1, "host", None, begin, t))
            return out
        visited[e] = True
        start, end = int(work.start[e]), min(int(work.end[e]), t)
        if end < t:
            out.append((step, rank, -1, "host", None, end, t))
        by, arrival = int(released[e, 0]), int(released[e, 1])
        if by >= 0 and by in ends and arrival < end:
            out.append((step, rank, int(work.track[e]), "communication", _operator(work, e), arrival, end))
            k = arriving(by, arrival)  # the other rank's kernel that arrived: what released its start goes on
            rank, t, launch, at_start = (
                by,
                arrival,
                int(work.launch[k]) if k >= 0 else -1,
                k if k >= 0 else None,
            )
            continue
        kind = _kind(work, e)
        other = _other_stream_before(work, ends[rank], e, end, visited) if kind == "waiting" else None
        if other is not None:  # the wait ended when that work did: only the rest of it is on the path
            start = min(int(work.end[other]), end)
        out.append((step, rank, int(work.track[e]), kind, _operator(work, e), start, end))
        t, launch, at_start = start, int(work.launch[e]), e if other is None else None


def _released_at(
    work: Frame, index: EndIndex, rank: int, t: int, launch: int, visited: np.ndarray
) -> int | None:
    """The row of the rank's work that released time ``t`` of the path (``depgraph.released_by``: it ended last at
    or before ``t`` and started before it; ``launch``: the launch of the work released, -1 unknown), not already on
    the path."""
    r, at = np.array([rank], np.int64), np.array([t], np.int64)
    found = int(
        released_by(
            work, index.by_end, index.position(r, at), r, at, np.array([launch], np.int64), excluded=visited
        )[0]
    )
    return found if found >= 0 else None


def _arriving(work: Frame) -> Callable[[int, int], int]:
    """(rank, arrival) -> the row of the rank's communication kernel that started at ``arrival`` (the last member
    of a collective, the other half of a send/receive pair: what the path continues from), -1 for none."""
    comm = np.flatnonzero(work.kind == work.code("kinds", "communication"))
    base = int(work.start.min()) if len(work) else 0
    span = int(work.start.max()) - base + 1 if len(work) else 1
    keys = work.rank[comm].astype(np.int64) * span + (work.start[comm] - base)
    order = np.argsort(keys, kind="stable")
    keys, rows = keys[order], comm[order]

    def row(rank: int, arrival: int) -> int:
        if not len(keys) or not base <= arrival < base + span:
            return -1
        key = rank * span + arrival - base
        i = int(np.searchsorted(keys, key))
        return int(rows[i]) if i < len(keys) and keys[i] == key else -1

    return row


def _other_stream_before(
    work: Frame, by_end: tuple[np.ndarray, np.ndarray], wait: int, t: int, visited: np.ndarray
) -> int | None:
    """The work of another stream that ended last while the device-side wait ``wait`` ran (up to ``t``): the
    work it waited for."""
    ends, rows = by_end
    pos = int(np.searchsorted(ends, t + END_TOLERANCE_NS, side="right")) - 1
    while pos >= 0 and ends[pos] > work.start[wait]:
        row = int(rows[pos])
        if not visited[row] and work.track[row] != work.track[wait] and work.start[row] < t:
            return row
        pos -= 1
    return None


def _kind(work: Frame, row: int) -> str:
    kind = work.kinds[work.kind[row]]
    if kind == "sync":
        return "waiting"
    return "communication" if kind == "communication" else "compute"


def _operator(work: Frame, row: int) -> str:
    if work.kinds[work.kind[row]] == "communication" and work.collective[row] >= 0:
        return work.collectives[work.collective[row]]
    return work.names[work.op[row]] if work.op[row] >= 0 else work.names[work.name[row]]


def composition(path: pa.Table) -> list[dict[str, Any]]:
    """Per step: the path's span and length, time per kind, per rank (by kind) and the operators taking most of
    it (the report's ``critical_path``)."""
    out = []
    for step in sorted(set(path.column("step").to_pylist())):
        rows = path.filter(pc.equal(path.column("step"), step)).to_pylist()
        by_kind = dict.fromkeys(PATH_KINDS, 0)
        by_rank: dict[int, dict[str, int]] = {}
        by_op: dict[tuple[str, str], int] = {}
        for r in rows:
            d = r["end_ns"] - r["start_ns"]
            by_kind[r["kind"]] += d
            mine = by_rank.setdefault(r["rank"], dict.fromkeys(PATH_KINDS, 0))
            mine[r["kind"]] += d
            if r["operator"] is not None:
                by_op[(r["operator"], r["kind"])] = by_op.get((r["operator"], r["kind"]), 0) + d
        top = sorted(by_op.items(), key=lambda kv: -kv[1])[:TOP_OPERATORS]
        out.append(
            {
                "step": step,
                "start_ns": min(r["start_ns"] for r in rows),
                "end_ns": max(r["end_ns"] for r in rows),
                "length_ns": sum(by_kind.values()),
                "segments": len(rows),
                "rank_switches": sum(1 for a, b in itertools.pairwise(rows) if a["rank"] != b["rank"]),
                **{f"{k}_ns": v for k, v in by_kind.items()},
                "by_rank": [
                    {"rank": rk, **{f"{k}_ns": v for k, v in kinds.items()}}
                    for rk, kinds in sorted(by_rank.items())
                ],
                "by_operator": [{"operator": op, "kind": kind, "time_ns": ns} for (op, kind), ns in top],
            }
        )
    return out


def critical_path_line(step: dict[str, Any]) -> str:
    """One step's critical path: its length, each kind's share, and the rank holding most of its compute."""
    length = step["length_ns"] or 1
    shares = ", ".join(
        f"{kind} {100 * step[f'{kind}_ns'] / length:.0f}%"
        for kind in ("compute", "communication", "waiting", "host")
    )
    top = max(step["by_rank"], key=lambda r: r["compute_ns"], default=None)
    where = (
        f"; most compute on rank {top['rank']} ({ms(top['compute_ns'])} ms)"
        if top and top["compute_ns"]
        else ""
    )
    return f"critical path of step {step['step']}: {ms(step['length_ns'])} ms ({shares}){where}"
