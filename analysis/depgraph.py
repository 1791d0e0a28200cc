"""The dependency graph of the profiled steps: which work released each device event.

One rule for which work released an event (:func:`released_by`), walked back by the critical path
(``paradiag.analysis.critical_path``, step by step) and, as each event's anchor in the :class:`Graph` of the
profiled steps (:func:`build_graph`), replayed forward by the what-if (``paradiag.analysis.replay``). Every device
event of a profiled step is a node; each waits for

* the previous work of its stream (a stream runs in order), and
* the work of its rank that ended last before it started (its *anchor*, any stream: :func:`released_by`): the event
  a stream wait or a host synchronisation released it on. The time from the anchor's end to its start is a **host
  gap** (the host launched it that much later) and is kept: the host that was late after that work is late after
  it again. Work launched after the event cannot have released it (its launch came later: a receive posted
  early that happened to end just before a collective started);
* a collective or a send/receive pair is one *instance*: each member arrives when its own dependencies allow, and
  ends its ``tail`` after the last arrival (the transfer, once everyone was there). A side that finished before the
  other arrived (an eager send) never waited and keeps its own duration.

The measured times satisfy every edge, so events in order of their measured start are in dependency order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from paradiag.analysis import comm
from paradiag.analysis.frame import Frame, group_bounds

P2P = ("send", "recv", "send_recv")
# Work that ends this little after the next work starts still released it: traces round times (Kineto's integer
# microseconds, float microseconds on an epoch clock), so a kernel that waited for another can seem to start 1 ns
# before the other ended.
END_TOLERANCE_NS = 1000


@dataclass
class Graph:
    """The device events of the profiled steps, in order of measured start, with their dependencies (see the
    module docstring). Indices are positions in this order (int32: a job's events number far fewer than 2**31, and
    a 1024-rank job's graph holds 2 M of each); -1 where there is none."""

    rank: np.ndarray
    step: np.ndarray
    name: np.ndarray
    compute: np.ndarray  # bool: a compute kernel (what compute edits scale)
    start: np.ndarray
    end: np.ndarray
    pred: np.ndarray  # the previous event of the stream
    lag: np.ndarray  # start - the predecessor's end, at most 0 (traces round times)
    anchor: (
        np.ndarray
    )  # the work that released it (released_by): its rank's that ended last before it started
    received: np.ndarray  # a compute kernel: the receive it waits for (see _consumers)
    chunk: np.ndarray  # the model chunk of the pipeline pass the event lies in, -1 outside passes
    gap: np.ndarray  # start - the anchor's end (the host gap); the start itself without an anchor
    instance: np.ndarray  # the collective or send/receive pair the event is a member of
    tail: np.ndarray  # end - the instance's last arrival (or own start if later)
    floor: np.ndarray  # a member that never waited: its own duration
    copy: np.ndarray  # a send or receive: how long it takes once the other side is there (_copies); else -1
    inst_key: np.ndarray  # per instance: collective code (-1: send/receive), bytes, members, 1 if on one host
    last: dict[tuple[int, int], int]  # (rank, step) -> the event that ended last
    step_ns: dict[tuple[int, int], int]  # (rank, step) -> measured host span

    def __len__(self) -> int:
        return len(self.rank)


def build_graph(
    frame: Frame,
    steps: pa.Table,
    p2p: pa.Table,
    host_of: Mapping[int, str | None],
    passes: pa.Table | None = None,
    host_ranks: frozenset[int] = frozenset(),
) -> Graph:
    """The replay graph of ``frame``'s steps (``p2p``: the matched send/receive pairs; ``passes``: the pipeline
    passes, whose model chunks ``stages=balanced`` moves layers within; ``host_ranks``: the ranks whose host is
    their device, see :func:`paradiag.analysis.comm.host_deliveries`). ``frame`` is consumed: its rows are put in
    the graph's order in place (``Frame.keep``) and the graph shares its arrays, so that a job's millions of events
    are never held twice; pass a copy (``frame.take(slice(None))``) to keep using it."""
    keep = (frame.step >= 0) & (frame.end >= frame.start)
    order = np.flatnonzero(keep)[np.lexsort((frame.rank[keep], frame.start[keep]))]
    del keep
    f = frame
    f.drop(
        "op", "peer"
    )  # each array is dropped once the graph no longer reads it (at 1024 ranks 8-17 MB each)
    f.keep(order)
    n = len(f)
    send, recv = comm.pair_rows(f, p2p)
    ok = (send >= 0) & (recv >= 0)
    send, recv = send[ok], recv[ok]
    received = _consumers(f, recv)  # where the host took the data in: at the receive's measured end
    # On a CPU rank a send or receive ends where its data went across, not where its host waited on it
    # (comm.host_deliveries; the diagnosis' pairs carry it)
    if comm.DELIVERED[0] in p2p.column_names:
        f.end[send], f.end[recv] = (
            np.asarray(p2p.column(c).to_numpy(), np.int64)[ok] for c in comm.DELIVERED
        )
    else:
        f.end[send], f.end[recv] = comm.host_deliveries(f, send, recv, host_ranks)
    pred, lag = _stream_predecessors(f)
    f.drop("track")
    anchor, gap = anchors(f)
    instance, tail, floor, inst_key = _instances(f, send, recv, host_of)
    f.drop("collective", "group", "seq", "bytes")
    cols = steps.select(["rank", "step", "start_ns", "end_ns"]).to_pydict()
    step_ns = {
        (r, s): e - b
        for r, s, b, e in zip(cols["rank"], cols["step"], cols["start_ns"], cols["end_ns"], strict=True)
    }
    by_end, firsts = group_bounds(f.step, f.rank, within=f.end)
    lasts = np.append(firsts[1:], n) - 1 if n else firsts
    last = {(int(f.rank[by_end[i]]), int(f.step[by_end[i]])): int(by_end[i]) for i in lasts.tolist()}
    del by_end, firsts, lasts
    compute = f.kind == f.code("kinds", "compute")
    f.drop("kind", "launch")
    return Graph(
        rank=f.rank, step=f.step, name=f.name, compute=compute, start=f.start, end=f.end,
        pred=pred, lag=lag, anchor=anchor, received=received, chunk=_chunks(f, passes), gap=gap, instance=instance, tail=tail, floor=floor,
        copy=_copies(f, send, recv, floor), inst_key=inst_key, last=last, step_ns=step_ns,
    )  # fmt: skip


def _chunks(f: Frame, passes: pa.Table | None) -> np.ndarray:
    """Per event, the model chunk of the pass of its rank and step that it starts in, -1 for none."""
    chunk = np.full(len(f), -1, np.int32)
    if passes is None or not passes.num_rows or not len(f):
        return chunk
    p = {
        k: np.asarray(passes.column(k).to_numpy(), np.int64)
        for k in ("rank", "step", "chunk", "start_ns", "end_ns")
    }
    base = min(int(p["start_ns"].min()), int(f.start.min()))
    span = max(int(p["end_ns"].max()), int(f.start.max())) - base + 1
    keys = p["rank"] * span + (p["start_ns"] - base)
    order = np.argsort(keys, kind="stable")
    pos = np.searchsorted(keys[order], f.rank.astype(np.int64) * span + (f.start - base), side="right") - 1
    at = order[np.maximum(pos, 0)]
    inside = (pos >= 0) & (p["rank"][at] == f.rank) & (p["step"][at] == f.step) & (f.start < p["end_ns"][at])
    chunk[inside] = p["chunk"][at[inside]]
    return chunk


def _stream_predecessors(f: Frame) -> tuple[np.ndarray, np.ndarray]:
    """Per event, the previous event of its stream (rank, track) and how far before its end it started (0 or less).

    An event that started well before its predecessor ended (more than END_TOLERANCE_NS) did not wait for it: an
    asynchronous send, receive or collective that a host lane records from its posting to its completion (a CPU
    rank's isend waited on at the end of the step) is followed on its lane by work posted right after it. That
    work has no stream predecessor; its anchor (the work that ended last before it started) releases it. Tied to
    the predecessor's end, a replay would hold it for as long as the transfer waits for its peer."""
    order = np.lexsort(
        (np.arange(len(f)), f.track, f.rank)
    )  # rows are in start order: stable keeps it per stream
    pred = np.full(len(f), -1, np.int32)
    same = (f.rank[order][1:] == f.rank[order][:-1]) & (f.track[order][1:] == f.track[order][:-1])
    pred[order[1:][same]] = order[:-1][same]
    lag = np.where(pred >= 0, np.minimum(f.start - f.end[np.maximum(pred, 0)], 0), 0)
    overlapped = lag < -END_TOLERANCE_NS
    pred[overlapped], lag[overlapped] = -1, 0
    return pred, lag


@dataclass(frozen=True)
class EndIndex:
    """Events in order of (rank, end), as one sorted key: what :func:`released_by` searches. ``key`` is
    ``rank * span + (end - base)``: queries at any time within the events' span stay within their rank's range."""

    by_end: np.ndarray  # event rows in order of (rank, end; ties in row order)
    sorted_ends: np.ndarray
    base: int
    span: int

    @classmethod
    def of(cls, f: Frame) -> EndIndex:
        n = len(f)
        base = int(f.start.min()) if n else 0
        span = int(f.end.max() - base + 2 * END_TOLERANCE_NS + 1) if n else 1
        ends = (f.rank.astype(np.int64) * span) + (f.end - base)
        by_end = np.argsort(ends, kind="stable")
        return cls(by_end, ends[by_end], base, span)

    def position(self, rank: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Per query, the position in ``by_end`` of the rank's last event that ended at or before ``t`` (within
        END_TOLERANCE_NS); a position outside the rank (another rank's, or -1) where none did."""
        query = rank.astype(np.int64) * self.span + (t - self.base + END_TOLERANCE_NS)
        by_query = np.argsort(
            query, kind="stable"
        )  # sorted queries walk the ends in order: many times faster
        pos = np.empty(len(query), np.int64)
        pos[by_query] = np.searchsorted(self.sorted_ends, query[by_query], side="right") - 1
        return pos


LAUNCH_TRIES = 16  # candidates stepped back over looking for work launched before the released one ...
ANY_TRIES = 4  # ... and then for any work before it


def released_by(
    f: Frame,
    by_end: np.ndarray,
    pos: np.ndarray,
    rank: np.ndarray,
    t: np.ndarray,
    launch: np.ndarray,
    before: np.ndarray | None = None,
    excluded: np.ndarray | None = None,
) -> np.ndarray:
    """Which work released each query: the work of its ``rank`` that ended last at or before ``t`` (within
    END_TOLERANCE_NS; ``pos``: :meth:`EndIndex.position` of the query) and started before it, and, where the traces
    give both launches, was launched no later than the work released (``launch``, -1 unknown): work launched after
    an event cannot have released it (a receive posted early that happened to end just before a collective
    started). Where no such work is among the LAUNCH_TRIES latest, the latest of the rank's work that started
    before it (ANY_TRIES). ``before``: the query is the start of the event at this row of ``f`` (in order of start):
    work that started at the same time and comes before it in that order counts; ``excluded``: rows that never
    count (the work already on a path). -1 where none."""
    found = _step_back(f, by_end, pos, rank, t, launch, before, excluded, LAUNCH_TRIES)
    missing = np.flatnonzero(found < 0)
    if len(missing):
        found[missing] = _step_back(
            f,
            by_end,
            pos[missing],
            rank[missing],
            t[missing],
            None,
            None if before is None else before[missing],
            excluded,
            ANY_TRIES,
        )
    return found


def anchors(f: Frame) -> tuple[np.ndarray, np.ndarray]:
    """Per event (``f`` in order of start), its anchor: the work that released it (:func:`released_by` at its
    start, work before it in that order), and the host gap after it (its start without an anchor)."""
    index = EndIndex.of(f)
    pos = index.position(f.rank, f.start)
    by_end = index.by_end
    del index  # each of these is as long as the job's events: dropped once used
    anchor = released_by(f, by_end, pos, f.rank, f.start, f.launch, before=np.arange(len(f)))
    del by_end, pos
    gap = np.where(anchor >= 0, f.start - f.end[np.maximum(anchor, 0)], f.start)
    return anchor.astype(np.int32), gap


def _step_back(
    f: Frame,
    by_end: np.ndarray,
    pos: np.ndarray,
    rank: np.ndarray,
    t: np.ndarray,
    launch: np.ndarray | None,
    before: np.ndarray | None,
    excluded: np.ndarray | None,
    tries: int,
) -> np.ndarray:
    """Per query, the first of ``by_end[pos]``, ``by_end[pos - 1]``, ... (``tries`` at most) of its rank that started
    before ``t`` (or at ``t`` and before the row ``before``), is not ``excluded`` and, with ``launch``, was not
    launched after it; -1 where none."""
    anchor = np.full(len(pos), -1, np.int64)
    for _ in range(tries):
        ok = pos >= 0
        cand = np.where(ok, by_end[np.maximum(pos, 0)], -1)
        c = np.maximum(cand, 0)
        ok &= f.rank[c] == rank
        good = ok & (f.start[c] < t)
        if before is not None:
            good |= ok & (f.start[c] == t) & (cand < before)
        if excluded is not None:
            good &= ~excluded[c]
        if launch is not None:
            good &= ~((f.launch[c] > launch) & (launch >= 0))
        anchor = np.where(good & (anchor < 0), cand, anchor)
        pos = np.where(ok & ~good & (anchor < 0), pos - 1, -1)
        if not (pos >= 0).any():
            break
    return anchor


def _instances(
    f: Frame, send: np.ndarray, recv: np.ndarray, host_of: Mapping[int, str | None]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per event its instance (collectives: the same (group, step, seq) on two members or more; send/receive:
    the matched pairs), tail and floor; per instance what makes transfers comparable: collective (-1: a
    send/receive pair), bytes, members and 1 where every member is on one host (columns of one array)."""
    n = len(f)
    instance = np.full(n, -1, np.int32)
    is_coll = (
        (f.kind == f.code("kinds", "communication"))
        & ~np.isin(f.collective, f.codes("collectives", P2P))
        & (f.group >= 0)
        & (f.seq >= 0)
    )
    rows = np.flatnonzero(is_coll)
    order, firsts = group_bounds(f.seq[rows], f.step[rows], f.group[rows])
    counts = np.diff(np.append(firsts, len(order)))
    run = np.repeat(np.arange(len(firsts)), counts)
    keep = counts >= 2  # a collective with one member in the traces: nobody to wait for
    renumber = np.cumsum(keep) - 1
    members = rows[order]
    instance[members[keep[run]]] = renumber[run[keep[run]]]
    instance[send] = instance[recv] = int(keep.sum()) + np.arange(len(send))
    host = _host_codes(f.rank, host_of)
    has = np.flatnonzero(instance >= 0)
    k = instance[has]
    total = int(keep.sum()) + len(send)
    low, high = np.full(total, np.iinfo(np.int64).max), np.full(total, -1, np.int64)
    np.minimum.at(low, k, host[has])
    np.maximum.at(high, k, host[has])
    size, nbytes, kind = (
        np.bincount(k, minlength=total),
        np.zeros(total, np.int64),
        np.full(total, -1, np.int64),
    )
    np.maximum.at(nbytes, k, f.bytes[has])
    is_collective = has[f.collective[has] >= 0] if len(has) else has
    kind[instance[is_collective]] = f.collective[is_collective]
    kind[int(keep.sum()) :] = -1
    key = np.stack([kind, nbytes, size, ((low == high) & (low >= 0)).astype(np.int64)], axis=1)
    last = np.zeros(total, np.int64)
    np.maximum.at(last, k, f.start[has])
    arrived = last[np.maximum(instance, 0)] if total else np.zeros(n, np.int64)
    tail = np.where(instance >= 0, f.end - np.maximum(f.start, arrived), 0)
    # A member that ended before the last one arrived did not wait for it (an eager send): it keeps its duration.
    # A receive always waits for its send: where the traces show it ending before its send began, the send's
    # event starts after the transfer did (gloo's send annotation begins once c10d::send has passed the data on),
    # and the receive ends with its instance (its tail, negative, keeps the replay without edits exact).
    floor = np.where((instance >= 0) & (f.end <= arrived + END_TOLERANCE_NS), f.end - f.start, 0)
    floor[recv] = 0
    # Sends are eager in all (each keeps its duration) or none: a send of a job whose sends wait for their receive
    # ends once its receive was posted, which may come before the receive's event (gloo's annotation begins when
    # the receiver waits on it, after the batch that posted it): it ended before the receive's event began, and
    # ends as much earlier or later as the receive comes (see _copies).
    floor[send] = f.end[send] - f.start[send] if _eager_sends(f, send, recv) else 0
    return instance, tail, floor, key


def _eager_sends(f: Frame, send: np.ndarray, recv: np.ndarray) -> bool:
    """Whether the job's sends are eager (buffered: done once their data left, whoever receives it): most of
    those posted before their receive ended before it was posted. Then a send that the traces show posted after
    its receive did not wait for it either, and a replay that makes the receiver late must not hold the send."""
    early = f.start[send] < f.start[recv]
    return bool(early.any()) and 2 * int(
        (f.end[send][early] <= f.start[recv][early] + END_TOLERANCE_NS).sum()
    ) > int(early.sum())


def _copies(f: Frame, send: np.ndarray, recv: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """Per event, how long it takes once the other side of its send/receive pair is there, where its measured
    length says otherwise; -1 for the rest:

    * a receive posted before its eager send: how long a receive lasts whose data was already there (the job's
      median). Its measured length is the transfer it waited for; a replay that makes the sender early must not
      keep it after its own arrival;
    * a send that waited for its receive but ended before the receive's event began (the receive was posted
      earlier than its event shows): its own length at most, the job's median send that found its receive there
      at most. Its measured length is the wait for the receiver; a replay that makes the receiver early must let
      it end earlier."""
    copy = np.full(len(f), -1, np.int64)
    eager = floor[send] > 0
    waited = eager & (f.start[send] > f.start[recv])
    there = eager & (f.start[recv] >= f.end[send])
    if waited.any() and there.any():
        copy[recv[waited]] = int(np.median(f.end[recv[there]] - f.start[recv[there]]))
    early = ~eager & (f.end[send] <= f.start[recv] + END_TOLERANCE_NS)
    if early.any():
        own = f.end[send] - f.start[send]
        found = ~eager & (f.start[send] >= f.start[recv])
        typical = int(np.median(own[found])) if found.any() else int(own.max())
        copy[send[early]] = np.minimum(own[early], typical)
    return copy


def _consumers(f: Frame, recv: np.ndarray) -> np.ndarray:
    """Per event, the receive whose data it waits for, -1 for none. The traces show that wait only where it bound
    (the receive was the last thing to end before the kernel started); where the data came early, it is the edit
    that can make it late (a slower sender), and the kernel must then wait again. The consumer is the rank's first
    compute kernel of the step launched after the receive that started once it had ended: a kernel launched
    before it (queued, say, behind a collective that a late peer held) did not wait for its data even when it
    started after it. Where the traces do not give the receive's launch: the first kernel that started after it."""
    received = np.full(len(f), -1, np.int32)
    kernels = np.flatnonzero(f.kind == f.code("kinds", "compute"))
    if not len(recv) or not len(kernels):
        return received
    recv = recv[np.argsort(f.end[recv], kind="stable")]  # assigned in order of end: the latest receive stays
    launched = kernels[f.launch[kernels] >= 0]
    by_launch = _first_after(f, launched, f.launch[launched], recv, f.launch[recv])
    by_start = _first_after(f, kernels, f.start[kernels], recv, f.end[recv] - 1)
    target = np.where(f.launch[recv] >= 0, by_launch, by_start)
    ok = (target >= 0) & (f.step[np.maximum(target, 0)] == f.step[recv])
    received[target[ok]] = recv[ok]
    return received


def _first_after(
    f: Frame, kernels: np.ndarray, kernel_at: np.ndarray, recv: np.ndarray, recv_at: np.ndarray
) -> np.ndarray:
    """Per receive, the first of its rank's ``kernels`` in order of ``kernel_at`` (their launch, or their start)
    that comes after ``recv_at`` and started once the receive had ended; -1 when none."""
    out = np.full(len(recv), -1, np.int64)
    if not len(kernels):
        return out
    times = (f.start, f.end, kernel_at, recv_at)  # not concatenated: that would copy the job's events twice
    base = min(int(t.min()) for t in times if len(t))
    span = max(int(t.max()) for t in times if len(t)) - base + 1
    order = np.lexsort((kernel_at, f.rank[kernels]))
    k, rank = kernels[order], f.rank[recv].astype(np.int64) * span
    first = np.searchsorted(
        f.rank[k].astype(np.int64) * span + (kernel_at[order] - base), rank + (recv_at - base), side="right"
    )
    # On one stream kernels start in launch order; on several, the first that started late enough may come later.
    reached = np.maximum.accumulate(f.rank[k].astype(np.int64) * span + (f.start[k] - base))
    pos = np.maximum(first, np.searchsorted(reached, rank + (f.end[recv] - base)))
    for _ in range(8):
        at = k[np.minimum(pos, len(k) - 1)]
        early = (pos < len(k)) & (f.rank[at] == f.rank[recv]) & (f.start[at] < f.end[recv])
        if not early.any():
            break
        pos = pos + early
    at = k[np.minimum(pos, len(k) - 1)]
    found = (pos < len(k)) & (f.rank[at] == f.rank[recv]) & (f.start[at] >= f.end[recv])
    out[found] = at[found]
    return out


def _host_codes(rank: np.ndarray, host_of: Mapping[int, str | None]) -> np.ndarray:
    """Per event, a code of its rank's host (-1 unknown)."""
    names = sorted({h for h in host_of.values() if h is not None})
    code = {h: i for i, h in enumerate(names)}
    table = np.full(int(rank.max()) + 2 if len(rank) else 1, -1, np.int64)
    for r, h in host_of.items():
        if 0 <= r < len(table) - 1 and h is not None:
            table[r] = code[h]
    return table[np.clip(rank, 0, len(table) - 1)]
