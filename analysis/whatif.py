"""What-if replay: the job's steps re-timed on their dependency graph with a cause removed.

The graph is the one the critical path walks (``paradiag.analysis.critical_path``), kept as numbers so that it can
be replayed. Every device event of a profiled step is a node; each waits for

* the previous work of its stream (a stream runs in order), and
* the work of its rank that ended last before it started (its *anchor*, any stream): the event a stream wait or a
  host synchronisation released it on. The time from the anchor's end to its start is a **host gap** (the host
  launched it that much later) and is kept: the host that was late after that work is late after it again;
* a collective or a send/receive pair is one *instance*: each member arrives when its own dependencies allow, and
  ends its ``tail`` after the last arrival (the transfer, once everyone was there). A side that finished before the
  other arrived (an eager send) never waited and keeps its own duration.

The measured times satisfy every edge, so events in order of their measured start are in dependency order: one
forward pass re-times everything. Runs of kernels on one stream that only wait for each other are folded into
one node first, and the rest is replayed in blocks of a few events per rank, each block iterated with numpy to
its fixed point (``replay``). With no edit the replay gives back the measured times exactly (``replay_error``):
the graph is consistent with the traces it came from.

An edit changes durations, transfers or host gaps (:class:`Edit`); a rank's step then ends as much later or
earlier as its last device work does, and starts as much later or earlier as its previous step ended. The
predicted step time is the median over (rank, step), as the measured one (``Diagnosis.step_time_ns``).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from paradiag.analysis.critical_path import END_TOLERANCE_NS
from paradiag.analysis.frame import Frame, group_bounds

if TYPE_CHECKING:
    from paradiag.analysis.diagnosis_types import Diagnosis
    from paradiag.dataset import Job

P2P = ("send", "recv", "send_recv")
PARTS = ("compute", "communication", "host")
PEER_MEDIAN = "peer-median"
COMPARABLE = "comparable"
REMOVE = "remove"
BALANCED = "balanced"


class EditError(ValueError):
    """A what-if edit that cannot be understood or does not fit the job."""


@dataclass(frozen=True)
class Edit:
    """One change to the replayed steps.

    ``target`` is ``rank`` (``ranks`` the ranks, ``part`` compute, communication or host), ``link`` (``ranks``
    the link's two ranks, or a group's ranks: every collective among them and every send/receive between them)
    or ``stages`` (every pipeline stage's compute scaled to the mean per micro-batch). ``value``: ``peer-median``
    (the durations of the rank's stage peers, kernel by kernel; for host: the peers' launch delay), a factor,
    ``comparable`` (a link's transfers: the median of comparable transfers elsewhere), ``remove`` (host: no
    launch delay beyond the peers'), ``balanced`` (compute: every rank of the stage runs each kernel for the
    stage's mean, as when a MoE router spreads its tokens evenly; stages: see ``_balance``). ``steps``: None for
    every step."""

    target: str
    ranks: tuple[int, ...] = ()
    part: str | None = None
    value: str | float = PEER_MEDIAN
    steps: tuple[int, ...] | None = None

    def text(self) -> str:
        """The ``--set`` form of the edit."""
        value = f"{self.value:g}" if isinstance(self.value, float) else self.value
        where = "" if self.steps is None else f":steps={'+'.join(map(str, self.steps))}"
        if self.target == "stages":
            return f"stages={value}{where}"
        who = "+".join(map(str, self.ranks)) if self.target == "rank" else "-".join(map(str, self.ranks))
        what = self.part if self.target == "rank" else "transfer"
        return f"{self.target}={who}:{what}={value}{where}"


def _int_list(text: str, what: str) -> tuple[int, ...]:
    out: list[int] = []
    for part in text.split("+"):
        lo, sep, hi = part.partition("-")
        if not (lo.isdigit() and (not sep or hi.isdigit())):
            raise EditError(f"{what}={text!r}: expected integers like 5, 1+3+5 or 4-7")
        out.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    return tuple(sorted(set(out)))


def _value(text: str, allowed: tuple[str, ...], where: str) -> str | float:
    if text in allowed:
        return text
    try:
        factor = float(text)
    except ValueError:
        raise EditError(f"{where}: {text!r} is neither {' nor '.join(allowed)} nor a factor like 0.8") from None
    if not factor > 0:
        raise EditError(f"{where}: the factor must be positive, not {text}")
    return factor


SET_HELP = (
    "rank=37:compute=peer-median | rank=37:compute=0.8 | rank=37:compute=balanced | rank=3+5:communication=peer-median | rank=4:host=remove | "
    "link=8-16:transfer=comparable | link=8-16:transfer=0.25 | stages=balanced; add :steps=1+2 to limit the steps"
)


def parse_edit(text: str) -> Edit:
    """``--set`` text -> Edit; an :class:`EditError` names what is wrong."""
    fields = [f.strip() for f in text.strip().split(":") if f.strip()]
    pairs = []
    for f in fields:
        key, eq, value = f.partition("=")
        if not eq or not value.strip():
            raise EditError(f"--set {text!r}: {f!r} is not key=value (e.g. {SET_HELP.split(' | ')[0]})")
        pairs.append((key.strip(), value.strip()))
    if not pairs:
        raise EditError(f"--set {text!r} is empty; expected e.g. {SET_HELP}")
    steps = None
    if pairs[-1][0] in ("step", "steps"):
        steps = _int_list(pairs.pop()[1], "steps")
    (target, who), rest = pairs[0], pairs[1:]
    if target == "stages":
        if who != BALANCED or rest:
            raise EditError(f"--set {text!r}: the stages edit is stages=balanced")
        return Edit("stages", value=BALANCED, steps=steps)
    if target not in ("rank", "ranks", "link"):
        raise EditError(f"--set {text!r}: {target!r} is not rank, link or stages")
    if len(rest) != 1:
        raise EditError(f"--set {text!r}: give one change after the {target}, e.g. {'compute=peer-median' if target != 'link' else 'transfer=comparable'}")
    part, value = rest[0]
    if target == "link":
        ranks = tuple(int(r) for r in re.split(r"[-+]", who) if r.isdigit())
        if len(set(ranks)) < 2 or not re.fullmatch(r"\d+([-+]\d+)+", who):
            raise EditError(f"--set {text!r}: a link is two or more ranks, e.g. link=8-16")
        if part != "transfer":
            raise EditError(f"--set {text!r}: a link's change is transfer=comparable or transfer=FACTOR, not {part!r}")
        return Edit("link", tuple(sorted(set(ranks))), "transfer", _value(value, (COMPARABLE,), f"--set {text!r}"), steps)
    if part not in PARTS:
        raise EditError(f"--set {text!r}: {part!r} is not one of {', '.join(PARTS)}")
    allowed = {"host": (PEER_MEDIAN, REMOVE), "compute": (PEER_MEDIAN, BALANCED)}.get(part, (PEER_MEDIAN,))
    edit_value = _value(value, allowed, f"--set {text!r}")
    if part == "host" and not isinstance(edit_value, str):
        raise EditError(f"--set {text!r}: a host stall is removed (host=remove or host=peer-median), not scaled")
    return Edit("rank", _int_list(who, "rank"), part, edit_value, steps)


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
    anchor: np.ndarray  # the rank's event that ended last before this one started
    received: np.ndarray  # a compute kernel: the receive it waits for (see _consumers)
    chunk: np.ndarray  # the model chunk of the pipeline pass the event lies in, -1 outside passes
    gap: np.ndarray  # start - the anchor's end (the host gap); the start itself without an anchor
    instance: np.ndarray  # the collective or send/receive pair the event is a member of
    tail: np.ndarray  # end - the instance's last arrival (or own start if later)
    floor: np.ndarray  # a member that never waited: its own duration
    copy: np.ndarray  # a receive of an eager send that waited for it: how long one takes whose data is there; else -1
    inst_key: np.ndarray  # per instance: collective code (-1: send/receive), bytes, members, 1 if on one host
    last: dict[tuple[int, int], int]  # (rank, step) -> the event that ended last
    step_ns: dict[tuple[int, int], int]  # (rank, step) -> measured host span

    def __len__(self) -> int:
        return len(self.rank)


def build_graph(frame: Frame, steps: pa.Table, p2p: pa.Table, host_of: Mapping[int, str | None], passes: pa.Table | None = None) -> Graph:
    """The replay graph of ``frame``'s steps (``p2p``: the matched send/receive pairs; ``passes``: the pipeline
    passes, whose model chunks ``stages=balanced`` moves layers within). ``frame`` is consumed: its rows are put in
    the graph's order in place (``Frame.keep``) and the graph shares its arrays, so that a job's millions of events
    are never held twice; pass a copy (``frame.take(slice(None))``) to keep using it."""
    keep = (frame.step >= 0) & (frame.end >= frame.start)
    order = np.flatnonzero(keep)[np.lexsort((frame.rank[keep], frame.start[keep]))]
    del keep
    f = frame
    f.drop("op", "peer")  # each array is dropped once the graph no longer reads it (at 1024 ranks 8-17 MB each)
    f.keep(order)
    n = len(f)
    pred, lag = _stream_predecessors(f)
    f.drop("track")
    anchor, gap = _anchors(f)
    send, recv = _pairs(f, p2p)
    instance, tail, floor, inst_key = _instances(f, send, recv, host_of)
    f.drop("collective", "group", "seq", "bytes")
    cols = steps.select(["rank", "step", "start_ns", "end_ns"]).to_pydict()
    step_ns = {(r, s): e - b for r, s, b, e in zip(cols["rank"], cols["step"], cols["start_ns"], cols["end_ns"], strict=True)}
    by_end, firsts = group_bounds(f.step, f.rank, within=f.end)
    lasts = np.append(firsts[1:], n) - 1 if n else firsts
    last = {(int(f.rank[by_end[i]]), int(f.step[by_end[i]])): int(by_end[i]) for i in lasts.tolist()}
    del by_end, firsts, lasts
    compute, received = f.kind == f.code("kinds", "compute"), _consumers(f, recv)
    f.drop("kind", "launch")
    return Graph(
        rank=f.rank, step=f.step, name=f.name, compute=compute, start=f.start, end=f.end,
        pred=pred, lag=lag, anchor=anchor, received=received, chunk=_chunks(f, passes), gap=gap, instance=instance, tail=tail, floor=floor,
        copy=_receive_copy(f, send, recv, floor), inst_key=inst_key, last=last, step_ns=step_ns,
    )  # fmt: skip


def _chunks(f: Frame, passes: pa.Table | None) -> np.ndarray:
    """Per event, the model chunk of the pass of its rank and step that it starts in, -1 for none."""
    chunk = np.full(len(f), -1, np.int32)
    if passes is None or not passes.num_rows or not len(f):
        return chunk
    p = {k: np.asarray(passes.column(k).to_numpy(), np.int64) for k in ("rank", "step", "chunk", "start_ns", "end_ns")}
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
    """Per event, the previous event of its stream (rank, track) and how far before its end it started (0 or less)."""
    order = np.lexsort((np.arange(len(f)), f.track, f.rank))  # rows are in start order: stable keeps it per stream
    pred = np.full(len(f), -1, np.int32)
    same = (f.rank[order][1:] == f.rank[order][:-1]) & (f.track[order][1:] == f.track[order][:-1])
    pred[order[1:][same]] = order[:-1][same]
    lag = np.where(pred >= 0, np.minimum(f.start - f.end[np.maximum(pred, 0)], 0), 0)
    return pred, lag


def _anchors(f: Frame) -> tuple[np.ndarray, np.ndarray]:
    """Per event, the event of its rank that ended last at or before its start (within END_TOLERANCE_NS), was
    replayed before it and, where the traces give both launches, was launched before it (work launched later
    cannot have released it: a receive posted early that happened to end just before a collective started), and
    the host gap after it."""
    n = len(f)
    base = int(f.start.min()) if n else 0
    span = int(f.end.max() - base + 2 * END_TOLERANCE_NS + 1) if n else 1
    ends = (f.rank.astype(np.int64) * span) + (f.end - base)
    by_end = np.argsort(ends, kind="stable")
    sorted_ends = ends[by_end]
    del ends  # each of these is as long as the job's events: dropped once used
    query = f.rank.astype(np.int64) * span + (f.start - base + END_TOLERANCE_NS)
    by_query = np.argsort(query, kind="stable")  # sorted queries walk the ends in order: many times faster
    pos = np.empty(n, np.int64)
    pos[by_query] = np.searchsorted(sorted_ends, query[by_query], side="right") - 1
    del sorted_ends, query, by_query
    # Step back over the event itself, zero-length events replayed after it and work launched after it (a few
    # receives posted ahead); where that finds nothing, the latest of the rank's work replayed before it.
    launched = _step_back(f, by_end, pos, 16, by_launch=True)
    anchor = np.where(launched >= 0, launched, _step_back(f, by_end, pos, 4, by_launch=False))
    gap = np.where(anchor >= 0, f.start - f.end[np.maximum(anchor, 0)], f.start)
    return anchor.astype(np.int32), gap


def _step_back(f: Frame, by_end: np.ndarray, pos: np.ndarray, tries: int, by_launch: bool) -> np.ndarray:
    """Per event, the first of ``by_end[pos]``, ``by_end[pos - 1]``, ... (``tries`` at most) of its rank that comes
    before it in the graph (and, ``by_launch``, was not launched after it); -1 where none."""
    anchor = np.full(len(f), -1, np.int64)
    me = np.arange(len(f))
    for _ in range(tries):
        ok = pos >= 0
        cand = np.where(ok, by_end[np.maximum(pos, 0)], -1)
        c = np.maximum(cand, 0)
        ok &= f.rank[c] == f.rank
        good = ok & (cand < me)
        if by_launch:
            good &= ~((f.launch[c] > f.launch) & (f.launch >= 0))
        anchor = np.where(good & (anchor < 0), cand, anchor)
        pos = np.where(ok & ~good & (anchor < 0), pos - 1, -1)
        if not (pos >= 0).any():
            break
    return anchor


def _instances(f: Frame, send: np.ndarray, recv: np.ndarray, host_of: Mapping[int, str | None]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per event its instance (collectives: the same (group, step, seq) on two members or more; send/receive:
    the matched pairs), tail and floor; per instance what makes transfers comparable: collective (-1: a
    send/receive pair), bytes, members and 1 where every member is on one host (columns of one array)."""
    n = len(f)
    instance = np.full(n, -1, np.int32)
    is_coll = (f.kind == f.code("kinds", "communication")) & ~np.isin(f.collective, f.codes("collectives", P2P)) & (f.group >= 0) & (f.seq >= 0)
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
    size, nbytes, kind = np.bincount(k, minlength=total), np.zeros(total, np.int64), np.full(total, -1, np.int64)
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
    floor = np.where((instance >= 0) & (f.end <= arrived + END_TOLERANCE_NS), f.end - f.start, 0)
    if _eager_sends(f, send, recv):
        floor[send] = f.end[send] - f.start[send]
    return instance, tail, floor, key


def _eager_sends(f: Frame, send: np.ndarray, recv: np.ndarray) -> bool:
    """Whether the job's sends are eager (buffered: done once their data left, whoever receives it): most of
    those posted before their receive ended before it was posted. Then a send that the traces show posted after
    its receive did not wait for it either, and a replay that makes the receiver late must not hold the send."""
    early = f.start[send] < f.start[recv]
    return bool(early.any()) and 2 * int((f.end[send][early] <= f.start[recv][early] + END_TOLERANCE_NS).sum()) > int(early.sum())


def _receive_copy(f: Frame, send: np.ndarray, recv: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """Per event, for a receive posted before its eager send: how long a receive lasts whose data was already
    there (the job's median; -1 for other events, or where no receive found its data there). Its measured length
    is the transfer it waited for; a replay that makes the sender early must not keep it after its own arrival."""
    copy = np.full(len(f), -1, np.int64)
    eager = floor[send] > 0
    waited = eager & (f.start[send] > f.start[recv])
    there = eager & (f.start[recv] >= f.end[send])
    if waited.any() and there.any():
        copy[recv[waited]] = int(np.median(f.end[recv[there]] - f.start[recv[there]]))
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


def _first_after(f: Frame, kernels: np.ndarray, kernel_at: np.ndarray, recv: np.ndarray, recv_at: np.ndarray) -> np.ndarray:
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
    first = np.searchsorted(f.rank[k].astype(np.int64) * span + (kernel_at[order] - base), rank + (recv_at - base), side="right")
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


def _pairs(f: Frame, p2p: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """The events of each matched send/receive pair (send rows, receive rows), found by rank and start."""
    comm = np.flatnonzero(np.isin(f.collective, f.codes("collectives", ("send", "recv"))))
    if not len(comm) or not p2p.num_rows:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    base = int(f.start.min())
    span = int(f.start.max()) - base + 1
    keys = f.rank[comm].astype(np.int64) * span + (f.start[comm] - base)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]

    def find(rank: str, start: str) -> np.ndarray:
        q = np.asarray(p2p.column(rank).to_numpy(), np.int64) * span + (np.asarray(p2p.column(start).to_numpy(), np.int64) - base)
        pos = np.clip(np.searchsorted(sorted_keys, q), 0, len(sorted_keys) - 1)
        return np.where(sorted_keys[pos] == q, comm[order[pos]], -1)

    send, recv = find("src", "send_start_ns"), find("dst", "recv_start_ns")
    ok = (send >= 0) & (recv >= 0)
    return send[ok], recv[ok]


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
    slack: np.ndarray  # per member (same order): how long before its eager send's end a receive ended; NEVER: none
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
    within = np.arange(len(members)) - np.repeat(np.cumsum(counts[by_last]) - counts[by_last], counts[by_last])
    ordered = members[starts + within] if len(members) else members
    slack = _receive_slack(g, heads[ordered])
    events = heads[ordered]
    alone = np.where(g.copy[events] >= 0, np.minimum(g.copy[events], t.tail[events]), t.tail[events])
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
    pred, after_pred, anchor, after_anchor, base = c.pred[block], c.after_pred[block], c.anchor[block], c.after_anchor[block], c.base[block]
    received = c.received[block]
    dur, waits = c.dur[block], c.waits[block]
    tail = c.tail[mine]
    while True:
        start = np.maximum(np.maximum(ends[pred] + after_pred, ends[anchor] + after_anchor), np.maximum(ends[received], base))
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
            finished = np.maximum(finished, np.where(c.slack[m0:m1] > NEVER, np.repeat(sent, sizes) + c.slack[m0:m1], NEVER))
            ends[mine] = np.where(waiting, finished, ends[mine])
        changed = not (np.array_equal(before, ends[block]) and np.array_equal(before_mine, ends[mine]))
        if not changed:
            return


def _fold(g: Graph, t: Timing) -> tuple[np.ndarray, np.ndarray]:
    """Runs of a stream's events that only wait for their predecessor, folded onto the run's first event: per
    event, that head and the time from the head's end to its own end (pointer jumping: log(run) numpy passes).
    An event inside a run ends that long after its head, so whoever waits for it reads it from the head."""
    n = len(g)
    p = np.maximum(g.pred, 0)
    merge = (g.pred >= 0) & (g.pred == g.anchor) & (g.instance < 0) & (g.instance[p] < 0) & (g.received < 0)
    ptr = np.where(merge, g.pred, np.arange(n))
    acc = np.where(merge, np.maximum(g.lag, t.gap) + t.dur, 0)
    while True:
        nxt = ptr[ptr]
        if np.array_equal(nxt, ptr):
            return ptr, acc
        acc = acc + acc[ptr]
        ptr = nxt


@dataclass(frozen=True)
class Peers:
    """What the edits compare a rank with: its stage peers, each (rank, step)'s launch delay (from the step's host
    start to its first device work) and each stage's compute per micro-batch (what ``stages=balanced`` splits)."""

    stage_of: Mapping[int, int]
    stages: Mapping[int, list[int]]  # stage -> its ranks
    launch_delay: Mapping[tuple[int, int], int]
    stage_compute: Mapping[int, int]  # stage -> compute per micro-batch (its least loaded rank's)
    micro_batches: int = 1
    virtual: int = 1
    stage_metrics: Mapping[str, Any] = field(default_factory=dict)  # what the stage_imbalance evidence quotes


@dataclass(frozen=True)
class WhatIf:
    """The replayed steps with ``edits`` applied: the predicted median step time and the saving per step (the
    mean over the profiled steps of what each step saves), against the measured ``step_ns``; ``per_step``: per
    step, the measured and the predicted step time (medians over the ranks)."""

    edits: tuple[str, ...]
    step_ns: float
    predicted_step_ns: float
    saving_ns: float
    per_step: tuple[tuple[int, float, float], ...] = ()
    layers: LayerSplit | None = None  # what stages=balanced moved

    @property
    def saving_pct(self) -> float:
        return 100 * self.saving_ns / self.step_ns if self.step_ns else 0.0

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "predicted_step_ms": round(self.predicted_step_ns / 1e6, 4),
            "saving_ms": round(self.saving_ns / 1e6, 4),
            "saving_pct": round(self.saving_pct, 2),
            "edits": list(self.edits),
        }
        if self.layers is not None:
            out["layers"] = {"now": list(self.layers.now), "balanced": list(self.layers.balanced)}
        return out


def step_times(g: Graph, ends: np.ndarray) -> dict[tuple[int, int], float]:
    """(rank, step) -> step time with the replayed ``ends``: the host span moves by as much as the step's last
    device work, its start by as much as the previous step's last device work."""
    moved = {k: int(ends[i]) - int(g.end[i]) for k, i in g.last.items()}
    return {(r, s): ns + moved.get((r, s), 0) - moved.get((r, s - 1), 0) for (r, s), ns in g.step_ns.items() if (r, s) in moved}


def what_if(g: Graph, peers: Peers, edits: Sequence[Edit]) -> WhatIf:
    """Replay ``g`` with ``edits`` (an :class:`EditError` when one names a rank, link or step the job lacks)."""
    t = Timing.of(g)
    splits = [split for e in edits if (split := apply(g, t, peers, e)) is not None]
    measured = step_times(g, g.end)
    predicted = step_times(g, replay(g, t))
    if not measured:
        raise EditError("the job has no step with device work to replay")
    saving = statistics.fmean(measured[k] - predicted[k] for k in measured)
    by_step: dict[int, list[tuple[float, float]]] = {}
    for (rank, step), ns in measured.items():
        by_step.setdefault(step, []).append((ns, predicted[(rank, step)]))
    per_step = tuple((s, statistics.median(m for m, _ in v), statistics.median(p for _, p in v)) for s, v in sorted(by_step.items()))
    return WhatIf(
        tuple(e.text() for e in edits),
        float(statistics.median(measured.values())),
        float(statistics.median(predicted.values())),
        saving,
        per_step,
        splits[-1] if splits else None,
    )


def replay_error(g: Graph) -> tuple[int, float]:
    """The replay without edits against the traces: the largest event end error (ns) and the largest step time
    error (a fraction of the step)."""
    ends = replay(g, Timing.of(g))
    measured, replayed = step_times(g, g.end), step_times(g, ends)
    worst = max((abs(replayed[k] - v) / v for k, v in measured.items() if v), default=0.0)
    return int(np.abs(ends - g.end).max()) if len(g) else 0, worst


def apply(g: Graph, t: Timing, peers: Peers, e: Edit) -> LayerSplit | None:
    """Change ``t`` as ``e`` says; for ``stages=balanced``, the layer split it replays."""
    steps = np.isin(g.step, e.steps) if e.steps is not None else np.ones(len(g), bool)
    if e.steps is not None and not steps.any():
        raise EditError(f"{e.text()}: the job has no step {', '.join(map(str, e.steps))} with device work")
    unknown = sorted(set(e.ranks) - set(peers.stage_of))
    if unknown:
        raise EditError(f"{e.text()}: the job has no rank {unknown[0]}")
    if e.target == "stages":
        if len(peers.stage_compute) < 2:
            raise EditError(f"{e.text()}: the job has no pipeline stages to balance")
        return _balance(g, t, peers, steps)
    if e.target == "link":
        _link(g, t, e, steps)
    elif e.part == "host":
        _host(g, t, peers, e, steps)
    else:
        _part(g, t, peers, e, steps)
    return None


@dataclass(frozen=True)
class LayerSplit:
    """The pipeline's transformer layers per stage as profiled (``now``) and the whole-layer split that minimises
    the slowest stage (``balanced``), from each stage's compute per micro-batch: ``layer_ns`` per layer, the rest
    (embedding, LM head, loss: work that does not move with a layer) ``fixed_ns``. ``factor``: per stage (row) and
    place (column 0: outside the pipeline passes; 1 + c: model chunk c), new layers over old: what the host gaps
    and collectives there are scaled by; ``kernels``: per stage, place and kernel name, what the kernels' time is
    scaled by (their layer part by ``factor``, the rest kept: the LM head's matmul among the layers' ones)."""

    now: tuple[int, ...]
    balanced: tuple[int, ...]
    layer_ns: float
    fixed_ns: tuple[float, ...]
    factor: np.ndarray  # (stage index, place)
    kernels: np.ndarray  # (stage index, place, kernel name)


def layer_split(g: Graph, peers: Peers) -> LayerSplit:
    """Count each stage's layers by the kernel that runs once per layer per micro-batch (of the names every stage
    runs at least once per micro-batch and not equally often, the one run the fewest times: attention, say), take a
    layer's compute as the median over the stages of their per-name-shared compute per layer (a stage's own kernels,
    such as the embedding or the loss, are fixed work), and hand out the layers one at a time to the stage that
    would then be least loaded (each stage keeps one per model chunk). A stage's layers are spread evenly over its
    model chunks (the first ones take the remainder), as Megatron's interleaved schedule lays them out: where the
    passes tell the chunks apart, each chunk's kernels are scaled by its own new layers over old."""
    runs, time = _per_micro_batch(g, peers)  # (stage index, place, name)
    stage_runs = runs.sum(axis=1)
    common = (stage_runs > 0).all(axis=0)
    per_layer = np.flatnonzero(common & (stage_runs.min(axis=0) >= 1))
    if not len(per_layer):
        raise EditError("stages=balanced: no kernel runs once per layer on every stage (are these transformer layers?)")
    # A kernel run as often on every stage is per pass or per step (a copy, the optimizer), not per layer, unless
    # every stage has as many layers.
    marker = min(per_layer.tolist(), key=lambda n: (len(set(stage_runs[:, n].tolist())) == 1, float(stage_runs[:, n].sum()), n))
    now = np.rint(stage_runs[:, marker]).astype(np.int64)
    # A name run q times per layer (q: the fewest whole times per layer any stage runs it) is layer work for q of
    # every k runs on a stage (the LM head's matmul among the layers' is the rest); the other names are fixed work.
    q = np.where(common, np.floor(stage_runs / now[:, None]).min(axis=0), 0)
    share = np.minimum(q * now[:, None] / np.maximum(stage_runs, 1e-12), 1)
    layer_work = (time.sum(axis=1) * share).sum(axis=1)
    per_layer_ns = layer_work / now
    fixed = time.sum(axis=(1, 2)) - layer_work
    balanced = [max(peers.virtual, 1)] * len(now)
    for _ in range(int(now.sum()) - sum(balanced)):
        i = min(range(len(now)), key=lambda k: (fixed[k] + (balanced[k] + 1) * per_layer_ns[k], k))
        balanced[i] += 1
    factor, shares = _place_factors(runs, now, np.array(balanced), marker, q, share)
    per_step = _parameter_factors(time.sum(axis=1), stage_runs, now, np.array(balanced))
    kernels = np.where(np.isnan(per_step)[:, None, :], 1 + (factor[:, :, None] - 1) * shares, per_step[:, None, :])
    return LayerSplit(tuple(now.tolist()), tuple(balanced), float(np.median(per_layer_ns)), tuple(fixed.tolist()), factor, kernels)


def _stage_index(g: Graph, peers: Peers) -> np.ndarray:
    """Per event, the index of its rank's stage among the stages in order (-1 for none)."""
    stage_index = np.full(int(g.rank.max()) + 1 if len(g) else 0, -1)
    for i, stage in enumerate(sorted(peers.stage_compute)):
        stage_index[peers.stages[stage]] = i
    return stage_index[g.rank]


def _units(g: Graph, peers: Peers, sel: np.ndarray) -> np.ndarray:
    """Per stage index, its ranks x profiled steps x micro-batches: what makes a count per rank and micro-batch."""
    ranks = np.array([len(peers.stages[s]) for s in sorted(peers.stage_compute)], float)
    return ranks * max(len(np.unique(g.step[sel])), 1) * max(peers.micro_batches, 1)


def _per_micro_batch(g: Graph, peers: Peers) -> tuple[np.ndarray, np.ndarray]:
    """Runs and time of each compute kernel name per rank and micro-batch, by stage index and place (0: outside
    the pipeline passes, 1 + c: model chunk c)."""
    si = _stage_index(g, peers)
    places = max(peers.virtual, 1) + 1
    sel = g.compute & (si >= 0) & (g.name >= 0)
    chunk = g.chunk[sel]
    place = np.where((chunk >= 0) & (chunk < places - 1), chunk + 1, 0)
    names = int(g.name.max()) + 1 if len(g) else 0
    cell = (si[sel] * places + place) * names + g.name[sel]
    shape = (len(peers.stage_compute), places, names)
    units = _units(g, peers, sel)
    runs = np.bincount(cell, minlength=int(np.prod(shape))).reshape(shape) / units[:, None, None]
    time = np.bincount(cell, weights=(g.end - g.start)[sel], minlength=int(np.prod(shape))).reshape(shape) / units[:, None, None]
    return runs, time


def _place_factors(runs: np.ndarray, now: np.ndarray, balanced: np.ndarray, marker: int, q: np.ndarray, share: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per stage and place, new layers over old, and per stage, place and name the layer part of the kernels'
    time. Outside the passes, or where the passes do not count each chunk's layers (every chunk has one at least,
    and they add up to the stage's), a stage's factor and shares hold for all of it."""
    places = runs.shape[1]
    factor = np.repeat((balanced / now)[:, None], places, axis=1)
    shares = np.repeat(share[:, None, :], places, axis=1)
    chunk_now = np.rint(runs[:, 1:, marker]).astype(np.int64)
    v = places - 1
    if v < 2 or (chunk_now < 1).any() or (chunk_now.sum(axis=1) != now).any():
        return factor, shares
    chunk_new = balanced[:, None] // v + (np.arange(v)[None, :] < balanced[:, None] % v)
    factor[:, 1:] = chunk_new / chunk_now
    shares[:, 1:, :] = np.minimum(q * chunk_now[:, :, None] / np.maximum(runs[:, 1:, :], 1e-12), 1)
    return factor, shares


def _parameter_factors(work: np.ndarray, runs: np.ndarray, now: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Per stage and name (``work``, ``runs``: per rank and micro-batch), what work that comes once per step or so
    is scaled by: a name every stage runs less than once per micro-batch, for longer (or more bytes) on some
    stages than on others (the optimizer, the gradients' all-reduce). Such work follows the stage's parameters: a
    fixed part (the embedding, the LM head) and one per layer, taken as the least per layer of any stage (one that
    holds no fixed parameters). NaN for the other names."""
    out = np.full(work.shape, np.nan)
    names = np.flatnonzero((runs > 0).all(axis=0) & (runs.max(axis=0) < 1) & (work.min(axis=0) > 0) & (work.max(axis=0) > 1.01 * work.min(axis=0)))
    if len(names):
        w = work[:, names]
        out[:, names] = 1 + (new - now)[:, None] * (w / now[:, None]).min(axis=0) / w
    return out


def _gradient_factors(g: Graph, peers: Peers, split: LayerSplit, si: np.ndarray) -> np.ndarray:
    """Per event, what the transfer of a collective that comes once per step or so is scaled by (its bytes follow
    the stage's parameters: :func:`_parameter_factors`); NaN for the other events."""
    out = np.full(len(g), np.nan)
    sel = (g.instance >= 0) & (si >= 0) & (g.name >= 0)
    sel &= g.inst_key[np.maximum(g.instance, 0), 0] >= 0
    if not sel.any():
        return out
    names = int(g.name.max()) + 1
    cell = si[sel] * names + g.name[sel]
    units = _units(g, peers, sel)[:, None]
    shape = (len(split.now), names)
    runs = np.bincount(cell, minlength=shape[0] * names).reshape(shape) / units
    nbytes = np.bincount(cell, weights=g.inst_key[g.instance[sel], 1].astype(float), minlength=shape[0] * names).reshape(shape) / units
    out[sel] = _parameter_factors(nbytes, runs, np.array(split.now), np.array(split.balanced))[si[sel], g.name[sel]]
    return out


def _balance(g: Graph, t: Timing, peers: Peers, steps: np.ndarray) -> LayerSplit:
    """Whole layers moved as :func:`layer_split` says: each stage's layer work (the layer part of the kernels of
    names every stage runs), the host gaps between its kernels and its collectives' transfers (a layer moved takes
    its launches and its tensor-parallel traffic with it) scaled by the factor of its stage and model chunk; the
    work of each step that follows the parameters (the optimizer, the gradients' all-reduce) as they do. Sends and
    receives carry one activation whatever the split, and the gap after one is a pass boundary, the gap before a
    step's first kernel the step boundary: they stay."""
    split = layer_split(g, peers)
    si = _stage_index(g, peers)
    v = split.factor.shape[1] - 1
    place = np.where((g.chunk >= 0) & (g.chunk < v), g.chunk + 1, 0)
    f = np.where(si >= 0, split.factor[np.maximum(si, 0), place], 1.0)
    sel = steps & g.compute & (si >= 0) & (g.name >= 0)
    t.own("dur")[sel] = np.rint(t.dur[sel] * split.kernels[si[sel], place[sel], g.name[sel]]).astype(np.int64)
    a = np.maximum(g.anchor, 0)
    p2p = (g.instance[a] >= 0) & (g.inst_key[np.maximum(g.instance[a], 0), 0] < 0)
    inside = steps & (g.anchor >= 0) & (g.step[a] == g.step) & (t.gap > 0) & ~p2p
    t.own("gap")[inside] = np.rint(t.gap[inside] * f[inside]).astype(np.int64)
    collective = steps & (g.instance >= 0) & (g.inst_key[np.maximum(g.instance, 0), 0] >= 0)
    gradients = _gradient_factors(g, peers, split, si)
    f = np.where(np.isnan(gradients), f, gradients)
    t.own("tail")[collective] = np.rint(t.tail[collective] * f[collective]).astype(np.int64)
    return split


def _part(g: Graph, t: Timing, peers: Peers, e: Edit, steps: np.ndarray) -> None:
    """A rank's compute kernels' durations, or its communication's transfers, to its peers' or by a factor."""
    is_part = g.compute if e.part == "compute" else g.instance >= 0
    values = t.own("dur" if e.part == "compute" else "tail")
    mine = steps & is_part & np.isin(g.rank, e.ranks)
    if isinstance(e.value, float):
        values[mine] = np.rint(values[mine] * e.value).astype(np.int64)
        if e.part == "communication":
            t.own("floor")[mine] = np.rint(t.floor[mine] * e.value).astype(np.int64)
        return
    balanced = e.value == BALANCED
    key = _occurrence_key(g, is_part)
    for stage in sorted({peers.stage_of[r] for r in e.ranks}):
        ranks = list(peers.stages[stage])
        others = ranks if balanced else [r for r in ranks if r not in e.ranks]
        if not others:
            raise EditError(f"{e.text()}: stage {stage} has no other rank to take a median from")
        ours = steps & is_part & np.isin(g.rank, ranks if balanced else [r for r in e.ranks if peers.stage_of[r] == stage])
        theirs = steps & is_part & np.isin(g.rank, others)
        distinct, value = _by_key(key[theirs], values[theirs], mean=balanced)
        found = np.minimum(np.searchsorted(distinct, key[ours]), max(len(distinct) - 1, 0))
        hit = distinct[found] == key[ours] if len(distinct) else np.zeros(int(ours.sum()), bool)
        rows = np.flatnonzero(ours)[hit]
        values[rows] = value[found[hit]]
        if e.part == "communication":
            t.own("floor")[rows] = np.minimum(t.floor[rows], values[rows])


def _occurrence_key(g: Graph, rows: np.ndarray) -> np.ndarray:
    """Per event, (step, name, how many events of that name its rank ran before it in the step) as one integer:
    the same kernel on every rank that runs the same program."""
    occ = np.zeros(len(g), np.int64)
    idx = np.flatnonzero(rows)
    order, firsts = group_bounds(g.name[idx], g.step[idx], g.rank[idx])
    if len(order):
        run = np.zeros(len(order), np.int64)
        run[firsts[1:]] = 1
        run = np.cumsum(run)
        occ[idx[order]] = np.arange(len(order)) - firsts[run]
    return (g.step.astype(np.int64) << 44) | (g.name.astype(np.int64) << 22) | occ


def _by_key(key: np.ndarray, values: np.ndarray, mean: bool) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct keys, the median value of each; the mean with ``mean``)."""
    order = np.lexsort((values, key))
    k, v = key[order], values[order]
    distinct, first, count = np.unique(k, return_index=True, return_counts=True)
    if mean:
        return distinct, np.add.reduceat(v, first) // np.maximum(count, 1) if len(v) else v
    low, high = v[first + (count - 1) // 2], v[first + count // 2]
    return distinct, (low + high) // 2


def _host(g: Graph, t: Timing, peers: Peers, e: Edit, steps: np.ndarray) -> None:
    """The first device work of each of the rank's steps launched no later after the step's host start than on
    its peers (median): the stall before it removed."""
    first: dict[tuple[int, int], int] = {}
    for i in np.flatnonzero(steps & np.isin(g.rank, e.ranks)).tolist():
        first.setdefault((int(g.rank[i]), int(g.step[i])), i)
    for (rank, step), i in first.items():
        others = [peers.launch_delay[(r, step)] for r in peers.stages[peers.stage_of[rank]] if r not in e.ranks and (r, step) in peers.launch_delay]
        own = peers.launch_delay.get((rank, step))
        if others and own is not None:
            t.own("gap")[i] -= max(own - int(statistics.median(others)), 0)


def _link(g: Graph, t: Timing, e: Edit, steps: np.ndarray) -> None:
    """The transfers of every collective among the link's ranks and every send/receive between them: as long as
    the median transfer of comparable ones (same collective, size, group size and span) elsewhere, or scaled."""
    has = g.instance >= 0
    total = len(g.inst_key)
    on_link = np.bincount(g.instance[has & np.isin(g.rank, e.ranks)], minlength=total) == len(e.ranks)
    if not on_link.any():
        raise EditError(f"{e.text()}: no collective or send/receive joins ranks {', '.join(map(str, e.ranks))}")
    transfer = np.zeros(total, np.int64)  # a collective's once all arrived; an eager send's own
    np.maximum.at(transfer, g.instance[has], np.maximum(t.tail[has], t.floor[has]))
    if isinstance(e.value, float):
        scale = np.full(total, e.value)
    else:
        kinds, which = np.unique(g.inst_key, axis=0, return_inverse=True)
        which = which.ravel()
        reference = np.full(len(kinds), np.nan)
        elsewhere = ~on_link
        for k in np.unique(which[on_link]).tolist():
            others = transfer[elsewhere & (which == k)]
            reference[k] = np.median(others) if len(others) else np.nan
        ref = reference[which]
        scale = np.where(np.isfinite(ref) & (transfer > 0), ref / np.maximum(transfer, 1), 1.0)
    mine = has & steps & on_link[np.maximum(g.instance, 0)]
    factor = scale[g.instance[mine]]
    t.own("tail")[mine] = np.rint(t.tail[mine] * factor).astype(np.int64)
    t.own("floor")[mine] = np.rint(t.floor[mine] * factor).astype(np.int64)


def peers_of(stage_of: Mapping[int, int], figures: Mapping[tuple[int, int], Mapping[str, Any]], metrics: Mapping[str, Any] | None) -> Peers:
    """The :class:`Peers` of a job from its layout, its per-(rank, step) figures and its stage metrics."""
    rows = (metrics or {}).get("stages") or []
    compute = {int(s["stage"]): int(s["compute_per_micro_batch_ns"]) for s in rows}
    delay = {k: int(v["launch_delay_ns"]) for k, v in figures.items() if v.get("launch_delay_ns") is not None}
    stages: dict[int, list[int]] = {}
    for rank, stage in sorted(stage_of.items()):
        stages.setdefault(stage, []).append(rank)
    m = metrics or {}
    return Peers(dict(stage_of), stages, delay, compute, int(m.get("micro_batches") or 1), int(m.get("virtual_stages") or 1), m)


def finding_edits(f: Mapping[str, Any]) -> list[Edit]:
    """The cause of a finding, removed: a culprit's compute to its peers', its stall removed, its link's transfers
    to comparable links', the stages balanced. None for clock skew (a data problem, no time lost)."""
    culprit, steps = f["culprit"], tuple(f["steps"]) or None
    kind = f["kind"]
    if kind in ("slow_device", "operator_hotspot"):
        return [Edit("rank", tuple(culprit["ranks"]), "compute", PEER_MEDIAN, steps)]
    if kind == "expert_imbalance":  # the tokens spread evenly: the experts that got fewer get more
        return [Edit("rank", tuple(culprit["ranks"]), "compute", BALANCED, steps)]
    if kind == "host_stall":
        return [Edit("rank", tuple(culprit["ranks"]), "host", REMOVE, steps)]
    if kind == "slow_link":
        return [Edit("link", tuple(culprit["link"]["ranks"]), "transfer", COMPARABLE, steps)]
    if kind == "stage_imbalance":
        return [Edit("stages", value=BALANCED)]
    return []


WORK_KINDS = ("slow_device", "operator_hotspot", "expert_imbalance", "stage_imbalance")


def replay_findings(found: list[dict[str, Any]], g: Graph, peers: Peers, host_ranks: frozenset[int] = frozenset()) -> None:
    """Each finding's ``what_if`` (its cause removed, the steps replayed), and its ``impact_pct`` from it. A
    finding of extra work (WORK_KINDS) on CPU ranks only (``host_ranks``) keeps its own estimate, made from typical
    durations: the replay runs the clock's durations, which on a busy host the scheduler moves more than the
    work does."""
    from paradiag.analysis.findings import severity, stage_evidence

    for f in found:
        edits = finding_edits(f)
        if not edits or not len(g):
            continue
        try:
            result = what_if(g, peers, edits)
        except EditError:
            continue  # the culprit has no peer or link to compare with: the estimate stays the heuristic one
        f["what_if"] = result.as_json()
        if f["kind"] in WORK_KINDS and host_ranks and set(f["culprit"].get("ranks") or ()) <= host_ranks:
            continue
        if result.layers is not None and peers.stage_metrics:
            f["evidence"] = stage_evidence(peers.stage_metrics, result.predicted_step_ns, f["what_if"]["layers"])
        f["impact_pct"] = round(max(result.saving_pct, 0.0), 2)
        f["severity"] = severity(f["impact_pct"])


def job_graph(job: Job, d: Diagnosis) -> tuple[Graph, Peers]:
    """The replay graph and peers of a job whose Diagnosis is stored (its device events read again)."""
    from paradiag.analysis import comm
    from paradiag.analysis.frame import job_frame

    frame = job_frame(job)
    members = job.group_members()
    comm.infer_peers(frame, members, d.layout.stage_of)
    host_of = job.by_rank("host")
    metrics = d.stage_metrics.as_json() if d.stage_metrics else None
    return build_graph(frame, job.steps, d.p2p, host_of, d.passes), peers_of(d.layout.stage_of, d.figures(), metrics)
