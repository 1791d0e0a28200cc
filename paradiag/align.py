"""Clock alignment across ranks from the collectives and transfers they share.

Every participant leaves a collective instance at nearly the same moment, so the end times of one instance, read
on each rank's own clock, differ by the clock offsets plus a little noise; a receive ends no earlier than its
send. Offsets are estimated per clock domain (a host when the traces name it, a rank otherwise), with the lowest
rank's domain as the reference (docs/schema.md, "Clock alignment").
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from paradiag.analysis.frame import robust_spread

LOW_QUANTILE = 10  # percentile of (receive end - send end) taken as the clock difference
ITERATIONS = 100  # each round closes about half of the remaining gap; stops early once converged


@dataclass
class Alignment:
    offset_ns: dict[int, int]  # rank -> nanoseconds to add to its timestamps
    uncertainty_ns: dict[int, int | None]  # rank -> robust spread of the residuals, None if not estimated
    instances: int  # matched collective instances used


def _collective_ends(
    comm: dict[int, pa.Table],
) -> tuple[dict[tuple[object, ...], dict[int, int]], list[tuple[int, int, int]]]:
    """Collective instance -> {rank: end on the rank's clock} (instances seen on two ranks or more), and the
    send/recv transfers as (sender, receiver, receive end - send end, each on its own clock).

    Only a receive that was posted before its data arrived ends with the send; one that lasted less than its send
    found the data already there (a busy or late receiver) and ends whenever it was posted, which says nothing
    about the clocks. Such transfers are dropped when the two ranks have waiting ones (in either direction).

    A collective whose group's members are known is an instance of that group only: a rank that is not among
    them (a group label two groups share) does not join it."""
    ends: dict[tuple[object, ...], dict[int, int]] = defaultdict(dict)
    sends: dict[tuple[object, ...], tuple[int, int, int]] = {}
    recvs: dict[tuple[object, ...], tuple[int, int, int]] = {}
    for rank, table in comm.items():
        if table is None or table.num_rows == 0:
            continue
        cols = {c: table.column(c).to_pylist() for c in ("collective", "group", "step", "seq", "peer")}
        members = (
            table.column("group_ranks").to_pylist()
            if "group_ranks" in table.column_names
            else [None] * table.num_rows
        )
        outside = {m for m in set(members) if m is not None and str(rank) not in str(m).split(",")}
        dur = table.column("dur_ns").to_numpy()
        end, dur = (table.column("start_ns").to_numpy() + dur).tolist(), dur.tolist()
        for i, coll in enumerate(cols["collective"]):
            seq, peer = cols["seq"][i], cols["peer"][i]
            if seq is None or members[i] in outside:
                continue
            if coll == "send" and peer is not None:
                sends[(cols["group"][i], cols["step"][i], rank, peer, seq)] = (rank, end[i], dur[i])
            elif coll == "recv" and peer is not None:
                recvs[(cols["group"][i], cols["step"][i], peer, rank, seq)] = (rank, end[i], dur[i])
            elif coll not in ("send", "recv"):
                ends[(cols["group"][i], coll, cols["step"][i], seq)][rank] = end[i]
    matched = sorted(sends.keys() & recvs.keys(), key=str)
    waited = {frozenset((sends[k][0], recvs[k][0])) for k in matched if recvs[k][2] >= sends[k][2]}
    transfers = [
        (sends[k][0], recvs[k][0], recvs[k][1] - sends[k][1])
        for k in matched
        if recvs[k][2] >= sends[k][2] or frozenset((sends[k][0], recvs[k][0])) not in waited
    ]
    return {k: v for k, v in ends.items() if len(v) > 1}, transfers


def estimate(comm: dict[int, pa.Table], domain_of: dict[int, object] | None = None) -> Alignment:
    """Offsets that bring every rank onto the clock of the lowest rank's domain: collectives first (every member
    leaves together); clock domains they do not connect are then tied in through send/recv transfers."""
    ranks = sorted(comm)
    domain_of = domain_of or {r: r for r in ranks}
    domains = sorted({domain_of[r] for r in ranks}, key=lambda d: min(r for r in ranks if domain_of[r] == d))
    d_index = {d: i for i, d in enumerate(domains)}
    instances, transfers = _collective_ends(comm)
    # Only instances that span two clock domains say anything about the offsets between them.
    keys = [k for k, members in instances.items() if len({domain_of[r] for r in members}) > 1]
    obs = [(i, d_index[domain_of[r]], end, r) for i, k in enumerate(keys) for r, end in instances[k].items()]
    off, residual_of = _solve_collectives(obs, len(keys), len(domains))
    linked = _link_by_transfers(off, _components(obs, len(domains)), transfers, domain_of, d_index)
    offsets = {r: round(off[d_index[domain_of[r]]]) for r in ranks}
    uncertainty: dict[int, int | None] = dict.fromkeys(ranks)
    if len(domains) > 1:
        for r in ranks:
            mine = residual_of.get(r)
            if mine is not None and len(mine):
                uncertainty[r] = round(robust_spread(mine))
            elif d_index[domain_of[r]] in linked:
                uncertainty[r] = linked[d_index[domain_of[r]]]
    return Alignment(offsets, uncertainty, len(keys) + len(transfers))


def _solve_collectives(
    obs: list[tuple[int, int, int, int]], n_inst: int, n_dom: int
) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """Alternating robust medians: instance exit time <- median of its members' aligned ends, domain offset <-
    median of (exit - own end). Each connected set of domains is anchored on its lowest domain."""
    off = np.zeros(n_dom)
    if not obs:
        return off, {}
    inst = np.array([o[0] for o in obs])
    dom = np.array([o[1] for o in obs])
    end_arr = np.array([o[2] for o in obs], dtype=np.int64)
    e = (end_arr - int(np.median(end_arr))).astype(np.float64)  # small numbers: float math exact to the ns
    components = _components(obs, n_dom)
    anchors = np.array([min(c) for c in sorted(components, key=min) for _ in c])
    members = np.array([d for c in sorted(components, key=min) for d in c])
    anchor_of = np.arange(n_dom)
    anchor_of[members] = anchors
    t = np.zeros(n_inst)
    for _ in range(ITERATIONS):
        t = _group_median(inst, e + off[dom], n_inst)
        new = _group_median(dom, t[inst] - e, n_dom, fill=off)
        new -= new[anchor_of]
        converged = np.allclose(new, off, atol=0.5)
        off = new
        if converged:
            break
    residual = t[inst] - e - off[dom]
    ranks = np.array([o[3] for o in obs])
    return off, {int(r): residual[ranks == r] for r in np.unique(ranks)}


def _components(obs: list[tuple[int, int, int, int]], n_dom: int) -> list[set[int]]:
    """Sets of domains joined by shared collective instances (a domain alone is its own set)."""
    parent = list(range(n_dom))

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    first_of: dict[int, int] = {}
    for inst, dom, _, _ in obs:
        if inst in first_of:
            parent[root(dom)] = root(first_of[inst])
        else:
            first_of[inst] = dom
    sets: dict[int, set[int]] = defaultdict(set)
    for d in range(n_dom):
        sets[root(d)].add(d)
    return list(sets.values())


def _link_by_transfers(
    off: np.ndarray,
    components: list[set[int]],
    transfers: list[tuple[int, int, int]],
    domain_of: dict[int, object],
    d_index: dict[object, int],
) -> dict[int, int]:
    """Shift whole components onto the reference's clock through send/recv transfers (in place on ``off``).

    A receive cannot end before its send ends, and it ends with it when the receiver was already waiting, so
    per direction the low end of (receive end - send end) measures the clock difference; the two directions'
    estimates are averaged, which also cancels the link latency. Returns domain -> spread of the estimate."""
    comp_of = {d: i for i, c in enumerate(components) for d in c}
    diffs: dict[tuple[int, int], list[float]] = defaultdict(
        list
    )  # (component a, component b) -> clock b - clock a
    for sender, receiver, d in transfers:
        a, b = d_index[domain_of[sender]], d_index[domain_of[receiver]]
        ca, cb = comp_of[a], comp_of[b]
        if ca != cb:
            # On the components' own anchored clocks: (true gap >= 0) + shift(a's component) - shift(b's component).
            diffs[(ca, cb)].append(d + off[b] - off[a])
    linked: dict[int, int] = {}
    shift_of = {comp_of[0]: 0.0}  # component -> what its anchor's clock must gain to match the reference
    frontier = [comp_of[0]]
    while frontier:
        ca = frontier.pop()
        for cb in range(len(components)):
            if cb in shift_of or not (diffs.get((ca, cb)) or diffs.get((cb, ca))):
                continue
            step, spread = _pair_shift(diffs.get((ca, cb), []), diffs.get((cb, ca), []))
            shift_of[cb] = shift_of[ca] + step
            for d in components[cb]:
                linked[d] = spread
            frontier.append(cb)
    for cb, shift in shift_of.items():
        for d in components[cb]:
            off[d] += shift
    return linked


def _pair_shift(forward: list[float], backward: list[float]) -> tuple[float, int]:
    """The offset to add to component b given transfers a->b (``forward``) and b->a (``backward``)."""
    estimates = []
    if forward:
        estimates.append(-float(np.percentile(forward, LOW_QUANTILE)))
    if backward:
        estimates.append(float(np.percentile(backward, LOW_QUANTILE)))
    spread = (
        abs(estimates[0] - estimates[1]) / 2 if len(estimates) == 2 else float(np.std(forward or backward))
    )
    return float(np.mean(estimates)), round(spread)


def _group_median(
    groups: np.ndarray, values: np.ndarray, n: int, fill: np.ndarray | None = None
) -> np.ndarray:
    """Median of ``values`` per group id in [0, n); groups without values keep ``fill`` (or 0)."""
    out = np.zeros(n) if fill is None else fill.astype(np.float64).copy()
    order = np.lexsort((values, groups))
    g, v = groups[order], values[order]
    bounds = np.flatnonzero(np.diff(g)) + 1
    starts = np.concatenate(([0], bounds))
    stops = np.concatenate((bounds, [len(g)]))
    for a, b in zip(starts, stops, strict=True):
        out[g[a]] = np.median(v[a:b])
    return out
