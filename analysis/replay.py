"""The replay: the dependency graph's events (``paradiag.analysis.depgraph``) re-timed forward with the
durations, transfers and host gaps an edit changed (:class:`Timing`).

Runs of kernels on one stream that only wait for each other are folded into one node first, and the rest is replayed
in blocks of a few events per rank, each block iterated with numpy to its fixed point (:func:`replay`). With no edit
the replay gives back the measured times exactly (:func:`replay_error`): the graph is consistent with the traces it
came from. A rank's step then ends as much later or earlier as its last device work does, and starts as much later
or earlier as its previous step ended (:func:`step_times`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from paradiag.analysis.depgraph import Graph
from paradiag.analysis.edit import EditError
from paradiag.analysis.frame import group_bounds


class ReplayError(EditError):
    """A replay that does not settle: the graph's dependencies run in a circle (each event waits for one that
    waits for it), which traces whose events are not in the order their work ran can make. The finding keeps its
    heuristic estimate; ``paradiag whatif`` says so."""


@dataclass
class Timing:
    """What an edit changes: per event duration, tail, floor and host gap. The last three are the graph's own
    arrays until an edit first changes one (``own`` copies it then): a replay of a compute edit holds one array
    of its own, not four (17 MB each at 1024 ranks)."""

    dur: np.ndarray
    tail: np.ndarray
    floor: np.ndarray
    gap: np.ndarray
    shared: set[str] = field(default_factory=set)  # those still the graph's

    @classmethod
    def of(cls, g: Graph) -> Timing:
        return cls(g.end - g.start, g.tail, g.floor, g.gap, {"tail", "floor", "gap"})

    def own(self, name: str) -> np.ndarray:
        """The array ``name`` for an edit to change: a copy, where it was still the graph's."""
        if name in self.shared:
            setattr(self, name, getattr(self, name).copy())
            self.shared.discard(name)
        values: np.ndarray = getattr(self, name)
        return values


PER_RANK = 4  # events per rank replayed together: few, so that the chains inside a block stay short
NEVER = -(1 << 62)  # the end of an event with no such dependency


def replay(g: Graph, t: Timing) -> np.ndarray:
    """The replayed end of every event.

    After folding (``_fold``), the heads are replayed in blocks of consecutive events (in measured order): inside
    a block every head's start is the max over its dependencies, recomputed for the whole block at once until
    nothing changes (as many rounds as the longest chain inside the block); earlier blocks are final. An instance
    ends in the block of its last member in measured order: every member's successor comes after it."""
    n = len(g)
    if n == 0:
        return np.zeros(0, np.int64)
    head, offset = _fold(g, t)
    c = _compressed(g, t, head, offset)
    ends = np.full(c.size + 1, NEVER, np.int64)  # the last slot stands for "no dependency"
    arrival = np.zeros(c.size, np.int64)
    block = max(PER_RANK * len(np.unique(g.rank)), 64)
    for lo in range(0, c.size, block):
        _replay_block(c, ends, arrival, lo, min(lo + block, c.size))
    return ends[c.position[head]] + offset


@dataclass
class _Compressed:
    """The heads' dependencies in head positions (``size`` for none) and what each adds to them."""

    size: int
    position: np.ndarray  # event -> its position among the heads (heads only)
    pred: np.ndarray
    after_pred: np.ndarray
    anchor: np.ndarray
    after_anchor: np.ndarray
    received: np.ndarray
    base: np.ndarray  # the start of a head with no dependency, NEVER otherwise
    dur: np.ndarray  # the head's own duration (eager members: their floor)
    waits: np.ndarray  # bool: a member that ends with its instance
    tail: np.ndarray
    members: np.ndarray  # head positions of the members, grouped by instance, instances by last member
    slack: (
        np.ndarray
    )  # per member (same order): how long before its eager send's end a receive ended; NEVER: none
    alone: np.ndarray  # per member (same order): how long after its own arrival it ends at the earliest
    firsts: np.ndarray  # start of each instance's members in ``members``
    last: np.ndarray  # per instance (same order), its last member's position


def _compressed(g: Graph, t: Timing, head: np.ndarray, offset: np.ndarray) -> _Compressed:
    heads = np.flatnonzero(head == np.arange(len(g)))
    size = len(heads)
    position = np.full(len(g), size, np.int32)  # so are the dependencies below: int32, as the graph's indices
    position[heads] = np.arange(size)

    # Field by field, each one's temporaries dropped before the next: at 1024 ranks each is a million heads long.
    def at(on: np.ndarray) -> np.ndarray:
        """The head position of each head's dependency ``on`` (an event; -1: none, then ``size``)."""
        return np.where(on >= 0, position[head[np.maximum(on, 0)]], size)

    def after(on: np.ndarray, extra: np.ndarray) -> np.ndarray:
        """What a head adds after its dependency ``on``'s head ends: ``on``'s end after its head's, + ``extra``."""
        return np.where(on >= 0, offset[np.maximum(on, 0)] + extra, 0)

    p, a = g.pred[heads], g.anchor[heads]
    pred, after_pred, anchor, after_anchor = at(p), after(p, g.lag[heads]), at(a), after(a, t.gap[heads])
    base = np.where((p >= 0) | (a >= 0), NEVER, t.gap[heads])
    del p, a
    received = at(g.received[heads])
    inst = g.instance[heads]
    waits = (inst >= 0) & (t.floor[heads] <= 0)
    dur = np.where(inst >= 0, t.floor[heads], t.dur[heads])
    rows = np.flatnonzero(inst >= 0)
    order, firsts = group_bounds(inst[rows])
    members = rows[order]
    last = np.maximum.reduceat(members, firsts) if len(members) else np.zeros(0, np.int64)
    by_last = np.argsort(last, kind="stable")
    counts = np.diff(np.append(firsts, len(members)))
    starts = np.repeat(firsts[by_last], counts[by_last])
    within = np.arange(len(members)) - np.repeat(
        np.cumsum(counts[by_last]) - counts[by_last], counts[by_last]
    )
    ordered = members[starts + within] if len(members) else members
    slack = _receive_slack(g, heads[ordered])
    events = heads[ordered]
    # A member's tail below 0 (it ended before the last arrival: a send whose receive was posted before its event)
    # says nothing of how long it takes alone: its copy does.
    tail = t.tail[events]
    alone = np.where(
        g.copy[events] >= 0, np.minimum(g.copy[events], np.where(tail < 0, g.copy[events], tail)), tail
    )
    return _Compressed(
        size=size,
        position=position,
        pred=pred,
        after_pred=after_pred,
        anchor=anchor,
        after_anchor=after_anchor,
        received=received,
        base=base,
        dur=dur,
        waits=waits,
        tail=t.tail[heads],
        members=ordered,
        slack=slack,
        alone=alone,
        firsts=np.append(0, np.cumsum(counts[by_last]))[:-1] if len(members) else firsts,
        last=last[by_last],
    )


def _receive_slack(g: Graph, events: np.ndarray) -> np.ndarray:
    """Per member of an instance (``events``): for a receive paired with an eager send, its measured end minus the
    send's, at most 0; NEVER for the rest. A receive posted after its send still ends no earlier than the send's
    transfer (the data must have arrived): when a replay makes the send late, the receive ends with it (less what
    the traces show it ending before it, so that a replay without edits stays exact)."""
    slack = np.full(len(events), NEVER, np.int64)
    if not len(events):
        return slack
    inst = g.instance[events]
    eager = g.floor[events] > 0
    sent = np.full(len(g.inst_key), NEVER, np.int64)
    np.maximum.at(sent, inst[eager], g.end[events[eager]])
    ok = (g.inst_key[inst, 0] < 0) & ~eager & (sent[inst] > NEVER)
    slack[ok] = np.minimum(g.end[events[ok]] - sent[inst[ok]], 0)
    return slack


def _replay_block(c: _Compressed, ends: np.ndarray, arrival: np.ndarray, lo: int, hi: int) -> None:
    """Heads ``lo..hi`` to their fixed point, with the instances whose last member is among them."""
    i0, i1 = np.searchsorted(c.last, [lo, hi])
    m0 = int(c.firsts[i0]) if i0 < len(c.firsts) else len(c.members)
    m1 = int(c.firsts[i1]) if i1 < len(c.firsts) else len(c.members)
    mine = c.members[m0:m1]
    seg = c.firsts[i0:i1] - m0
    waiting = c.waits[mine]  # eager members count for the last arrival but end on their own
    block = slice(lo, hi)
    pred, after_pred, anchor, after_anchor, base = (
        c.pred[block],
        c.after_pred[block],
        c.anchor[block],
        c.after_anchor[block],
        c.base[block],
    )
    received = c.received[block]
    dur, waits = c.dur[block], c.waits[block]
    tail = c.tail[mine]
    # Acyclic, a block settles in as many rounds as its longest chain, which passes each of its heads and members
    # once; more rounds than that are a circle, whose ends would grow forever.
    for _ in range(2 * (hi - lo) + len(mine) + 2):
        start = np.maximum(
            np.maximum(ends[pred] + after_pred, ends[anchor] + after_anchor), np.maximum(ends[received], base)
        )
        arrival[block] = start
        # A waiting member of an instance that ends in a later block: its own arrival stands in for the last one
        # (no successor reads it before then, except within the tolerance).
        before, before_mine = ends[block].copy(), ends[mine]
        ends[block] = start + np.where(waits, c.tail[block], dur)
        if len(mine):
            # A receive of an eager send waits for the send's arrival, not the send for it: the last arrival is
            # the send's, and after its own arrival the receive only copies data that is there.
            last = np.maximum.reduceat(np.where(c.slack[m0:m1] > NEVER, NEVER, arrival[mine]), seg)
            sizes = np.diff(np.append(seg, len(mine)))
            finished = np.maximum(arrival[mine] + c.alone[m0:m1], np.repeat(last, sizes) + tail)
            sent = np.maximum.reduceat(np.where(waiting, NEVER, ends[mine]), seg)
            finished = np.maximum(
                finished, np.where(c.slack[m0:m1] > NEVER, np.repeat(sent, sizes) + c.slack[m0:m1], NEVER)
            )
            ends[mine] = np.where(waiting, finished, ends[mine])
        changed = not (np.array_equal(before, ends[block]) and np.array_equal(before_mine, ends[mine]))
        if not changed:
            return
    raise ReplayError(
        f"the replay does not settle: the dependencies of events {lo}-{hi - 1} (in measured order) run in a circle"
    )


def _fold(g: Graph, t: Timing) -> tuple[np.ndarray, np.ndarray]:
    """Runs of a stream's events that only wait for their predecessor, folded onto the run's first event: per
    event, that head and the time from the head's end to its own end (pointer jumping: log(run) numpy passes).
    An event inside a run ends that long after its head, so whoever waits for it reads it from the head."""
    n = len(g)
    p = np.maximum(g.pred, 0)
    merge = (g.pred >= 0) & (g.pred == g.anchor) & (g.instance < 0) & (g.instance[p] < 0) & (g.received < 0)
    ptr = np.where(merge, g.pred, np.arange(n))
    acc = np.where(merge, np.maximum(g.lag, t.gap) + t.dur, 0)
    for _ in range(max(n, 1).bit_length() + 1):  # a run of n halves each pass; a circle never ends
        nxt = ptr[ptr]
        if np.array_equal(nxt, ptr):
            return ptr, acc
        acc = acc + acc[ptr]
        ptr = nxt
    raise ReplayError("the replay does not settle: a stream's events wait for each other in a circle")


def step_times(g: Graph, ends: np.ndarray) -> dict[tuple[int, int], float]:
    """(rank, step) -> step time with the replayed ``ends``: the host span moves by as much as the step's last
    device work, its start by as much as the previous step's last device work."""
    moved = {k: int(ends[i]) - int(g.end[i]) for k, i in g.last.items()}
    return {
        (r, s): ns + moved.get((r, s), 0) - moved.get((r, s - 1), 0)
        for (r, s), ns in g.step_ns.items()
        if (r, s) in moved
    }


def after_first_step(keys: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The (rank, step) keys of the steps after the first profiled one (all of them where there is one step): a
    pipeline's later stages start their first profiled step late and end it early (a step's span on a rank runs
    from the end of its previous one, which the profile does not have), so that step's span is no measure of a
    change that every step shares (``whatif.steady``)."""
    first = min((step for _, step in keys), default=0)
    return [k for k in keys if k[1] != first] or keys


def replay_error(g: Graph) -> tuple[int, float]:
    """The replay without edits against the traces: the largest event end error (ns) and the largest step time
    error (a fraction of the step)."""
    ends = replay(g, Timing.of(g))
    measured, replayed = step_times(g, g.end), step_times(g, ends)
    worst = max((abs(replayed[k] - v) / v for k, v in measured.items() if v), default=0.0)
    return int(np.abs(ends - g.end).max()) if len(g) else 0, worst
