"""Operator imbalance across ranks that should do the same work (the DP replicas and TP shards of a stage).

For each set of peers and each compute operator (kernel name), a rank's time on that operator per step is
compared with the median of its peers': ``ratio`` = rank / peer median, ``z`` = robust z-score over the peers
(median and 1.4826 x MAD, spread floored at 1 % of the median), ``excess_ns`` = rank - peer median per step.
Operators are identified by name; a rank that runs an operator n times per step is compared on the total of
those n instances (their position in the step is the same on every peer, so totals compare like with like and
are less noisy than single instances).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from paradiag.analysis.frame import Frame, group_bounds, robust_z


def short_name(name: str) -> str:
    """A kernel or operator name without namespaces, template and argument lists
    (``void at::native::flash_fwd_kernel<...>(...)`` -> ``flash_fwd_kernel``): the one rule for every output."""
    text = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    return text.split("<", 1)[0].split("(", 1)[0].rsplit("::", 1)[-1].strip() or name


TYPICAL_QUANTILE = (
    0.25  # of an operator's calls on one rank: what a call takes when the scheduler lets it run
)


def typical_durations(frame: Frame, ranks: np.ndarray | None = None) -> np.ndarray:
    """Per row of ``frame``, its duration, or for the compute rows of ``ranks`` (host lanes: a CPU rank's operators
    run as long as the scheduler lets them) its share of the typical duration of its operator's calls on its rank:
    the TYPICAL_QUANTILE of the self times of that rank's calls of the same name (a call: the rows of one name and
    ``call``, the self-time pieces of one operator call), spread over the call's rows in proportion to their
    lengths. Preemption lengthens some calls of an operator, not all (a call of a few 100 us mostly runs inside one
    time slice), so the low quantile is what the work takes, and a rank's compute counted so (its calls x their
    typical durations) moves with the work it does (more calls, bigger shapes) and with a slower device (every
    call longer), not with the share of the CPU it got. Calls are grouped by their kind of work too (the frame's
    ``work``: operator and caller, where the parser knows them), so that an operator's cheap calls
    do not set the typical duration of its costly ones. With ``ranks`` None, every rank's compute rows."""
    dur = (frame.end - frame.start).astype(np.int64)
    rows = frame.kind == frame.code("kinds", "compute")
    if ranks is not None:
        rows &= np.isin(frame.rank, ranks)
    idx = np.flatnonzero(rows)
    out = dur.astype(np.float64)
    if not len(idx):
        return dur
    # One call per (rank, name, call id); rows without an id are calls of their own.
    call = np.where(frame.call[idx] >= 0, frame.call[idx], -2 - np.arange(len(idx)))
    order, firsts = group_bounds(call, frame.name[idx], frame.rank[idx])
    calls = np.zeros(len(idx), np.int64)
    calls[order] = np.cumsum(np.isin(np.arange(len(order)), firsts)) - 1
    self_time = np.bincount(calls, weights=dur[idx]).astype(np.float64)
    head = idx[order[firsts]]
    c_order, c_firsts = group_bounds(frame.work[head], frame.name[head], frame.rank[head], within=self_time)
    bounds = np.append(c_firsts, len(c_order))
    typical = np.zeros(len(head))
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        members = c_order[a:b]  # the calls of one (rank, name), shortest first
        typical[members] = self_time[members[int(TYPICAL_QUANTILE * (b - a - 1))]]
    share = np.divide(dur[idx], self_time[calls], out=np.zeros(len(idx)), where=self_time[calls] > 0)
    out[idx] = typical[calls] * share
    return out


SHARED_STRETCH = 1.5  # CPU ranks' clock compute this many times their typical compute: they share the cores
SHARED_SLOWER = 1.1  # ... and several ranks of a stage run every operator this much slower than the others
SPEED_MIN_CALLS = (
    3  # per profiled step: an operator called this often on a rank tells how fast its calls run there
)
SPEED_MIN_OPERATORS = 5  # ... and a rank's speed is told by at least this many of them


def host_speeds(
    frame: Frame, peer_sets: list[list[int]], host_ranks: frozenset[int], stretch: float = SHARED_STRETCH
) -> dict[int, float]:
    """Per CPU rank (``host_ranks``) with peers, how much slower its calls run than its peers' calls of the same
    operators (the median over its frequent operators of its typical call / its peers' median typical call; at
    least 1). Ranks sharing a machine's cores run at different speeds for as long as the scheduler keeps them so:
    a rank on a shared core runs *every* operator 20-45 % slower (seen on clean 8-rank jobs on 2 cores), doing
    the same calls as its peers. Extra work shows elsewhere: more calls (extra layers, reruns), or some operators
    slower than the rest (bigger inputs to the activations' operators while the optimizer's stay, a hot
    operator), which leaves the median operator alone. Dividing a CPU rank's compute by its speed before it is
    weighed against its peers' keeps the work and drops the scheduler's share. Only where the ranks share the
    cores (``stretch``, the clock's compute over the typical one, at least SHARED_STRETCH; else {}): on a host
    with a core per rank, a rank slower at every operator is a slower device; and only where at least two ranks of
    the job run SHARED_SLOWER x slower than their peers (the ranks on the busier cores): a lone rank slower at every
    operator than all the others is a slow rank, whatever slows it."""
    if stretch < SHARED_STRETCH:
        return {}
    out = {r: max(v, 1.0) for r, v in rank_speeds(frame, peer_sets, host_ranks).items()}
    # A lone rank slower at everything than the whole job is a slow rank, whatever slows it.
    return out if sum(v >= SHARED_SLOWER for v in out.values()) >= 2 else {}


def rank_speeds(frame: Frame, peer_sets: list[list[int]], host_ranks: frozenset[int]) -> dict[int, float]:
    """Per CPU rank (``host_ranks``) with peers, how long its calls of its frequent operators run against its
    peers' calls of the same ones: the median over those operators of its median typical call / the peers' (1: as
    fast; 1.3: every operator 30 % slower; a rank that does more calls or a few costlier ones stays near 1)."""
    ranks = np.array(sorted(host_ranks), dtype=np.int64)
    if not len(ranks):
        return {}
    typical = typical_durations(frame, ranks)
    idx = np.flatnonzero(
        (frame.kind == frame.code("kinds", "compute")) & np.isin(frame.rank, ranks) & (frame.step >= 0)
    )
    if not len(idx):
        return {}
    steps = max(len(np.unique(frame.step[idx])), 1)
    call = np.where(frame.call[idx] >= 0, frame.call[idx], -2 - np.arange(len(idx)))
    order, firsts = group_bounds(call, frame.work[idx], frame.name[idx], frame.rank[idx])
    per_call = np.add.reduceat(typical[idx][order], firsts) if len(order) else np.zeros(0)
    head = idx[order[firsts]]
    medians: dict[int, dict[tuple[int, int], tuple[float, int]]] = {}
    o2, f2 = group_bounds(frame.work[head], frame.name[head], frame.rank[head])
    for a, b in zip(f2.tolist(), [*f2[1:].tolist(), len(o2)], strict=True):
        members = o2[a:b]
        h = head[members[0]]
        medians.setdefault(int(frame.rank[h]), {})[(int(frame.name[h]), int(frame.work[h]))] = (
            float(np.median(per_call[members])),
            b - a,
        )
    out: dict[int, float] = {}
    for peers in peer_sets:
        mine = [r for r in peers if r in medians]
        if len(mine) < 2:
            continue
        keys = sorted({k for r in mine for k in medians[r]})
        column = {k: j for j, k in enumerate(keys)}
        typical = np.full((len(mine), len(keys)), np.nan)  # rank x operator: its median typical call
        frequent = np.zeros((len(mine), len(keys)), bool)
        for i, rank in enumerate(mine):
            for key, (med, count) in medians[rank].items():
                typical[i, column[key]] = med
                frequent[i, column[key]] = count >= SPEED_MIN_CALLS * steps
        reference = np.column_stack([_leave_one_out_median(typical[:, j]) for j in range(len(keys))])
        ratio = np.divide(
            typical,
            reference,
            out=np.full_like(typical, np.nan),
            where=frequent & (typical > 0) & (reference > 0),
        )
        for i, rank in enumerate(mine):
            row = ratio[i][np.isfinite(ratio[i])]
            if len(row) >= SPEED_MIN_OPERATORS:
                out[rank] = float(np.median(row))
    return out


def _leave_one_out_median(values: np.ndarray) -> np.ndarray:
    """Per entry of ``values`` (NaN: absent), the median of the other entries present (NaN where none or absent),
    from one sort: the others of the entry at sorted position p are the sorted values without position p."""
    out = np.full(len(values), np.nan)
    present = np.flatnonzero(~np.isnan(values))
    n = len(present)
    if n < 2:
        return out
    order = np.argsort(values[present], kind="stable")
    ranked = values[present][order]
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n)

    def other(k: int) -> np.ndarray:  # the k-th smallest of each entry's others
        return np.where(k < pos, ranked[k], ranked[min(k + 1, n - 1)])

    m = n - 1
    out[present] = other((m - 1) // 2) if m % 2 else (other(m // 2 - 1) + other(m // 2)) / 2
    return out


def operator_time(frame: Frame, durations: np.ndarray | None = None) -> dict[tuple[int, int], np.ndarray]:
    """(rank, name code) -> total compute time per step (median over the rank's steps), from the compute
    kernels of ``frame`` (their ``durations`` where given, one per row of ``frame``: :func:`typical_durations`)."""
    compute = frame.kind == frame.code("kinds", "compute")
    c = frame.take(compute)
    keep = c.step >= 0
    dur_all = (c.end - c.start) if durations is None else durations[compute]
    rank, name, step, dur = c.rank[keep], c.name[keep], c.step[keep], dur_all[keep]
    order, firsts = group_bounds(step, name, rank)
    if len(order) == 0:
        return {}
    totals = np.add.reduceat(dur[order], firsts)
    out: dict[tuple[int, int], list[int]] = {}
    for r, n, t in zip(
        rank[order][firsts].tolist(), name[order][firsts].tolist(), totals.tolist(), strict=True
    ):
        out.setdefault((r, n), []).append(t)
    return {k: np.asarray(v) for k, v in out.items()}


def operator_imbalance(frame: Frame, peer_sets: list[list[int]], top: int = 20) -> list[dict[str, Any]]:
    """The operators whose time differs most across peers, worst first: operator, the rank responsible, its
    time against the peer median, ratio, z and the excess per step."""
    times = operator_time(frame)
    rows: list[dict[str, Any]] = []
    for peers in peer_sets:
        if len(peers) < 2:
            continue
        names = {n for (r, n) in times if r in peers}
        for n in names:
            per_rank = np.array([float(np.median(times[(r, n)])) if (r, n) in times else 0.0 for r in peers])
            median = float(np.median(per_rank))
            z = robust_z(per_rank)
            worst = int(np.argmax(per_rank - median))
            rows.append(
                {
                    "operator": frame.names[n],
                    "short_name": short_name(frame.names[n]),
                    "rank": peers[worst],
                    "peers": peers,
                    "time_ns": int(per_rank[worst]),
                    "peer_median_ns": int(median),
                    "ratio": round(per_rank[worst] / median, 4) if median else None,
                    "z": round(float(z[worst]), 2),
                    "excess_ns": int(per_rank[worst] - median),
                }
            )
    rows.sort(key=lambda r: -r["excess_ns"])
    return rows[:top]


def rank_operator_excess(
    times: dict[tuple[int, int], np.ndarray], rank: int, peers: list[int]
) -> dict[int, float]:
    """For one rank: name code -> its time per step minus the median of the other peers' (positive: slower)."""
    others = [p for p in peers if p != rank]
    out = {}
    for (r, n), t in times.items():
        if r == rank and others:
            theirs = [float(np.median(times[(p, n)])) if (p, n) in times else 0.0 for p in others]
            out[n] = float(np.median(t)) - float(np.median(theirs))
    return out


def concentration(excess: dict[int, float], own: dict[int, float]) -> tuple[list[int], float]:
    """Whether a rank's extra time sits in a few operators: the operators that carry 80 % of the extra time and
    the ratio (own time / peers' time) on all the other operators (close to 1: the rest runs at normal speed)."""
    total = sum(v for v in excess.values() if v > 0)
    if total <= 0:
        return [], 1.0
    hot: list[int] = []
    acc = 0.0
    for n, v in sorted(excess.items(), key=lambda kv: -kv[1]):
        if acc >= 0.8 * total:
            break
        hot.append(n)
        acc += v
    rest_own = sum(t for n, t in own.items() if n not in hot)
    rest_peer = sum(own[n] - excess.get(n, 0.0) for n in own if n not in hot)
    return hot, (rest_own / rest_peer if rest_peer > 0 else 1.0)


def call_counts(frame: Frame) -> dict[tuple[int, int], float]:
    """(rank, name code) -> how many calls of that compute operator the rank makes per step (median over its
    steps): a call is one ``call`` id (the pieces of one host-lane operator call), or one row where it has none."""
    compute = (frame.kind == frame.code("kinds", "compute")) & (frame.step >= 0)
    rank, name, step, call = (
        frame.rank[compute],
        frame.name[compute],
        frame.step[compute],
        frame.call[compute],
    )
    call = np.where(call >= 0, call, -2 - np.arange(len(call)))
    order, firsts = group_bounds(call, step, name, rank)  # one row per call
    if not len(order):
        return {}
    head = order[firsts]
    c_order, c_firsts = group_bounds(step[head], name[head], rank[head])  # calls per (rank, name, step)
    per_step = np.diff(np.append(c_firsts, len(c_order)))
    first = head[c_order[c_firsts]]
    out: dict[tuple[int, int], list[int]] = {}
    for r, n, c in zip(rank[first].tolist(), name[first].tolist(), per_step.tolist(), strict=True):
        out.setdefault((r, n), []).append(c)
    return {k: float(np.median(v)) for k, v in out.items()}


def per_step_calls(frame: Frame, host_ranks: frozenset[int]) -> dict[str, np.ndarray] | None:
    """The compute calls of ``frame`` summed per (rank, step, operator): ``counts`` (calls), ``time`` (their time,
    at their rank's typical durations on ``host_ranks``, :func:`typical_durations`) and ``bytes`` (their inputs'
    bytes, -1 where a call's are unknown), each indexed [rank, step, operator] by ``ranks``, ``steps``, ``names``
    (name codes). A call is one ``call`` id (the pieces of one host-lane operator call), or one row where it has
    none. None without compute rows in a step. Computed once per job: :func:`extra_calls` and
    :func:`larger_inputs` both read it."""
    comp = np.flatnonzero((frame.kind == frame.code("kinds", "compute")) & (frame.step >= 0))
    if not len(comp):
        return None
    host = np.array(sorted(host_ranks), dtype=np.int64)
    typical = typical_durations(frame, host) if len(host) else (frame.end - frame.start).astype(np.float64)
    call = np.where(frame.call[comp] >= 0, frame.call[comp], -2 - np.arange(len(comp)))
    order, firsts = group_bounds(call, frame.name[comp], frame.rank[comp])
    per_call = np.add.reduceat(typical[comp][order].astype(np.float64), firsts)
    head = comp[order[firsts]]
    ranks, rank_at = np.unique(frame.rank[head], return_inverse=True)
    steps, step_at = np.unique(frame.step[head], return_inverse=True)
    names, name_at = np.unique(frame.name[head], return_inverse=True)
    shape = (len(ranks), len(steps), len(names))
    flat = np.ravel_multi_index((rank_at, step_at, name_at), shape)
    size = int(np.prod(shape))
    sized = frame.bytes[head] > 0
    unknown = np.bincount(flat[~sized], minlength=size).reshape(shape) > 0
    return {
        "ranks": ranks,
        "steps": steps,
        "names": names,
        "counts": np.bincount(flat, minlength=size).reshape(shape),
        "time": np.bincount(flat, weights=per_call, minlength=size).reshape(shape),
        "bytes": np.where(
            unknown,
            -1.0,
            np.bincount(
                flat[sized], weights=frame.bytes[head][sized].astype(np.float64), minlength=size
            ).reshape(shape),
        ),
    }


def _peer_rows(peer_sets: list[list[int]], ranks: np.ndarray) -> Iterator[list[int]]:
    """Per peer set of at least two ranks that have calls, their rows in ``ranks``."""
    row = {int(r): i for i, r in enumerate(ranks.tolist())}
    for peers in peer_sets:
        mine = [row[p] for p in peers if p in row]
        if len(mine) >= 2:
            yield mine


def _others(own: np.ndarray, ordered: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The other peers' least and most of a figure (``ordered``: peer x ..., sorted over the peers): the order
    statistics past this peer's own value ``own``."""
    low = np.where(own == ordered[0], ordered[1], ordered[0])
    high = np.where(own == ordered[-1], ordered[-2], ordered[-1])
    return low, high


def extra_calls(calls: dict[str, np.ndarray] | None, peer_sets: list[list[int]]) -> dict[int, dict[str, Any]]:
    """Per rank that calls some operators more often than its peers in every profiled step (``calls``:
    :func:`per_step_calls` of the job's frame), where its peers call each of those operators equally often (every
    other peer the same number of times, step by step): ``per_step``, the time its calls beyond theirs take (ns, at
    its own typical durations on CPU ranks), and ``operators``: per such operator (its code in ``frame.names``) its calls and
    each peer's in the step it differs most, and its extra calls' time per step (ns, median over the steps), most
    first.

    Replicas run one program: the data-parallel ranks of a stage (and a tensor-parallel group's shards) call each
    operator as often as each other in a step. A rank that calls some more (extra layers, an extra loss, a metric
    computed on it alone) does more work by construction, whatever the clock says: on a shared host its compute
    time strays as far as its peers' do, its call counts do not. Operators whose counts differ among the other
    peers too (Python's own calls, allocator and view operators that vary from step to step) tell nothing and are
    left out; so is a peer set of one. With one other peer, an operator counts only where both call it as often in
    every step (a steady program). A rank that calls any of those operators less than they do in some step, where
    they call it as often in every step, has another program, not more work (a kernel of its own in place of
    theirs: another algorithm for the same work)."""
    if calls is None:
        return {}
    ranks, steps, names, counts, time = (calls[k] for k in ("ranks", "steps", "names", "counts", "time"))
    out: dict[int, dict[str, Any]] = {}
    for mine in _peer_rows(peer_sets, ranks):
        sub = counts[mine]  # peer x step x operator
        ordered = np.sort(sub, axis=0)
        for i, r in enumerate(mine):
            own = sub[i]
            low, high = _others(own, ordered)  # the other peers' least and most calls
            alike = low == high
            if len(mine) == 2:
                alike &= (own == own[:1]).all(axis=0) & (low == low[:1]).all(axis=0)
            extra = (alike & (own > low)).all(axis=0)  # per operator: more calls than the others, every step
            # ... and none of the operators the others call as often in every step called less (a wrapper's
            # autograd function whose calls fall on either side of a step's boundary, 11 or 12 a step on every
            # rank, says nothing of a program)
            steady = (alike & (low == low[:1])).all(axis=0)
            if not extra.any() or (steady & (own < low)).any():
                continue
            cost = time[r] * np.where(own > 0, (own - low) / np.maximum(own, 1), 0.0)  # step x operator
            operators = []
            for j in np.flatnonzero(extra).tolist():
                widest = int(np.argmax(own[:, j] - low[:, j]))  # the step it differs most in
                operators.append(
                    {
                        "name": int(names[j]),
                        "calls": int(own[widest, j]),
                        "peer_calls": int(low[widest, j]),
                        "ns": float(np.median(cost[:, j])),
                    }
                )
            out[int(ranks[r])] = _rank_work(steps, cost[:, extra], operators)
    return out


def _rank_work(steps: np.ndarray, cost: np.ndarray, operators: list[dict[str, Any]]) -> dict[str, Any]:
    """A rank's extra work: ``per_step`` (step -> the ``cost`` of its operators, step x operator, summed) and its
    ``operators``, most costly first."""
    return {
        "per_step": {
            int(s): float(t) for s, t in zip(steps.tolist(), cost.sum(axis=1).tolist(), strict=True)
        },
        "operators": sorted(operators, key=lambda o: -o["ns"]),
    }


def larger_inputs(
    calls: dict[str, np.ndarray] | None, peer_sets: list[list[int]]
) -> dict[int, dict[str, Any]]:
    """Per rank whose operators work on more data than its peers' in every profiled step (``calls``:
    :func:`per_step_calls` of the job's frame): the same calls (every peer calls each of those operators as often,
    step by step) on larger inputs (their bytes, ``record_shapes``: ``frame.bytes`` of host-lane compute), where the
    other peers' inputs are alike. ``per_step``: a lower bound of the time that data costs (ns): per operator its
    time (at its typical durations on CPU ranks) times the
    share of its inputs beyond the peers' (1 - theirs / its own; a matmul's work grows with the product of its
    sizes, its inputs' bytes with their sum); ``operators``: per larger operator its ``ratio`` of input bytes to
    the peers' (in the step it differs most) and its time beyond theirs (ns, median over the steps), most first.

    Replicas run one program on data of one size: a rank whose batch, sequences or tensors are larger (an uneven
    data split, a longer padding, a bigger local batch) does more work by construction, which on a shared host its
    time does not show beyond its peers' scatter. Operators whose inputs differ among the other peers (a bucket
    filled unevenly, sequences of varying length) tell nothing and are left out; a rank with any smaller one has
    another data split, not more data. With one other peer, an operator counts only where both its calls and both
    sizes are the same in every step (a steady program)."""
    if calls is None:
        return {}
    ranks, steps, names, counts, time, size = (
        calls[k] for k in ("ranks", "steps", "names", "counts", "time", "bytes")
    )
    out: dict[int, dict[str, Any]] = {}
    for mine in _peer_rows(peer_sets, ranks):
        n = counts[mine]  # peer x step x operator
        b = size[mine]
        # The operators every peer calls as often in every step, each call's inputs sized.
        same = (n == n[:1]).all(axis=0).all(axis=0) & (n[0] > 0).all(axis=0) & (b > 0).all(axis=0).all(axis=0)
        if not same.any():
            continue
        ordered = np.sort(b, axis=0)
        for i, r in enumerate(mine):
            own = b[i]
            low, high = _others(own, ordered)
            alike = low == high
            if len(mine) == 2:
                alike &= (own == own[:1]).all(axis=0) & (low == low[:1]).all(axis=0)
            alike &= same
            larger = (alike & (own > low)).all(axis=0)
            if not larger.any() or (alike & (own < low)).any():
                continue
            share = np.where(own > 0, 1.0 - low / np.maximum(own, 1.0), 0.0)
            cost = time[r] * share  # step x operator
            operators = []
            for j in np.flatnonzero(larger).tolist():
                widest = int(np.argmax(share[:, j]))
                operators.append(
                    {
                        "name": int(names[j]),
                        "ratio": float(own[widest, j] / low[widest, j]),
                        "ns": float(np.median(cost[:, j])),
                    }
                )
            out[int(ranks[r])] = _rank_work(steps, cost[:, larger], operators)
    return out
