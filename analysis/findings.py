"""Findings: what slows the job down, who causes it, and what fixing it would save.

Root cause follows the waits. Ranks that should do the same work (the replicas and shards of one pipeline stage)
are compared step by step with the median of the *other* peers (leave-one-out, so that two peers can be
compared): a rank that spends longer on its own compute, or whose host starts its device later (a data loader
stall), arrives late and is the culprit; its peers, who only wait inside collectives and receives, are victims (their
compute and idle time are normal, their communication time is not). Transfers that are slow once everybody has
arrived point at a link, not a rank. Whole stages that compute longer per micro-batch are a stage imbalance.

Kinds are the simulator's vocabulary. ``impact_pct`` estimates the step-time reduction if the cause were
fixed; findings below ``MIN_IMPACT_PCT`` are not reported, except a slow link (a hardware fault, reported once its
transfers take SLOW_LINK_RATIO x those of comparable links in nearly every step, however much of it the job hides)
and clock skew (a data problem that paradiag corrects, reported with impact 0 once larger than ``CLOCK_SKEW_NS``).

Durations are noisy on a busy host (CPU ranks sharing cores with each other and with other work: an operator
lasts as long as the scheduler lets it), so a culprit rank must stand out against the job's own noise floor, the
excesses its peers show against each other, consistently across the profiled steps or exceptionally in one of
them (:func:`rank_excess`).
"""

from __future__ import annotations

import functools
import math
import statistics
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from paradiag.analysis import kinds
from paradiag.analysis.diagnosis_types import Culprit, Finding
from paradiag.analysis.frame import MAD_TO_SIGMA, Frame, robust_spread, weighted_median
from paradiag.analysis.operators import (
    call_counts,
    concentration,
    extra_calls,
    larger_inputs,
    operator_time,
    per_step_calls,
    rank_operator_excess,
    rank_speeds,
    short_name,
    typical_durations,
)
from paradiag.analysis.stages import recomputed, stage_work
from paradiag.intervals import covered_within, longest_gap_within, union_length
from paradiag.parsers.kineto_host import is_operator

MIN_IMPACT_PCT = 2.0  # below this a difference is within what jitter and launch noise produce
MIN_RATIO = 1.05  # a culprit's own time must also be 5 % above its peers'
# ... 20 % on CPU ranks: their compute at typical durations differs by up to 15-20 % for the same work on a host
# whose cores they share with each other (measured on real gloo jobs of 2-8 ranks on 2 cores)
MIN_RATIO_HOST = 1.2
# ... unless the extra time sits in a few operators that run far slower than the rest (a hotspot, told by ratios:
# classify_compute); a host that shares its cores slows every operator of a rank alike, not a few
NOISE_MADS = (
    4.0  # ... and stand NOISE_MADS robust deviations above theirs (launch delays vary by a few 100 us)
)
PERSISTENT_SHARE = (
    0.75  # a consistent culprit is above its peers in this share of the steps (all of 2 to 4) ...
)
PERSISTENT_MADS = 2.0  # ... by a median excess of this many robust deviations of the other peers' excesses
HOOK_DOMINANCE = (
    3.0  # a rank's hooks held 3x further beyond its peers' than its compute is: the hooks hold it
)
MERGE_SHARE = 0.5  # culprits of one kind are named together when each has half the worst one's excess
OUTLIER_RATIO = 2.0  # one exceptional step: twice the largest excess any other peer shows in any step
# A rank's compute that stands CLEAR_MARGIN x further from its peers' than any of them strays from the others, in
# every step, is its own work, however cheap: it needs only CLEAR_IMPACT_PCT of the step and MIN_RATIO (not
# MIN_RATIO_HOST) on CPU ranks. (Real gloo jobs on 2 cores: the ranks of clean jobs and the innocent ranks of
# faulty ones stray at most 2.6x as far; a faulty rank of a step dominated by gloo stood 4-8x as far at 1-2 %.)
CLEAR_MARGIN = 4.0
CLEAR_IMPACT_PCT = 1.0
# A CPU rank's host held back for less than this (at a step's start, in a hook, before each send) is its
# scheduler's: on a host whose cores its ranks and their gloo threads share, a runnable thread waits out the
# others' time slices (Linux CFS: 0.75 ms x (1 + log2 cores) at least each, several runnable per core). The real
# jobs' clean twins on 2 cores hold 1.0-2.2 ms so, which a replay that lets the rest of the pipeline move prices at
# 2.2-2.8 % of a step; a host stall the program makes (a sleep, a lock, a slow hook) held 4.0 ms and more in every
# faulty job.
HOST_HOLD_NS = 3_000_000
STAGE_IMBALANCE = 1.15  # max / mean compute per micro-batch across stages
# ... and, on CPU ranks, the heaviest stage MIN_RATIO_HOST x the median of the others (as a rank against its peers:
# past the noise band of CPU ranks' compute)
SLOW_LINK_RATIO = 1.6  # transfer time against comparable transfers elsewhere
LINK_NAMED = 8  # a slow link's evidence names this many of its ranks (a group's), then how many more
LINK_QUANTILE = (
    0.25  # a slow link's fast quarter of transfers is slower than the slow quarter of comparable ones
)
HOTSPOT_REST = 1.05  # the rest of a hotspot rank's operators run within 5 % of its peers
# ... and no bound on CPU ranks: there the rest's speed is the core's share and the caches the hot operators leave
# (a 24x GELU's rank ran its GEMMs 1.3x, and in a pp2 job 1.7x, its peers'), so only the hot operators' ratio to the
# rest's (HOT_RATIO x) tells a hotspot from a slower rank, which slows every operator alike
HOTSPOT_REST_HOST = math.inf
HOT_RATIO = 2.0  # a hot operator runs at least twice its peers' time ...
HOT_SHARE = 0.5  # ... and the hot operators carry most of the rank's extra time
# ... and the first HOT_FEW of them (most extra time first) carry that share: a few operators. A rank whose every
# operator runs ~2x and whose many small ones run 8-40x (a slower device under a dispatch layer that costs per
# call: the optimizer's foreach calls broken into one call per tensor, views, transposes) had 21 hot operators,
# none above 8 % of its extra time: a slower rank, not a hotspot.
HOT_FEW = 4
CLOCK_SKEW_NS = 100_000


def severity(impact_pct: float) -> str:
    return "high" if impact_pct >= 10 else "medium" if impact_pct >= 4 else "low"


def finding(
    kind: str,
    culprit: Culprit,
    steps: Sequence[int],
    impact_pct: float,
    evidence: str,
    step: int | None = None,
) -> Finding:
    """A finding as a detector makes it: ``kind`` one of the registry's (``paradiag.analysis.kinds``); ``step`` is
    the step its evidence cites; its ``what_if`` comes later, from the replay (``whatif.replay_findings``)."""
    return Finding(
        kind=kinds.check(kind),
        culprit=culprit,
        steps=[int(s) for s in steps],
        impact_pct=round(float(impact_pct), 2),
        severity="info" if kinds.of(kind).informative else severity(impact_pct),
        evidence=evidence,
        step=step,
    )


def blamed(ranks: Sequence[int], **more: Any) -> Culprit:
    """The culprit of a finding that names ``ranks`` (and a stage, a link, an operator, hosts)."""
    return Culprit(ranks=[int(r) for r in ranks], **more)


STEP_FIGURES = ("compute_ns", "launch_delay_ns", "idle_ns", "hooks_ns", "step_ns")
HOST_PARTS = {
    "launch_delay_ns": "first device work after",
    "idle_ns": "idle",
    "hooks_ns": "time in autograd hooks",
}  # a host_stall's figures, as its evidence names them


def step_figures(frame: Frame, steps: pa.Table, host_lanes: bool = False) -> pa.Table:
    """Per step of one rank (``frame``: its events; ``steps``: its steps) with device work: ``compute_ns``
    (union of compute), ``launch_delay_ns`` (from the step's host start to its first device work: the data loader
    and anything else the host does before it feeds the device), ``idle_ns`` (no device work between the step's
    host start and its last device work) and ``step_ns`` (host span). Durations only: any one clock serves.

    ``host_lanes``: the rank's device is its own threads (a CPU rank, ``parsers.kineto_host``), so the host never
    runs ahead of it: what it does outside any operator and any communication (the data loader, a sleep, Python
    between operators) is idle time wherever it falls in the step. Its launch delay is, as on a GPU, the part of
    that before its first work of the step (an operator or a communication): the data loader, a stall before the
    step's work began. Its ``compute_ns`` is then its operators' calls counted at their typical durations
    (``operators.typical_durations``): the work it did, not how long the scheduler let it take (the idle time
    stays the clock's). Its ``hooks_ns`` is the time the autograd engine spent in its nodes' frames
    (``autograd::engine::evaluate_function: ...``) outside the node itself, beyond their typical durations:
    the hooks it runs there (a DDP comm hook, which the reducer calls from AccumulateGrad's, a tensor or
    post-accumulate-grad hook, FSDP's post-backward) holding the rank back, which the typical durations leave out
    of its compute and the frames' spans out of its idle time (0 on a device)."""
    cols: dict[str, list[int]] = {k: [] for k in ("step", *STEP_FIGURES)}
    compute_code = frame.code("kinds", "compute")
    typical = typical_durations(frame) if host_lanes else None
    glue = np.zeros(len(frame), np.float64) if typical is None else hook_excess(frame, typical)
    rows = (
        steps.select(["step", "start_ns", "end_ns", "device_start_ns", "device_end_ns"]).to_pylist()
        if len(frame)
        else []
    )
    for row in rows:
        if row["device_end_ns"] is None:
            continue
        mine = frame.step == row["step"]
        c = mine & (frame.kind == compute_code)
        if (
            host_lanes
        ):  # the step is the host's span: communication a runloop thread runs on after it is not idle
            lo, hi = row["start_ns"], row["end_ns"]
            busy = union_length(np.clip(frame.start[mine], lo, hi), np.clip(frame.end[mine], lo, hi))
            window = hi - lo
        else:
            busy = union_length(np.maximum(frame.start[mine], row["start_ns"]), frame.end[mine])
            window = max(row["device_end_ns"], row["end_ns"]) - row["start_ns"]
        cols["step"].append(row["step"])
        cols["compute_ns"].append(
            round(typical[c].sum()) if typical is not None else union_length(frame.start[c], frame.end[c])
        )
        idle = max(window - busy, 0)
        if host_lanes:
            first = int(frame.start[mine].min()) if mine.any() else row["end_ns"]
            cols["launch_delay_ns"].append(min(max(first - row["start_ns"], 0), idle))
        else:
            cols["launch_delay_ns"].append(max(row["device_start_ns"] - row["start_ns"], 0))
        cols["idle_ns"].append(idle)
        cols["hooks_ns"].append(round(glue[mine].sum()))
        cols["step_ns"].append(row["end_ns"] - row["start_ns"])
    return pa.table({k: pa.array(v, pa.int32() if k == "step" else pa.int64()) for k, v in cols.items()})


AUTOGRAD_FRAME = "autograd::engine::evaluate_function:"  # the engine's frame around a node: it runs its hooks


def hook_excess(frame: Frame, typical: np.ndarray) -> np.ndarray:
    """Per row of a CPU rank's ``frame``, the own time of an autograd engine frame (AUTOGRAD_FRAME: the node runs
    in a child row, its hooks in the frame's own time) beyond its typical duration (``typical``:
    ``operators.typical_durations``) while none of the rank's communication was in flight (0 for other rows): a
    frame that waits for a collective (DDP's reducer waiting for its buckets at the end of backward) waits on its
    peers, not on its host. Other wrappers' own time (a DTensor's Python, a dispatch mode's) is the operators'
    dispatch, and where it waits without an event (a DTensor redistribution) it waits on peers."""
    out = np.zeros(len(frame), np.float64)
    wrapper = np.array([n.startswith(AUTOGRAD_FRAME) for n in frame.names], bool)
    if not len(wrapper):
        return out
    rows = (frame.kind == frame.code("kinds", "compute")) & wrapper[frame.name]
    if not rows.any():
        return out
    comm = frame.kind == frame.code("kinds", "communication")
    start, end = frame.start[rows], frame.end[rows]
    waited = covered_within(frame.start[comm], frame.end[comm], start, end) if comm.any() else 0
    out[rows] = np.maximum((end - start) - waited - typical[rows], 0)
    return out


def rank_step_figures(per_rank: pa.Table, steps: pa.Table) -> dict[tuple[int, int], dict[str, int]]:
    """The :func:`step_figures` of every rank (``per_rank``, a ``rank`` column added) per (rank, step), in the
    order of the job's ``steps``."""
    cols = per_rank.select(["rank", "step", *STEP_FIGURES]).to_pydict()
    found = {(r, s): dict(zip(STEP_FIGURES, v, strict=True)) for r, s, *v in zip(*cols.values(), strict=True)}
    keys = zip(steps.column("rank").to_pylist(), steps.column("step").to_pylist(), strict=True)
    return {k: found[k] for k in keys if k in found}


def _leave_one_out(values: dict[int, int], rank: int) -> float | None:
    others = [v for r, v in values.items() if r != rank]
    return statistics.median(others) if others else None


def _excess(
    figures: Mapping[tuple[int, int], Mapping[str, int]], peers: list[int], steps: list[int], part: str
) -> dict[int, dict[int, float]]:
    """rank -> step -> its ``part`` above the median of its other ``peers`` in that step."""
    out: dict[int, dict[int, float]] = {}
    for step in steps:
        values = {r: figures[(r, step)][part] for r in peers if part in figures.get((r, step), ())}
        for rank, value in values.items():
            ref = _leave_one_out(values, rank)
            if ref is not None:
                out.setdefault(rank, {})[step] = value - ref
    return out


def _median_without(s: np.ndarray, gone: list[np.ndarray]) -> np.ndarray:
    """The median of the sorted values ``s`` with the positions ``gone`` (arrays of one shape, each position
    distinct from the others of its cell, in increasing order across the list) left out, per cell."""
    m = len(s) - len(gone)
    ends = []
    for k in ((m - 1) // 2, m // 2):
        idx = np.full(gone[0].shape, k, np.int64)
        for g in gone:
            idx = idx + (idx >= g)
        ends.append(s[idx])
    return (ends[0] + ends[1]) / 2


def _strays(
    figures: Mapping[tuple[int, int], Mapping[str, int]], peers: list[int], steps: list[int], part: str
) -> dict[int, list[float]]:
    """Per rank of ``peers``, the excesses its other peers show against each other (each against the median of
    the rest of them, ``rank`` left out) in every step: :func:`_excess` of the peers without ``rank``, for every
    rank at once. A median without two values is read off the sorted values (the order statistics shift past the
    two left out), so a stage of 128 ranks costs 128 x 128 subtractions a step, not 128 x 128 medians."""
    out: dict[int, list[float]] = {r: [] for r in peers}
    for step in steps:
        present = [r for r in peers if part in figures.get((r, step), ())]
        n = len(present)
        if n < 2:
            continue
        v = np.array([figures[(r, step)][part] for r in present], np.float64)
        order = np.argsort(v, kind="stable")
        s, pos = v[order], np.empty(n, np.int64)
        pos[order] = np.arange(n)
        if n >= 3:  # a rank of the step: each other one against the rest without both
            lo, hi = np.minimum.outer(pos, pos), np.maximum.outer(pos, pos)
            excess = v[None, :] - _median_without(s, [lo, hi])
            for i, r in enumerate(present):
                out[r].extend(np.delete(excess[i], i).tolist())
        there = set(present)
        absent = [r for r in peers if r not in there]
        if absent:  # a rank without a figure in the step: the others' plain leave-one-out excesses
            alone = (v - _median_without(s, [pos])).tolist()
            for r in absent:
                out[r].extend(alone)
    return out


def _noise(
    figures: Mapping[tuple[int, int], Mapping[str, int]],
    peers: list[int],
    steps: list[int],
    part: str,
    rank: int,
    strays: Sequence[float],
    elsewhere: Sequence[list[int]] = (),
) -> tuple[float, dict[int, tuple[float, float]]]:
    """The job's own noise floor for ``rank``'s excess: its spread over the steps, and per step (spread, largest
    excess) outside that step's cell of ``rank``. The noise is the excesses the *other* peers show against each
    other, ``rank`` left out (``strays``: :func:`_strays`): how far ranks without its fault stray from their
    peers, in any step. With one other
    peer there is nobody to compare it with: the excesses the ranks of the job's other peer sets (``elsewhere``:
    a dp x pp job's other stages) show against each other stand in, how far replicas stray from each other in
    this job (a CPU rank's compute counted at typical durations is the same in every step, so its own steps show
    no spread even where its replicas differ by a fifth); without other peer sets, ``rank``'s own excess in the
    other steps (its spread and the largest of its magnitudes)."""
    others = [r for r in peers if r != rank]
    cells = list(strays)  # the other peers' excesses against each other (_strays)
    if not cells:
        cells = [
            e
            for group in elsewhere
            if rank not in group
            for per in _excess(figures, group, steps, part).values()
            for e in per.values()
        ]
    if not cells:
        own = _excess(figures, peers, steps, part).get(rank, {})
        per_step = {}
        for s in own:
            rest = np.array([e for t, e in own.items() if t != s], dtype=float)
            per_step[s] = (robust_spread(rest), float(np.abs(rest).max()) if len(rest) else 0.0)
        return robust_spread(np.array(list(own.values()), dtype=float)), per_step
    # Centred on 0, not on the cells' median: a leave-one-out excess is 0 where nobody strays.
    spread = MAD_TO_SIGMA * float(np.median(np.abs(cells)))
    return spread, dict.fromkeys(
        steps, (spread, float(max(np.abs(cells)) if len(others) < 2 else max(cells)))
    )


def _clear(
    figures: Mapping[tuple[int, int], Mapping[str, int]],
    own: Mapping[int, float],
    strays: Sequence[float],
    others: int,
    steps: list[int],
    part: str,
    rank: int,
) -> bool:
    """``rank``'s ``part`` stands out from its peers' beyond any doubt: in every step (``own``: its excess over
    their median per step) at least MIN_RATIO x their median and CLEAR_MARGIN x further above it than any other
    peer strays from the rest in any step (``strays``: :func:`_strays`; at least two ``others``, to tell how far
    they stray)."""
    if others < 2 or not strays or len(own) < len(steps):
        return False
    largest = max(abs(e) for e in strays)
    return all(
        e >= CLEAR_MARGIN * largest
        and figures[(rank, s)][part] >= MIN_RATIO * (figures[(rank, s)][part] - e)
        and e > 0
        for s, e in own.items()
    )


def rank_excess(
    figures: Mapping[tuple[int, int], Mapping[str, int]],
    peer_sets: list[list[int]],
    step_ns: float,
    compute_scale: float = 1.0,
    host_ranks: frozenset[int] = frozenset(),
) -> list[dict[str, Any]]:
    """Per (rank, step) where a rank's own time (compute, or the host starting the device late) stands out from
    its peers': which part and by how much (ns, and the peers' median).

    Durations on a busy host are noisy (a preempted rank's operators last longer for nothing it did), so an
    excess counts only against the job's own noise floor (:func:`_noise`, from the other peers), and only if it
    is consistent or exceptional. *Consistent*: the rank is above its peers in (nearly) every profiled step
    (PERSISTENT_SHARE), by a median over the steps of at least PERSISTENT_MADS noise spreads; every step of it
    counts. *Exceptional*: one step (a stall, once) that stands NOISE_MADS spreads above the peers and
    OUTLIER_RATIO x above the largest excess any other peer shows in any step. Either way the excess must also be MIN_IMPACT_PCT of the step (a
    compute beyond doubt, :func:`_clear`: CLEAR_IMPACT_PCT, a row marked ``clear``) and MIN_RATIO x the peers'
    time. ``compute_scale``: the clock's time per ns of ``compute_ns`` (CPU ranks count compute at typical
    durations, a busy host runs it slower: the floor is the step's share at that speed), and the compute of
    ``host_ranks`` (CPU ranks) must be MIN_RATIO_HOST x its peers' (below, a row is ``weak``:
    :func:`rank_findings` keeps it only where a few operators carry it, a hotspot, or where it is clear and the
    rank's calls run at its peers' pace, more work). A CPU rank's time in its wrappers' own code (``hooks_ns``:
    its hooks) counts only where consistent: once, it is the scheduler's; its launch delay and its hooks' time
    only from HOST_HOLD_NS on (shorter, the scheduler's hold)."""
    out = []
    steps = sorted({s for _, s in figures})
    alone = [p[0] for p in peer_sets if len(p) == 1]
    for peers in peer_sets:
        # A CPU rank's idle time (between its operators, outside any communication) counts only where it is
        # its habit: once, a hole mid-step is as often the scheduler's (a shared host preempts a rank for tens of
        # ms) as its own; a stall before the step's first work is its launch delay.
        parts = ("compute_ns", "launch_delay_ns", "hooks_ns")
        for part in parts:
            floor = MIN_IMPACT_PCT / 100 * step_ns / (compute_scale if part == "compute_ns" else 1.0)
            # A rank alone in its stage (a pipeline of one rank per stage) has no replica to be compared with; the
            # start of a step is alike on every stage (the host takes the next batch, then works), so a lone
            # rank's launch delay is weighed against the other lone ranks' (in a pipeline of two, the other one's:
            # its own other steps give the noise, _noise).
            against = alone if part == "launch_delay_ns" and len(peers) == 1 and len(alone) >= 2 else peers
            excess = {r: e for r, e in _excess(figures, against, steps, part).items() if r in peers}
            strays = _strays(figures, against, steps, part) if excess else {}
            for rank, per_step in excess.items():
                clear = part == "compute_ns" and _clear(
                    figures, per_step, strays[rank], len(against) - 1, steps, part, rank
                )
                least = CLEAR_IMPACT_PCT / 100 * step_ns / compute_scale if clear else floor
                spread, outside = _noise(figures, against, steps, part, rank, strays[rank], peer_sets)
                values = list(per_step.values())
                persistent = sum(e > 0 for e in values) >= PERSISTENT_SHARE * len(
                    values
                ) and statistics.median(values) >= max(least, PERSISTENT_MADS * spread)
                if part in ("idle_ns", "hooks_ns") and not persistent:
                    continue  # the scheduler holds a thread inside a wrapper as often as between operators
                for step, e in per_step.items():
                    value = figures[(rank, step)][part]
                    ref = value - e
                    if e <= 0 or value < MIN_RATIO * ref or e < least:
                        continue
                    if part != "compute_ns" and rank in host_ranks and e < HOST_HOLD_NS:
                        continue  # the scheduler's hold (at the step's start, inside a hook)
                    # CPU compute below MIN_RATIO_HOST x: a hotspot's only (rank_findings keeps it if it is one)
                    weak = part == "compute_ns" and rank in host_ranks and value < MIN_RATIO_HOST * ref
                    noise, largest = outside.get(step, (spread, 0.0))
                    if persistent or (
                        step in outside and e >= max(NOISE_MADS * noise, OUTLIER_RATIO * largest)
                    ):
                        out.append(
                            {
                                "rank": rank,
                                "step": step,
                                "part": part,
                                "excess_ns": e,
                                "value_ns": value,
                                "peer_ns": ref,
                                **({"weak": True} if weak else {}),
                                **({"clear": True} if clear else {}),
                            }
                        )
    return out


def _op_code(frame: Frame) -> Frame:
    """The frame with each kernel named by the host operator that launched it, where known: an operator is what
    the user wrote (``aten::_flash_attention_forward``), the kernels are how the library ran it."""
    named = frame.take(slice(None))
    named.name = np.where(frame.op >= 0, frame.op, frame.name)
    return named


def classify_compute(
    frame: Frame,
    rank: int,
    peers: list[int],
    ep_of: Mapping[int, int],
    is_moe: bool,
    host_ranks: frozenset[int] = frozenset(),
) -> tuple[str, str | None]:
    """slow_device, operator_hotspot (the extra time sits in a few operators, the rest runs normally) or
    expert_imbalance (a MoE job, decided by the caller from the EP coordinates). Operators of ``host_ranks`` (CPU
    ranks) count at their typical durations (``operators.typical_durations``)."""
    mine = frame.take(np.isin(frame.rank, peers))
    host = [p for p in peers if p in host_ranks]
    typical = (
        typical_durations(mine, np.array(host)) if host else None
    )  # per operator as named, before renaming
    named = _op_code(mine)
    times = operator_time(named, typical)
    excess = rank_operator_excess(times, rank, peers)
    own = {n: float(np.median(t)) for (r, n), t in times.items() if r == rank}
    hot: list[int] = []
    if rank not in host_ranks:  # on CPU ranks only ratios tell (their wrappers' glue would be "hot" by share)
        hot, rest_ratio = concentration(excess, own)
        if not (hot and rest_ratio < HOTSPOT_REST and sum(own[n] for n in hot) < 0.6 * sum(own.values())):
            hot = []
    hot = hot or far_slower(
        excess, own, *((HOTSPOT_REST_HOST, named.names) if rank in host_ranks else (HOTSPOT_REST, None))
    )
    if hot:
        return "operator_hotspot", " + ".join(short_name(named.names[n]) for n in hot[:3])
    return "slow_device", None


def far_slower(
    excess: Mapping[int, float],
    own: Mapping[int, float],
    rest_limit: float,
    names: list[str] | None = None,
    only: set[int] | None = None,
    rest: set[int] | None = None,
) -> list[int]:
    """The operators (name codes, most extra time first) of a hotspot told by ratios: each runs HOT_RATIO x its
    peers' time or more, the first HOT_FEW of them carry HOT_SHARE of the rank's extra time, and the others run within
    ``rest_limit`` x of the peers' (the bulk of the work at normal speed: not a slower device, which slows
    every operator alike). A hotspot may be the largest part of the rank's time (a GELU made 24x as big, with
    its backward and the reduction of its gradient); [] when it is not one. ``names`` (the codes' names), on CPU
    ranks: only dispatcher operators can be hot (a wrapper's self time, an autograd node's or a dispatch mode's,
    is glue around the operators, ``parsers.kineto_host.is_operator``); ``only``: the codes that may be hot;
    ``rest``: the codes the rest is weighed on (default all)."""
    total = sum(v for v in excess.values() if v > 0)
    if total <= 0:
        return []

    def rest_ratio(hot: list[int]) -> float:
        kept = [n for n in own if n not in hot and (rest is None or n in rest)]
        rest_own = sum(own[n] for n in kept)
        rest_peer = sum(own[n] - excess.get(n, 0.0) for n in kept)
        return rest_own / rest_peer if rest_peer > 0 else math.inf

    def ratio(n: int) -> float:
        peer = own[n] - excess[n]
        return own[n] / peer if peer > 0 else math.inf

    hot = [
        n
        for n, e in excess.items()
        if e > 0
        and ratio(n) >= HOT_RATIO
        and (names is None or is_operator(names[n]))
        and (only is None or n in only)
    ]
    # ... and HOT_RATIO x as slow as the rest, and as the rank's typical operator (the median ratio, weighted by the
    # peers' time): a rank (or stage) with twice the work of every kind is no hotspot, nor is a rank slower in every
    # operator whose slowest few (on a shared host they scatter 1.4-4x) would leave a rest that looks normal
    typical = _typical_ratio(excess, own)
    hot = sorted(
        (n for n in hot if ratio(n) >= HOT_RATIO * max(rest_ratio(hot), typical, 1.0)),
        key=lambda n: -excess[n],
    )
    if sum(excess[n] for n in hot[:HOT_FEW]) < HOT_SHARE * total or rest_ratio(hot) > rest_limit:
        return []
    return hot


def _typical_ratio(excess: Mapping[int, float], own: Mapping[int, float]) -> float:
    """The median of the operators' ratios (own time / peers' time), each weighted by the peers' time."""
    peers = {n: own[n] - excess.get(n, 0.0) for n in own}
    ratios = [(own[n] / t, t) for n, t in peers.items() if t > 0]
    return weighted_median([r for r, _ in ratios], [t for _, t in ratios]) or 1.0


def stage_hotspots(
    found: list[Finding],
    frame: Frame,
    stages: list[list[int]],
    host_ranks: frozenset[int] = frozenset(),
) -> list[Finding]:
    """``found`` with a stage imbalance whose stage is heavy because a few operators run far slower on it
    (:func:`far_slower`, its ranks against the other stages' ranks, which run the same layers) named an
    operator_hotspot of its ranks: the remedy is the operator, not the split of the layers. Stages are no replicas
    (the last one runs the LM head and the loss too): only operators that the stage calls as often as the others do
    can be hot, the same calls taking longer."""
    out = []
    for f in found:
        ranks = f.culprit.ranks
        others = [r for s in stages for r in s if r not in ranks]
        if f.kind != "stage_imbalance" or not ranks or not others:
            out.append(f)
            continue
        named = _op_code(frame.take(np.isin(frame.rank, [*ranks, *others])))
        host = np.array([r for r in (*ranks, *others) if r in host_ranks])
        times = operator_time(named, typical_durations(named, host) if len(host) else None)
        counts = call_counts(named)
        # The other stages' reference per operator, once (at 1024 ranks a stage of 128 is weighed against 896):
        # the median over their ranks of each one's time per step and of its calls (0 where it has none).
        per_rank: dict[int, dict[int, float]] = {}
        for (r, n), t in times.items():
            per_rank.setdefault(r, {})[n] = float(np.median(t))
        theirs = [per_rank.get(r, {}) for r in others]
        names = {n for r in ranks for n in per_rank.get(r, {})}
        ref = {n: float(np.median([m.get(n, 0.0) for m in theirs])) for n in names}
        ref_calls = {n: float(np.median([counts.get((r, n), 0.0) for r in others])) for n in names}
        hot_sets = []
        for rank in ranks:
            # Only what the stage calls as often as the others do can be hot, and only that is the rest at
            # normal speed: a call the others make less often (a stage's own layer, the loss, a hot call's
            # backward reduction) is work of its own. The hot ones must still carry most of all its extra time
            # (a stage of twice the layers calls its once-a-step optimizer ops as often, on twice the weights).
            own = per_rank.get(rank, {})
            excess = {n: v - ref[n] for n, v in own.items()}
            alike = {n for n in own if counts.get((rank, n)) == ref_calls[n]}
            on_host = rank in host_ranks
            hot_sets.append(
                far_slower(
                    excess,
                    own,
                    HOTSPOT_REST_HOST if on_host else HOTSPOT_REST,
                    named.names if on_host else None,
                    alike,
                    alike,
                )
            )
            if not hot_sets[-1]:
                break  # every rank of the stage must be hot
        if not all(hot_sets):
            out.append(f)
            continue
        operator = " + ".join(short_name(named.names[n]) for n in hot_sets[0][:3])
        evidence = (
            f"stage {f.culprit.stage} is heavy in {operator} alone, which runs {HOT_RATIO:g}x or more its time on the other stages; "
            + f.evidence
        )
        out.append(
            finding(
                "operator_hotspot",
                blamed(ranks, operator=operator),
                f.steps,
                f.impact_pct,
                evidence,
                step=f.step,
            )
        )
    return out


def rank_findings(
    frame: Frame,
    figures: Mapping[tuple[int, int], Mapping[str, int]],
    peer_sets: list[list[int]],
    ep_of: Mapping[int, int],
    waits: Mapping[tuple[int, int], Mapping[str, int]],
    step_ns: float,
    host_ranks: frozenset[int] = frozenset(),
    compute_scale: float = 1.0,
) -> list[Finding]:
    """Culprit ranks: host_stall when the extra own time is the host starting the device late, else a compute
    kind (``host_ranks``: CPU ranks, :func:`classify_compute`; ``compute_scale``: :func:`rank_excess`, and a CPU
    rank's compute excess is weighed at the clock's pace in its impact: :func:`_merge_ranks`)."""
    excess = rank_excess(figures, peer_sets, step_ns, compute_scale, host_ranks)
    steps_total = len({s for _, s in figures}) or 1
    by_rank: dict[int, dict[str, list[dict[str, Any]]]] = {}
    for e in excess:
        by_rank.setdefault(e["rank"], {}).setdefault(e["part"], []).append(e)
    is_moe = "all_to_all" in frame.collectives
    raw = []
    for rank, parts in by_rank.items():
        peers = next(p for p in peer_sets if rank in p)
        # The rank's compute classified once (it reads the rank's and its peers' operators), when first needed.
        classified = functools.cache(partial(classify_compute, frame, rank, peers, ep_of, is_moe, host_ranks))
        weak = [e for e in parts.get("compute_ns", []) if e.get("weak")]
        if (
            weak
            and classified()[0] != "operator_hotspot"
            and not _more_work(frame, rank, peers, weak, host_ranks)
        ):
            parts["compute_ns"] = [e for e in parts["compute_ns"] if not e.get("weak")]
            if not parts["compute_ns"]:
                del parts["compute_ns"]
                if not parts:
                    continue
        # A rank is late for one reason, the larger excess; on a CPU rank its compute (at typical durations) is
        # the firmer evidence, its idle time the clock's (a rank with more work also idles more between its
        # operators, in Python): both are reported.
        host = [p for p in HOST_PARTS if p in parts]
        for p in sorted(host, key=lambda p: sum(e["excess_ns"] for e in parts[p]))[:-1]:
            del parts[p]  # one stall, seen several ways: the largest view of it
        if "compute_ns" in parts and "hooks_ns" in parts:
            # One cause seen twice: a rank slower at its work is slower in its autograd frames too, by about as
            # much; frames held far beyond that (a comm hook that sleeps, the work after it running cold) are it.
            # Work run cold is slower alike in every operator: a few operators far slower than the rest (a
            # hotspot) are a cause of their own, beside the frames held.
            held = _beyond_peers(parts["hooks_ns"]) > HOOK_DOMINANCE * _beyond_peers(parts["compute_ns"])
            if not (held and classified()[0] == "operator_hotspot"):
                del parts["compute_ns" if held else "hooks_ns"]
        both = rank in host_ranks and "compute_ns" in parts
        chosen = list(parts) if both else [max(parts, key=lambda p: sum(e["excess_ns"] for e in parts[p]))]
        for part in chosen:
            if part == "hooks_ns":
                kind, operator = "host_stall", hook_holder(frame, rank)
            elif part in HOST_PARTS:
                kind, operator = "host_stall", None
            else:
                kind, operator = classified()
            raw.append(
                {"rank": rank, "kind": kind, "operator": operator, "rows": parts[part], "peers": peers}
            )
    return _merge_ranks(
        _expert(raw, peer_sets, ep_of, is_moe), waits, steps_total, step_ns, host_ranks, compute_scale
    )


def _more_work(
    frame: Frame, rank: int, peers: list[int], rows: list[dict[str, Any]], host_ranks: frozenset[int]
) -> bool:
    """A CPU rank's compute under MIN_RATIO_HOST x its peers' that is its own work: ``rows`` stand out beyond any
    doubt (``clear``: :func:`_clear`) and its calls run at its peers' pace, less than half its excess told by its
    operators running slower alike (:func:`operators.rank_speeds`): extra calls (layers, a larger batch's
    activations) leave its median operator as fast as theirs, a busier core slows every operator."""
    if not all(e.get("clear") for e in rows):
        return False
    ratio = min(e["value_ns"] / e["peer_ns"] for e in rows if e["peer_ns"] > 0)
    speed = rank_speeds(frame, [peers], host_ranks & frozenset(peers)).get(rank)
    return speed is not None and speed - 1 < (ratio - 1) / 2


def _beyond_peers(rows: list[dict[str, Any]]) -> float:
    """How much longer than its peers' a rank's figure was over the steps it exceeded them in (0: as long)."""
    return sum(e["value_ns"] for e in rows) / max(1.0, sum(e["peer_ns"] for e in rows)) - 1.0


def hook_holder(frame: Frame, rank: int) -> str:
    """The autograd nodes (short names, most first; a second one where it held half as much) whose hooks held a
    CPU rank back the most beyond their typical durations (:func:`step_figures`' ``hooks_ns``)."""
    mine = frame.take(frame.rank == rank)
    extra = hook_excess(mine, typical_durations(mine))
    by_name: Counter[str] = Counter()
    for code, e in zip(mine.name[extra > 0].tolist(), extra[extra > 0].tolist(), strict=True):
        by_name[short_name(mine.names[code].removeprefix(AUTOGRAD_FRAME).strip())] += e
    top = by_name.most_common(2)
    return " + ".join(n for n, e in top if e >= MERGE_SHARE * top[0][1]) or "its hooks"


LATE_SHARE = 0.9  # a late arriver is the last member of this share of its group's collectives that anyone waited in ...
LATE_INSTANCES = 6  # ... of at least this many
LATE_SHARE_HOST = PERSISTENT_SHARE  # ... on CPU ranks, where the host must also be seen holding it back:
LATE_STRETCH = 1.3  # its operators last this many times longer on the clock (over their typical durations) than any other member's


def late_arrivals(
    instances: pa.Table,
    named: set[int],
    step_ns: float,
    steps_total: int,
    host_ranks: frozenset[int] = frozenset(),
    clock: Mapping[tuple[int, int], int] | None = None,
    figures: Mapping[tuple[int, int], Mapping[str, int]] | None = None,
    group_members: Mapping[str, list[int]] | None = None,
    holes: Mapping[int, float] | None = None,
) -> list[Finding]:
    """host_stall for a rank that arrives last at (nearly) every collective of its data-parallel group in every
    profiled step, while its own time (``named``: the ranks :func:`rank_findings` blames) is like its peers': the
    host holds it back between its work and the collective's launch (a slow communication hook, a busy host
    thread), which neither its compute nor its launch delay shows. Which member is last is chance in a clean job
    (each is last in about 1/members of the instances); only a data-parallel job's groups are weighed, since a
    pipeline's or a tensor-parallel group's arrival order is the schedule's. The impact: the skew of those
    instances (how long the group waited for it) per step.

    On CPU ranks (``host_ranks``, with each (rank, step)'s ``clock`` compute, its compute at typical durations in
    ``figures`` and the groups' ``group_members``) lateness alone does not tell a host that holds the rank back from a
    rank the scheduler happens to run behind the others (on a shared host one rank is last every time in a clean
    job). A hook or a host thread that holds the rank back does it inside its operators (DDP's communication hook
    runs within autograd's call): the rank's operators last LATE_STRETCH x longer on the clock, over their
    typical durations, than any other member's, for work alike; or (a hook that runs outside any profiled
    operator, a sleep between the backward and the bucket's launch) it leaves its thread idle in one long hole
    before it joins: the median of its ``holes`` (per rank, :func:`arrival_holes`) is LATE_SENDER_RATIO x every
    other member's and at least half the median time the group waited for it. Then being last at
    LATE_SHARE_HOST of the instances is enough."""
    t = instances.select(["group", "step", "late_rank", "total_wait_ns", "skew_ns", "members"]).to_pydict()
    groups: dict[str, list[tuple[int, int, int]]] = {}
    for g, step, late, wait, skew, members in zip(*t.values(), strict=True):
        if members > 1 and wait > 0 and late >= 0:
            groups.setdefault(g, []).append((step, late, skew))
    out = []
    for group, rows in sorted(groups.items()):
        counts = Counter(late for _, late, _ in rows)
        rank, n = counts.most_common(1)[0]
        steps = sorted({s for s, late, _ in rows if late == rank})
        every = {s for s, _, _ in rows}
        on_host = (
            rank in host_ranks and clock is not None and figures is not None and group_members is not None
        )
        if (
            rank in named
            or len(rows) < LATE_INSTANCES
            or n < (LATE_SHARE_HOST if on_host else LATE_SHARE) * len(rows)
            or len(steps) < PERSISTENT_SHARE * len(every)
        ):
            continue
        skew = [sk for _, late, sk in rows if late == rank]
        if on_host:
            peers = [r for r in group_members.get(group, []) if r != rank]  # type: ignore[union-attr]
            others = [_stretch(clock, figures, r) for r in peers]  # type: ignore[arg-type]
            stretched = bool(others) and _stretch(clock, figures, rank) >= LATE_STRETCH * max(others)  # type: ignore[arg-type]
            if not (stretched or _holds_a_hole(rank, peers, holes or {}, statistics.median(skew))):
                continue
        impact = min(100 * sum(skew) / max(len(every), 1) / step_ns, 100.0) if step_ns else 0.0
        if impact < MIN_IMPACT_PCT or len(every) < 2 or len(every) < PERSISTENT_SHARE * steps_total:
            continue
        evidence = (
            f"rank {rank} arrived last at {n} of the {len(rows)} collectives of group {group} that anyone waited in, in "
            f"{len(steps)} of {len(every)} steps (the group waited {statistics.median(skew) / 1e6:.2f} ms for it each time, median), "
            "while its compute and its start of the step are like its peers': the host holds it back before it joins"
        )
        out.append(finding("host_stall", blamed([rank]), steps, impact, evidence, step=steps[0]))
    return out


def _holds_a_hole(rank: int, peers: list[int], holes: Mapping[int, float], waited: float) -> bool:
    """``rank``'s median hole before its arrivals is LATE_SENDER_RATIO x every peer's and half what the group
    waited for it (``waited``): the wait is its thread's idle time, not its work's."""
    others = [holes[r] for r in peers if r in holes]
    mine = holes.get(rank, 0.0)
    return bool(others) and mine >= LATE_SENDER_RATIO * max(others) and mine >= 0.5 * waited


def arrival_holes(frame: Frame, participation: pa.Table, host_ranks: frozenset[int]) -> dict[int, float]:
    """Per CPU rank (``host_ranks``), the median over its collectives of the longest stretch in which it computed
    nothing between its previous arrival at a collective of the same step and this arrival (the first of a step
    has no window: what comes before it is the step's start, the data loader's)."""
    if not host_ranks or not participation.num_rows:
        return {}
    t = participation.select(["rank", "step", "start_ns"]).to_pydict()
    rank, step, start = (np.asarray(t[k], np.int64) for k in ("rank", "step", "start_ns"))
    compute = frame.kind == frame.code("kinds", "compute")
    out: dict[int, float] = {}
    for r in sorted(set(rank.tolist()) & host_ranks):
        mine = rank == r
        order = np.lexsort((start[mine], step[mine]))
        at, st = start[mine][order], step[mine][order]
        opens = np.flatnonzero((st[1:] == st[:-1]) & (at[:-1] < at[1:])) + 1
        if not len(opens):
            continue
        rows = (frame.rank == r) & compute
        hole = longest_gap_within(frame.start[rows], frame.end[rows], at[opens - 1], at[opens])
        out[r] = float(np.median(hole))
    return out


def _stretch(
    clock: Mapping[tuple[int, int], int], figures: Mapping[tuple[int, int], Mapping[str, int]], rank: int
) -> float:
    """How much longer ``rank``'s operators last on the clock than at their typical durations (median over its
    steps; 0 where unknown)."""
    ratios = [
        clock[k] / figures[k]["compute_ns"]
        for k in clock
        if k[0] == rank and k in figures and figures[k].get("compute_ns")
    ]
    return float(statistics.median(ratios)) if ratios else 0.0


LATE_SENDER_RATIO = 2.0  # a late sender idles before its sends twice as long as any other sender does ...
LATE_SENDER_QUANTILE = 0.25  # ... in three of every four of its sends to one neighbour ...
LATE_SENDER_WINDOWS = 3  # ... over at least this many sends to it per profiled step ...
LATE_SENDER_ALIKE = 0.5  # ... holes alike: the lower quartile at least half the median ...
# ... in one hole that is most of the time between its previous communication and the send, or a share of that
# time LATE_SENDER_RATIO x every other sender's (its compute before the send is long: the hole stands out)
LATE_SENDER_SHARE = 0.5


def late_senders(
    frame: Frame,
    p2p: pa.Table,
    named: set[int],
    host_ranks: frozenset[int],
    step_ns: float,
    steps_total: int,
) -> list[Finding]:
    """host_stall for a pipeline rank (a CPU rank: ``host_ranks``) whose host holds back each of its sends to one
    neighbour: in the window from its previous communication (a receive completing, a send posted) to the send,
    its longest stretch without compute is, in three of every four of those sends (LATE_SENDER_QUANTILE),
    LATE_SENDER_RATIO x what every other sender's is in three of four of its sends to any one neighbour, and
    most of the window (LATE_SENDER_SHARE) or LATE_SENDER_RATIO x the share any other sender's longest hole is
    of its windows (a stage computing 8 ms before each send, then sleeping 5 ms: 38 % of the window, 2 % on the
    other sender; a slower rank's holes grow with its work, their share does not), over at least
    LATE_SENDER_WINDOWS sends to that neighbour per step.
    Its next stage waits for data the rank had ready. A host that holds a send back (a sleep, a lock, a busy host
    thread) leaves one hole before every such send; the Python between a stage's operators leaves many short
    ones, more on a stage with more glue (the last one, which computes the loss before each backward send: its
    idle adds up to 60 % of its windows on a shared host, in holes of tens of us), so the longest hole, not the
    sum, is the evidence, and the scheduler or a wait for a gradient holds some sends, not three of four. The
    sends to each neighbour are weighed apart: a stage's forward sends and its backward sends follow different
    work, and what holds one direction back (a forward hook, an activation's copy) need not hold the other (a
    stage's forward hook sleeping 10 ms: a hole of 10.3 ms before each forward send, 0.3 ms before its backward
    ones). The first and last stages are judged so too (a first stage's forward hook sleeping 5 ms: 5.3 ms before
    three of four of its sends, against at most 0.3 ms on every other sender). On a stage of its own there is no
    replica to compare its compute or idle time with, and its total idle time in a step is as noisy as the
    scheduler (tens of ms). A host held back before each send is held about as long each time (a sleep of 5 ms:
    holes of 5.2-5.4 ms), so the holes must be alike (LATE_SENDER_ALIKE: the lower quartile at least half the
    median); a rank that waits for what a slower neighbour sends it waits as long as that neighbour makes it
    (a stage beside a slow one: holes of 0.2-20 ms before its sends, lower quartile 1.9 ms, median 6.4 ms).
    A pipeline of two stages has one other sender, and is weighed against it (a first stage sleeping 5 ms before
    each send: 5.33 ms in three of four, at most 0.20 ms on the last stage). A hole holds the neighbour back only
    as long as the neighbour's receives wait (their median duration bounds it): under
    ``torch.distributed.pipelining`` a stage is blocked until the next one takes its previous data, so the stage
    before a sleeping one idles as long before its sends (pp8 1F1B: 9.7 ms against the sleeper's 10.2 ms) while
    the sleeper's receives of its data take 0.25 ms and the sleeper's neighbour waits 10 ms for each of its own.
    The impact: that hole per send times those sends per step, over the step. A hole under HOST_HOLD_NS is the
    scheduler's (a clean pp4 job's first stage: 1.01 ms before three of four sends, 2.8 % of its step replayed).
    ``named``: ranks already blamed for their own time."""
    if not len(p2p) or not host_ranks or not step_ns:
        return []
    t = p2p.select(["src", "dst", "step", "send_start_ns", "recv_start_ns", "recv_end_ns"]).to_pydict()
    src, dst, step = (np.asarray(t[k], np.int64) for k in ("src", "dst", "step"))
    send, recv_end = np.asarray(t["send_start_ns"], np.int64), np.asarray(t["recv_end_ns"], np.int64)
    waited = recv_end - np.asarray(t["recv_start_ns"], np.int64)  # how long each send's receive lasted
    compute = frame.kind == frame.code("kinds", "compute")
    # (rank, neighbour) -> its hole and share in three of four sends, the sends, whether they can be judged (enough
    # of them, holes alike)
    held: dict[tuple[int, int], tuple[float, float, int, bool]] = {}
    for rank in sorted(set(src.tolist()) & host_ranks):
        mine = src == rank
        # The rank's marks (its sends, its receives completing) in step and time order: each send's window opens
        # at the mark just before it, if that mark is of the same step and earlier.
        mark_t = np.concatenate([send[mine], recv_end[dst == rank]])
        mark_s = np.concatenate([step[mine], step[dst == rank]])
        mark_to = np.concatenate([dst[mine], np.full(int((dst == rank).sum()), -1)])
        # how long the neighbour's receive of each send lasted (none for the rank's own receives)
        mark_wait = np.concatenate([waited[mine], np.zeros(int((dst == rank).sum()), np.int64)])
        is_send = np.arange(len(mark_t)) < mine.sum()
        order = np.lexsort((mark_t, mark_s))
        mark_t, mark_s, mark_to, is_send = mark_t[order], mark_s[order], mark_to[order], is_send[order]
        mark_wait = mark_wait[order]
        opens = np.concatenate([[False], (mark_s[1:] == mark_s[:-1]) & (mark_t[:-1] < mark_t[1:])])
        keep = is_send & opens
        if not keep.any():
            continue
        at, prev, to = mark_t[keep], mark_t[np.flatnonzero(keep) - 1], mark_to[keep]
        rows = (frame.rank == rank) & compute
        hole = longest_gap_within(frame.start[rows], frame.end[rows], prev, at)
        received = mark_wait[keep]
        share = hole / np.maximum(at - prev, 1)
        steps_sent = max(len(set(step[mine].tolist())), 1)
        for peer in sorted(set(to.tolist())):
            sent = to == peer
            # A sender holds its neighbour back only as long as the neighbour's receives wait for it: a stage
            # blocked until a late neighbour takes its previous data (pipelining waits on its sends) holds nobody.
            low = min(float(np.quantile(hole[sent], LATE_SENDER_QUANTILE)), float(np.median(received[sent])))
            held[(rank, peer)] = (
                low,
                float(np.quantile(share[sent], LATE_SENDER_QUANTILE)),
                int(sent.sum()),
                bool(sent.sum() >= LATE_SENDER_WINDOWS * steps_sent)
                and low >= LATE_SENDER_ALIKE * float(np.median(hole[sent])),
            )
    out = []
    for rank in sorted({r for r, _ in held}):
        others = [v[0] for (r, _), v in held.items() if r != rank]
        shares = [v[1] for (r, _), v in held.items() if r != rank]
        if rank in named or not others:  # two stages: the other one is all there is to compare with
            continue
        late = [
            (peer, idle, share, sends)
            for (r, peer), (idle, share, sends, judged) in held.items()
            if r == rank
            and judged
            and idle >= max(LATE_SENDER_RATIO * max(others), HOST_HOLD_NS)
            and (share >= LATE_SENDER_SHARE or share >= LATE_SENDER_RATIO * max(shares))
        ]
        if not late:
            continue
        impact = 100 * sum(idle * sends for _, idle, _, sends in late) / max(steps_total, 1) / step_ns
        if impact < MIN_IMPACT_PCT:
            continue
        steps = sorted(set(step[src == rank].tolist()))
        peer, idle, share, sends = max(late, key=lambda v: v[1] * v[3])
        evidence = (
            f"rank {rank}: idle {idle / 1e6:.2f} ms at a stretch ({100 * share:.0f} % of the time) between its previous "
            f"communication and its sends to rank {peer} (in three of four of {sends}) vs at most "
            f"{max(others) / 1e6:.2f} ms on the other senders: its host is late to send what its next stage waits for"
        )
        out.append(
            finding("host_stall", blamed([rank]), steps, impact, evidence, step=steps[0] if steps else None)
        )
    return out


def _expert(
    raw: list[dict[str, Any]], peer_sets: list[list[int]], ep_of: Mapping[int, int], is_moe: bool
) -> list[dict[str, Any]]:
    """In a MoE job, compute culprits that are exactly the ranks of one expert-parallel index of their stage
    received more tokens: expert_imbalance."""
    if not is_moe:
        return raw
    compute = [r for r in raw if r["kind"] != "host_stall"]
    for ep in {ep_of.get(r["rank"]) for r in compute}:
        mine = [r for r in compute if ep_of.get(r["rank"]) == ep]
        expected = {x for r in mine for x in r["peers"] if ep_of.get(x) == ep}
        if mine and {r["rank"] for r in mine} == expected:
            for r in mine:
                r["kind"], r["operator"] = "expert_imbalance", None
    return raw


def _merge_ranks(
    raw: list[dict[str, Any]],
    waits: Mapping[tuple[int, int], Mapping[str, int]],
    steps_total: int,
    step_ns: float,
    host_ranks: frozenset[int] = frozenset(),
    compute_scale: float = 1.0,
) -> list[Finding]:
    """The culprit ranks' rows made findings, one per kind and operator (a rank far behind the others its own),
    each with its impact: the excess over the profiled steps per step. A CPU rank's compute, counted at typical
    durations, is weighed at the clock's pace (``compute_scale``: the job's clock compute per typical ns), as the
    step it is a share of."""
    merged: dict[tuple[str, str | None], list[dict[str, Any]]] = {}
    observable = any(w.get("wait_ns") for w in waits.values())
    for r in raw:
        merged.setdefault((r["kind"], r["operator"]), []).append(r)
    groups: list[tuple[str, str | None, list[dict[str, Any]]]] = []
    for (kind, operator), items in merged.items():
        # Culprits of one kind are one finding (a whole slow group) when their excesses are alike; a rank far
        # behind the worst is a finding of its own, not named beside it.
        items = sorted(items, key=lambda r: -sum(row["excess_ns"] for row in r["rows"]))
        lead = 0.0
        for r in items:
            total = sum(row["excess_ns"] for row in r["rows"])
            if not groups or groups[-1][:2] != (kind, operator) or total < MERGE_SHARE * lead:
                groups.append((kind, operator, []))
                lead = total
            groups[-1][2].append(r)
    out = []
    for kind, operator, items in groups:
        ranks = sorted(r["rank"] for r in items)
        rows = [row for r in items for row in r["rows"]]
        steps = sorted({row["step"] for row in rows})
        per_step: dict[int, int] = {}
        for row in rows:  # several culprits in one step delay it once: the largest excess counts
            per_step[row["step"]] = max(per_step.get(row["step"], 0), row["excess_ns"])
        caused = sum(waits.get((r, s), {}).get("caused_ns", 0) for r in ranks for s in steps)
        # Extra own time slows the job only through the waits it makes others do: where waits are seen at all,
        # the impact is at most what the culprits' peers waited for them (none: the job absorbed it).
        # On CPU ranks (``host_ranks``) compute is counted at typical durations while the waits are the clock's,
        # which the scheduler moves as much as the work: the waits do not bound the work's cost there, nor a
        # stall's (a last stage's 40 ms stall before its step was "caused" 9 ms of waits: its peers' waits moved
        # with their own preemptions); the replay (``whatif.replay_findings``) weighs a launch delay's cost.
        on_host = set(ranks) <= host_ranks
        bounded = observable and not on_host
        extra = sum(per_step.values())
        if on_host and all(row["part"] == "compute_ns" for row in rows):
            extra = round(extra * compute_scale)
        if on_host and all(row["part"] == "hooks_ns" for row in rows):
            # A hold in hooks is a habit (rank_excess keeps no other) with no launch delay to replay: it costs its
            # typical step, the median over the profiled steps; a step held far longer had the scheduler's hold on
            # top (a DDP hotspot rank's AccumulateGrad: 0.02, 5.7 and 41 ms over its peers' in three steps, the
            # 41 ms in a step where another rank idled 40 ms).
            held = [*per_step.values(), *[0] * max(steps_total - len(per_step), 0)]
            extra = round(statistics.median(held) * steps_total)
        delay = min(extra, caused) if bounded else extra
        impact = 100 * delay / steps_total / step_ns
        # The job absorbed it, or (a CPU rank's stall or one-off excess: its clock is the scheduler's, which holds
        # a rank back for a few ms now and then) it costs the profiled steps too little: not worth a finding.
        # On a CPU rank an excess seen in a single step (not its habit) is as often the scheduler's as its own:
        # like a stall, it must cost the profiled steps MIN_IMPACT_PCT to be a finding.
        once = len(steps) < PERSISTENT_SHARE * steps_total
        on_cpu = set(ranks) <= host_ranks and (kind == "host_stall" or once)
        if impact < MIN_IMPACT_PCT and (delay < extra or on_cpu):
            continue
        worst = max(rows, key=lambda row: row["excess_ns"])
        what = HOST_PARTS.get(worst["part"], "compute")
        culprit = blamed(ranks, operator=operator or None)
        evidence = (
            f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}: {what} {worst['value_ns'] / 1e6:.2f} ms vs "
            f"{worst['peer_ns'] / 1e6:.2f} ms on peers in step {worst['step']} (+{worst['excess_ns'] / 1e6:.2f} ms)"
            + (f" in {operator}" if operator else "")
            + f"; peers waited {caused / 1e6:.2f} ms for {'them' if len(ranks) > 1 else 'it'} in collectives and receives"
        )
        out.append(finding(kind, culprit, steps, impact, evidence, step=worst["step"]))
    return out


def stage_findings(
    metrics: Mapping[str, Any],
    on_host: bool = False,
    work: Sequence[float] = (),
    compute_scale: float = 1.0,
    held: Collection[int] = (),
) -> list[Finding]:
    """stage_imbalance when the heaviest stage computes STAGE_IMBALANCE x the mean per micro-batch (and, with
    ``on_host``, CPU ranks: MIN_RATIO_HOST x the median of the other stages), or, with ``on_host``, when a stage is
    the heaviest in ``work`` (per stage, calls at job-wide prices: ``stages.stage_work``) by MIN_RATIO_HOST x the
    median of the others': more calls of the same operators (more layers) are no scheduler's noise, while the
    stage's time may be the others' give or take 20 % (the first stage does no input gradient, the last the loss,
    and a rank on a busier core runs slower), which hides a stage of 1.5x the layers at the pipeline's first stage
    (1.12-1.19x the others' time, measured on real dp x pp and interleaved jobs), or entirely: the busiest rank of a
    host takes more of its shared cores (a V schedule's rank 0 with 1.2x the work computed 3.09 ms per micro-batch
    against 3.06-3.16 ms). Such a stage costs, at the others' pace, what its extra work takes in every slot of the
    pipeline (:func:`_work_saving`), when that is more than its time shows. On CPU ranks with ``work``, a stage
    heavier in time only is one slow rank's: a stage of one rank, MIN_RATIO_HOST x every other stage.
    ``compute_scale``: the clock's time per ns of the passes' compute (``stages.stage_metrics``). ``held``: ranks
    whose host held their sends back (:func:`late_senders`), whose slower time alone is not a stage's: on a host
    of fewer cores than ranks, a rank that idles before each send computes while its neighbours, no longer waiting,
    compute too (a pp4 job on 2 cores whose rank 1 sleeps 10 ms before each send: its micro-batches 1.34-1.43x
    the other stages' at the same work, on three runs of one hour)."""
    if not metrics or metrics.get("num_stages", 1) < 2:
        return []
    per = {s["stage"]: s["compute_per_micro_batch_ns"] for s in metrics["stages"]}
    worst = metrics["bottleneck_stage"]
    heavy = worst
    if on_host and len(work) == len(per) and work:
        heavy = list(per)[max(range(len(work)), key=lambda i: work[i])]
    in_work = on_host and _heaviest_in_work(heavy, list(per), work, metrics.get("virtual_stages") or 1)
    by_time = (metrics.get("imbalance") or 0) >= STAGE_IMBALANCE
    if on_host:
        others = [v for s, v in per.items() if s != worst]
        by_time = by_time and bool(others) and per[worst] >= MIN_RATIO_HOST * statistics.median(others)
        if by_time and work and not (in_work and heavy == worst):
            # Heavier in time at the others' work: its ranks run slower, its layers are no more. That is a stage's
            # only where it is one slow rank (a stage's time is its least loaded rank's: a slow replica does not
            # make it heavy), and a slow rank stands apart from every other stage; two stages alike slower (a
            # pipeline of 4 on 2 cores: stages 1 and 2 1.47 and 1.53 ms, the others 1.1), or a stage of replicas
            # all slower (the last, whose loss and input gradients its core's share stretches to 1.36x the first),
            # are the host's cores. It stands MIN_RATIO_HOST x apart, as a CPU rank from its peers must: the other
            # stages are a lone rank's peers (the slowed lone ranks of the real jobs: 1.29-3.1x the runner-up; a
            # clean V job of transformer blocks under checkpointing on 2 cores: 1.16x at the same work).
            row = next(s for s in metrics["stages"] if s["stage"] == worst)
            by_time = (
                len(row["ranks"]) == 1
                and row["ranks"][0] not in held
                and per[worst] >= MIN_RATIO_HOST * max(others)
            )
    if not by_time and not in_work:
        return []
    step = metrics["step_time_ns"]

    def cost(stage: int) -> tuple[float, float, float]:
        """(by its time, by its work, the ns a step its work saves) of ``stage``: its time's where it is the
        slowest, its work's where it is the heaviest in work."""
        saved = _work_saving(metrics, work, compute_scale) if in_work and stage == heavy else 0.0
        timed = 100 * (step - metrics["balanced_step_time_ns"]) / step if step and stage == worst else 0.0
        return timed, 100 * saved / step if step else 0.0, saved

    # The heaviest in work and, where it is another, the slowest by its time alone: the one that costs more (a
    # pp4 interleaved job whose rank 1 took 1.7x every other stage's time with extra matmuls of hooks, no work
    # counted, beside a last stage 1.10x the others' work, just at its rule's bar and worth 0.3 %: the stage
    # in work was the finding, then dropped as too small, and the slow stage never named).
    candidates = [heavy] if in_work else []
    if by_time and worst not in candidates:
        candidates.append(worst)
    costs = {c: cost(c) for c in candidates}
    stage = max(candidates, key=lambda c: max(costs[c][:2]))
    timed, counted, saved = costs[stage]
    impact = max(timed, counted)
    if impact < MIN_IMPACT_PCT:
        return []
    row = next(s for s in metrics["stages"] if s["stage"] == stage)
    if counted > timed:
        evidence = work_evidence(metrics, stage, work, step - saved)
    else:
        evidence = stage_evidence(metrics, metrics["balanced_step_time_ns"])
    return [finding("stage_imbalance", blamed(row["ranks"], stage=stage), [], impact, evidence)]


def _work_saving(metrics: Mapping[str, Any], work: Sequence[float], compute_scale: float = 1.0) -> float:
    """What a balanced split saves (ns a step) if the stages' time per micro-batch followed their ``work``: the
    pipeline's slots (m + (p - 1) / v, as ``stages.stage_metrics``'s estimate) of the heaviest stage's extra work
    over the mean, at the stages' mean time per micro-batch."""
    times = [s["compute_per_micro_batch_ns"] for s in metrics["stages"]]
    mean_work = statistics.fmean(work) if work else 0.0
    if not times or not mean_work:
        return 0.0
    slots = metrics["micro_batches"] + (len(times) - 1) / max(metrics.get("virtual_stages") or 1, 1)
    return slots * statistics.fmean(times) * (max(work) / mean_work - 1) * compute_scale


def work_evidence(
    metrics: Mapping[str, Any], stage: int, work: Sequence[float], balanced_step_ns: float
) -> str:
    """The stage_imbalance evidence of a stage heavier in work than its time shows (:func:`stage_findings`)."""
    stages = [s["stage"] for s in metrics["stages"]]
    mine = work[stages.index(stage)]
    others = statistics.median(w for s, w in zip(stages, work, strict=True) if s != stage)
    row = next(s for s in metrics["stages"] if s["stage"] == stage)
    mean = statistics.fmean(s["compute_per_micro_batch_ns"] for s in metrics["stages"])
    return (
        f"stage {stage} does {mine / others:.2f}x the work of the other stages (their operators' calls at one "
        f"price), though it computes {row['compute_per_micro_batch_ns'] / 1e6:.2f} ms per micro-batch vs "
        f"{mean / 1e6:.2f} ms on average (its ranks took more of the shared cores); at the others' pace a balanced "
        f"split would take the step from {metrics['step_time_ns'] / 1e6:.1f} to {balanced_step_ns / 1e6:.1f} ms "
        f"{WORKED}"
    )


WORKED = "(its work counted, not timed)"  # ends the evidence of a stage heavier in work than in time


def _heaviest_in_work(stage: int, stages: list[int], work: Sequence[float], virtual: int = 1) -> bool:
    """``stage`` (of ``stages``, in the order of ``work``) does MIN_RATIO_HOST x the median of the others' work, or,
    where each rank holds ``virtual`` model chunks (interleaved, V and looped schedules: ``stages`` are ranks), the
    share of that excess one chunk makes: a chunk of 1.5x the blocks beside its rank's other chunk is 1.25x that
    rank's work at most (a real zero-bubble V job, 2 blocks a chunk, one of 3: 1.198x the others, which were alike
    to the call), and a chunk's own structure (the last stage's head and loss, 1.13x a clean pipeline's other
    stages) is as diluted (a clean V job's rank 0, the first and last chunks: 0.957x the others)."""
    if len(work) != len(stages) or len(work) < 2:
        return False
    mine = work[stages.index(stage)]
    others = [w for s, w in zip(stages, work, strict=True) if s != stage]
    ratio = 1 + (MIN_RATIO_HOST - 1) / max(int(virtual), 1)
    return mine >= ratio * statistics.median(others) and mine == max(work)


def stage_evidence(
    metrics: Mapping[str, Any],
    balanced_step_ns: float,
    layers: Mapping[str, list[int]] | None = None,
    estimate_kept: bool = False,
) -> str:
    """The stage_imbalance evidence quoting one estimate of the balanced step: the replay's with the whole-layer
    split it moved to (``layers``: now/balanced per stage), else the pipeline heuristic's; ``estimate_kept``: the
    heuristic's kept beside a replay (CPU ranks), which where it moved no layer is said to need a layer split."""
    stage = metrics["bottleneck_stage"]
    row = next(s for s in metrics["stages"] if s["stage"] == stage)
    mean = statistics.fmean(s["compute_per_micro_batch_ns"] for s in metrics["stages"])
    split = (
        f" (layers per stage {'/'.join(map(str, layers['now']))} -> {'/'.join(map(str, layers['balanced']))})"
        if layers
        else ""
    )
    # Other stages heavy too (a stage given extra layers beside a last stage the LM head makes heavier still):
    # named, heaviest first, so that the split below reads as the fix of both.
    also = "".join(
        f"; stage {s['stage']} too: {s['compute_per_micro_batch_ns'] / 1e6:.2f} ms"
        for s in sorted(metrics["stages"], key=lambda s: -s["compute_per_micro_batch_ns"])
        if s["stage"] != stage and s["compute_per_micro_batch_ns"] >= STAGE_IMBALANCE * mean
    )
    if estimate_kept and layers and list(layers["now"]) == list(layers["balanced"]):
        # The layers cannot be handed out more evenly (17 on 4 stages: one stage holds 5): the work of a layer
        # would have to be split (an estimate of the heuristic's, ``balanced_step_ns``).
        return (
            f"stage {stage} computes {row['compute_per_micro_batch_ns'] / 1e6:.2f} ms per micro-batch vs "
            f"{mean / 1e6:.2f} ms on average (imbalance {metrics['imbalance']:.2f}{also}); no split of whole layers does "
            f"better (layers per stage {'/'.join(map(str, layers['now']))}): splitting the work evenly would take "
            f"the step from {metrics['step_time_ns'] / 1e6:.1f} to {balanced_step_ns / 1e6:.1f} ms"
        )
    return (
        f"stage {stage} computes {row['compute_per_micro_batch_ns'] / 1e6:.2f} ms per micro-batch vs {mean / 1e6:.2f} ms "
        f"on average (imbalance {metrics['imbalance']:.2f}{also}); a balanced split{split} would take the step from "
        f"{metrics['step_time_ns'] / 1e6:.1f} to {balanced_step_ns / 1e6:.1f} ms"
    )


def clock_findings(ranks: pa.Table) -> list[Finding]:
    """clock_skew when ranks' clocks had to be shifted by more than CLOCK_SKEW_NS to line their collectives up."""
    rows = ranks.select(["rank", "host", "clock_offset_ns", "clock_uncertainty_ns"]).to_pylist()
    # An offset within three times the estimate's own spread is not evidence of a skewed clock.
    skewed = [
        r
        for r in rows
        if abs(r["clock_offset_ns"]) > max(CLOCK_SKEW_NS, 3 * (r["clock_uncertainty_ns"] or 0))
    ]
    if not skewed:
        return []
    worst = max(skewed, key=lambda r: abs(r["clock_offset_ns"]))
    hosts = sorted({str(r["host"]) if r["host"] else f"the host of rank {r['rank']}" for r in skewed})
    evidence = (
        f"{len(skewed)} rank(s) on {', '.join(hosts)} ran on a clock {worst['clock_offset_ns'] / 1e6:+.3f} ms off "
        "(estimated from collectives and corrected before analysis)"
    )
    return [finding("clock_skew", blamed(sorted(r["rank"] for r in skewed), hosts=hosts), [], 0.0, evidence)]


HOST_NOISE_PCT = 1.0  # on a job of CPU ranks only: what a finding must cost at least, once replayed


def above_host_noise(found: list[Finding]) -> list[Finding]:
    """The findings of a job of CPU ranks only that cost more than its noise does, their impact replayed where it
    could be (``whatif.replay_findings``). The scheduler holds a rank back now and then, and its rerun without the
    fault (the real-job matrix's twins) shows culprits that cost 0-0.7 % of a step: a finding must cost
    HOST_NOISE_PCT. A gloo transfer's time after the last arrival is its runloop threads' scheduling, not a link's
    hardware: a slow link is a cause only where its replay, its transfers as fast as comparable ones, saves as much
    as any other finding must (MIN_IMPACT_PCT; a hardware link is reported however small). Clock skew, which
    costs no time, stays. So does a host stall, whatever its replay saves (:func:`absorbed_stall`)."""

    def floor(f: Finding) -> float:
        if counted(f):  # counted, not timed: no scheduler makes calls
            return EXTRA_IMPACT_PCT
        return MIN_IMPACT_PCT if f.kind == "slow_link" and f.what_if is not None else HOST_NOISE_PCT

    return [
        absorbed_stall(f) if f.kind == "host_stall" and f.impact_pct < floor(f) else f
        for f in found
        if kinds.of(f.kind).informative or f.impact_pct >= floor(f) or (f.kind == "host_stall" and f.what_if)
    ]


def absorbed_stall(f: Finding) -> Finding:
    """A host stall on CPU ranks whose replay saves less than the host's noise, kept and said so. Its detectors'
    bars (:func:`rank_excess`: far beyond its peers and beyond the rank's own other steps, at least HOST_HOLD_NS;
    the late arrivers' and the held sends' own) keep the scheduler's holds out (no host stall at all in 135 clean
    real jobs before the replay), and where a host runs more ranks than it has cores, the others ran on
    the core it left while it slept: a dp8 rank's 40 ms before its step's first work on 2 cores, replayed away,
    saves 0.0 % (the others were still computing), where with a core or a device per rank it holds up every peer.
    Its impact stays its replay's: what it cost this run."""
    saving = (f.what_if or {}).get("saving_pct", 0.0)
    return replace(
        f,
        evidence=f"{f.evidence}; yet replayed without it, the profiled steps are only {max(float(saving), 0.0):.2f} % "
        "shorter: the other ranks' own work held them as long (on a host its ranks share, they ran while it waited)",
    )


def ranked(findings: list[Finding], by_replay: bool = False) -> list[Finding]:
    """Largest impact first; clock skew (impact 0) after the performance findings. ``by_replay`` (a job of CPU
    ranks only): where every performance finding was replayed, by what its replay saves. There a finding of extra
    work keeps its own estimate as its impact (made from typical durations: ``whatif.replay_findings``) while the
    others' impact is their replay's, and two estimates do not order causes: a pipeline whose rank 1 sleeps 5 ms
    before each send came second, at 5.8 %, to a stage 1.22x as heavy on a busier core, at 8.5 % by the pipeline
    heuristic and 5.5 % by its replay. Replays that all save less than the host's noise (HOST_NOISE_PCT) order
    nothing either: a dp2 x pp2 job's stage of twice the blocks (12.6 % by the pipeline heuristic, its replay
    -0.04 %) came second to a rank 1.2x its replica on a busier core (its replay 0.65 %)."""
    performance = [f for f in findings if not kinds.of(f.kind).informative]
    replayed = by_replay and all(f.what_if is not None and "saving_pct" in f.what_if for f in performance)
    replayed = replayed and any(
        float(f.what_if["saving_pct"]) >= HOST_NOISE_PCT for f in performance if f.what_if
    )

    def cost(f: Finding) -> float:
        if replayed and f.what_if is not None:
            saving = max(float(f.what_if["saving_pct"]), 0.0)
            # A replay that moved no layer ranks its finding by the finding's own estimate, at most: no split does
            # better, and what the replay saves is the stage's replicas evened out, or nothing at all.
            return min(f.impact_pct, saving) if _moved_nothing(f.what_if) else saving
        return f.impact_pct

    return sorted(findings, key=lambda f: (-cost(f), f.kind))


def _moved_nothing(what_if: Mapping[str, Any]) -> bool:
    """A replay of stages balanced in which no whole layer moved (every split does worse): what it saves is not
    the split's (it evens out the stages' replicas too: a slow rank of the stage's), so it does not rank the
    finding beyond the finding's own estimate (a dp2 x pp2 job's 1.4x rank 0 and its LM-head stage 1.17x the
    other: both replays saved 17 ms a step, the stage's by evening out rank 0), and a replay that saves nothing
    ranks it at nothing (that job's sends linked right: the stages' replay 0, rank 0's 2.9 %)."""
    layers = what_if.get("layers")
    return layers is not None and list(layers["now"]) == list(layers["balanced"])


def _slow_units(
    keys: list[tuple[Any, ...]], units: list[tuple[int, ...]], transfer: np.ndarray, step: np.ndarray
) -> list[dict[str, Any]]:
    """Units (a group's ranks or a rank pair) whose median transfer time is SLOW_LINK_RATIO x that of comparable
    units (same key: collective, size, group size, link type) elsewhere; with their extra time per step.

    A slow link moves every transfer slower, so its transfers stand apart from the comparable ones: its fast
    quarter (LINK_QUANTILE) is still slower than the comparable transfers' slow quarter. A link whose median alone
    is slow is one whose transfers the host's scheduling stretched now and then (CPU ranks on a busy host: a
    transfer of a few kB lasts as long as its threads wait for a core, 0.1 to 60 ms), not a slow link."""
    per_unit: dict[tuple[Any, ...], dict[tuple[int, ...], list[int]]] = {}
    for i, (key, unit) in enumerate(zip(keys, units, strict=True)):
        per_unit.setdefault(key, {}).setdefault(unit, []).append(i)
    out = []
    for key, by_unit in per_unit.items():
        medians = {u: float(np.median(transfer[rows])) for u, rows in by_unit.items()}
        for unit, rows in by_unit.items():
            others = [m for u, m in medians.items() if u != unit]
            if not others:
                continue
            ref = statistics.median(others)
            elsewhere = np.concatenate([rows_of for u, rows_of in by_unit.items() if u != unit])
            apart = np.quantile(transfer[rows], LINK_QUANTILE) > np.quantile(
                transfer[elsewhere], 1 - LINK_QUANTILE
            )
            # Slow in (nearly) every step it transfers in, not in one step a busy host stretched.
            by_step = [float(np.median(transfer[rows][step[rows] == s])) for s in np.unique(step[rows])]
            consistent = sum(m >= SLOW_LINK_RATIO * ref for m in by_step) >= PERSISTENT_SHARE * len(by_step)
            if ref > 0 and len(rows) >= 2 and medians[unit] >= SLOW_LINK_RATIO * ref and consistent and apart:
                extra = np.clip(transfer[rows] - ref, 0, None)
                out.append(
                    {
                        "unit": unit,
                        "key": key,
                        "ratio": medians[unit] / ref,
                        "extra_ns": float(extra.sum()),
                        "steps": sorted(set(step[rows].tolist())),
                        "ref_ns": ref,
                        "median_ns": medians[unit],
                    }
                )
    return out


def _slow_npu_links(links: pa.Table) -> list[dict[str, Any]]:
    """Slow units from the Ascend per-link traffic (``job.extra("links")``): time per byte on each link against
    the other links of the same transport (HCCS, RDMA, PCIE), collective kind and size; the LOCAL self-links are
    copies, not links."""
    # Send/receive transit on these links includes the wait for the peer; only collectives time the link alone.
    collective = pc.invert(pc.is_in(links.column("op_type"), pa.array(["send", "receive", "recv"])))
    keep = pc.and_(
        pc.and_(pc.not_equal(links.column("transport"), "LOCAL"), pc.greater(links.column("bytes"), 0)),
        collective,
    )
    keep = pc.and_(
        keep, pc.and_(pc.is_valid(links.column("src_global")), pc.is_valid(links.column("dst_global")))
    )
    link = links.filter(keep).to_pydict()
    if not link["bytes"]:
        return []
    keys = [
        ("link", t, op, size)
        for t, op, size in zip(link["transport"], link["op_type"], link["bytes"], strict=True)
    ]
    units = [tuple(sorted((a, b))) for a, b in zip(link["src_global"], link["dst_global"], strict=True)]
    per_byte = np.asarray(link["transit_ns"], dtype=float) / np.asarray(link["bytes"], dtype=float)
    slow = _slow_units(keys, units, per_byte, np.asarray(link["step"]))
    for s, size in zip(slow, [float(np.median(link["bytes"]))] * len(slow), strict=True):
        s["extra_ns"] *= size  # the excess per byte, over a typical transfer
        s["median_ns"] *= size
        s["ref_ns"] *= size
        s["key"] = (f"{s['key'][1]} transfer", size, 1)
    return slow


def _one_host(ranks: Sequence[int], host_of: Mapping[int, str | None]) -> bool:
    """Every rank on one known host (unknown hosts count as separate, as ``comm.link_type`` counts them): within
    one host a job of CPU ranks has no link (``link_findings``)."""
    hosts = {host_of.get(r) for r in ranks}
    return len(hosts) == 1 and None not in hosts


def link_findings(
    instances: pa.Table,
    p2p: pa.Table,
    members: Mapping[str, list[int]],
    host_of: Mapping[int, str | None],
    step_ns: float,
    steps_total: int,
    links: pa.Table | None = None,
    between_hosts: bool = False,
) -> list[Finding]:
    """slow_link: collective groups, send/recv pairs or (Ascend) links whose transfers, once every member has
    arrived, are slow against comparable ones; the link is the rank pair every slow unit shares, else the
    slowest unit's ranks. ``between_hosts`` (a job of CPU ranks): only groups and pairs that span hosts are
    links; within one host gloo copies through memory, and a transfer's time after the last arrival is the
    runloop threads' turn on a core (on the real-job matrix's one-host jobs every slow_link was that: a clean
    dp2 x tp2 job's tensor-parallel all-reduce 13x its peers', in the group whose ranks the scheduler ran least)."""
    from paradiag.analysis.comm import link_type

    i = instances.select(
        ["group", "collective", "bytes", "members", "transfer_ns", "step"]
    ).to_pydict()  # what is read: a Python object per value
    keys: list[tuple[Any, ...]] = []
    units: list[tuple[int, ...]] = []
    span = {g: "intra" if len({host_of.get(r) for r in m}) == 1 else "inter" for g, m in members.items()}
    kept: list[int] = []
    for row, (group, collective, size, n) in enumerate(
        zip(i["group"], i["collective"], i["bytes"], i["members"], strict=True)
    ):
        if between_hosts and _one_host(members.get(group, ()), host_of):
            continue
        keys.append((collective, size, n, span.get(group, "inter")))
        units.append(tuple(members.get(group, ())))
        kept.append(row)
    transfer = np.asarray(i["transfer_ns"], dtype=np.int64)[kept]
    slow = _slow_units(keys, units, transfer, np.asarray(i["step"])[kept])
    # A send completes eagerly: only where the receiver was already waiting does the pair time the link itself.
    p = (
        p2p.filter(p2p.column("receiver_waited"))
        .select(["src", "dst", "bytes", "transfer_ns", "step"])
        .to_pydict()
    )
    pairs = [
        row
        for row, (a, b) in enumerate(zip(p["src"], p["dst"], strict=True))
        if not (between_hosts and _one_host((a, b), host_of))
    ]
    pair_keys = [("p2p", p["bytes"][r], link_type(p["src"][r], p["dst"][r], host_of)) for r in pairs]
    pair_units = [tuple(sorted((p["src"][r], p["dst"][r]))) for r in pairs]
    slow += _slow_units(
        pair_keys,
        pair_units,
        np.asarray(p["transfer_ns"], dtype=np.int64)[pairs],
        np.asarray(p["step"])[pairs],
    )
    if links is not None:
        slow += _slow_npu_links(links)
    if not slow:
        return []
    common = set.intersection(*(set(s["unit"]) for s in slow))
    worst = max(slow, key=lambda s: s["extra_ns"])
    link = sorted(common) if len(common) == 2 else list(worst["unit"])
    involved = [s for s in slow if set(link) <= set(s["unit"])]
    # A link at a fraction of its speed is a hardware fault worth reporting even where the job hides most of it:
    # it needs SLOW_LINK_RATIO on the median of its transfers, not MIN_IMPACT_PCT.
    impact = 100 * sum(s["extra_ns"] for s in involved) / steps_total / step_ns
    what = f"{worst['key'][0]} of {worst['key'][1] / 1e6:.1f} MB"
    named = (
        f"link {link[0]}-{link[1]}"
        if len(link) == 2
        else "link of ranks "
        + ", ".join(map(str, link[:LINK_NAMED]))
        + (f" and {len(link) - LINK_NAMED} more" if len(link) > LINK_NAMED else "")
    )
    evidence = (
        f"{named} ({link_type(link[0], link[-1], host_of)}-node): {what} takes "
        f"{worst['median_ns'] / 1e6:.2f} ms once every rank is there vs {worst['ref_ns'] / 1e6:.2f} ms on comparable "
        f"links ({worst['ratio']:.1f}x); {len(involved)} group(s)/pair(s)/link(s) affected"
    )
    steps = sorted({s for u in involved for s in u["steps"]})
    return [finding("slow_link", blamed(link, link=[int(r) for r in link]), steps, impact, evidence)]


@dataclass(frozen=True)
class Evidence:
    """What the detectors read of a job (``diagnose`` gathers it once): its device events (``frame``), the
    per-(rank, step) ``figures`` and ``waits``, the ``peer_sets`` (each stage's ranks) and ``ep_of`` (rank -> expert
    index), the median ``step_ns``, the CPU ranks (``host_ranks``, ``compute_scale``, ``on_host``: every rank one),
    the ``stage_metrics`` and ``stages``, the collective ``instances``, the matched ``p2p`` pairs, the groups'
    ``members``, ``host_of`` each rank, ``steps_total``, the Ascend per-link traffic (``links``), the ranks table, the CPU ranks' ``clock_compute``, the collectives' ``participation`` and the pipeline's ``passes``."""

    frame: Frame
    figures: Mapping[tuple[int, int], Mapping[str, int]]
    peer_sets: list[list[int]]
    ep_of: Mapping[int, int]
    waits: Mapping[tuple[int, int], Mapping[str, int]]
    step_ns: float
    host_ranks: frozenset[int]
    compute_scale: float
    stage_metrics: Mapping[str, Any]
    on_host: bool
    pp: int
    tp: int
    stages: list[list[int]]
    instances: pa.Table
    p2p: pa.Table
    members: Mapping[str, list[int]]
    host_of: Mapping[int, str | None]
    steps_total: int
    links: pa.Table | None
    ranks: pa.Table
    clock_compute: Mapping[tuple[int, int], int] | None = (
        None  # CPU ranks' compute on the clock, per (rank, step)
    )
    participation: pa.Table | None = None  # each member's arrival at each collective instance
    passes: pa.Table | None = None  # the pipeline's passes (``stages.number_passes``)


EXTRA_IMPACT_PCT = 0.25  # extra calls (counted, not timed) must cost this share of the step
COUNTED = "(its calls counted, not timed)"  # ends the evidence of a finding of extra calls


def extra_call_findings(
    extra: dict[int, dict[str, Any]],
    frame: Frame,
    peer_sets: list[list[int]],
    host_ranks: frozenset[int],
    step_ns: float,
    compute_scale: float,
    named: set[int],
) -> list[Finding]:
    """Ranks that call operators their replicas all call equally often more often than them, in every profiled
    step (``extra``: :func:`operators.extra_calls`): a difference of work between replicas that counting shows beyond doubt
    where timing cannot (on a shared host a rank's extra 0.2 ms of matmuls strays less than its peers' compute
    does). An ``operator_hotspot`` finding names the rank and the operator whose extra calls cost most; its impact
    is those calls' time per step (the median step; at the clock's pace on CPU ranks, ``compute_scale``), and it
    must be EXTRA_IMPACT_PCT of the step, not the timing noise's floors (:func:`counted`). Not for ranks that
    another finding of their own time names already (``named``)."""
    out = []
    for rank, calls in extra.items():
        counted_work = _counted_work(
            calls["per_step"], rank in named, rank in host_ranks, step_ns, compute_scale
        )
        if counted_work is None:
            continue
        work_ns, impact = counted_work
        top, more = calls["operators"][0], len(calls["operators"]) - 1
        name = frame.names[top["name"]]
        peers = len(next(p for p in peer_sets if rank in p)) - 1
        evidence = (
            f"rank {rank} calls {short_name(name)} {top['calls']} times a step, each of its {peers} "
            f"peer{'s' if peers > 1 else ''} {top['peer_calls']}"
            + (f", and {more} more operator{'s' if more > 1 else ''} more often than they do" if more else "")
            + f": {work_ns / 1e6:.2f} ms more work a step {COUNTED}"
        )
        out.append(
            _work_finding(
                "operator_hotspot", blamed([rank], operator=name), calls["per_step"], impact, evidence
            )
        )
    return out


def _counted_work(
    per_step: dict[int, float], named: bool, on_host: bool, step_ns: float, compute_scale: float
) -> tuple[float, float] | None:
    """A rank's counted extra work (``per_step``: ns by step) as (its median step's ns, its impact in % of the
    step, at the clock's pace on a CPU rank: ``on_host``), or None where another finding names the rank already
    (``named``) or it is under EXTRA_IMPACT_PCT."""
    if named or not per_step or step_ns <= 0:
        return None
    work_ns = statistics.median(per_step.values())
    impact = 100 * work_ns * (compute_scale if on_host else 1.0) / step_ns
    return None if impact < EXTRA_IMPACT_PCT else (work_ns, impact)


def _work_finding(
    kind: str, culprit: Culprit, per_step: dict[int, float], impact: float, evidence: str
) -> Finding:
    """A finding of counted extra work over the steps of ``per_step``, citing the step it costs most in."""
    return finding(
        kind, culprit, sorted(per_step), impact, evidence, step=max(per_step, key=lambda s: per_step[s])
    )


SIZED = "(its inputs' sizes counted, not timed)"  # ends the evidence of a finding of larger inputs


def larger_input_findings(
    larger: dict[int, dict[str, Any]],
    frame: Frame,
    peer_sets: list[list[int]],
    host_ranks: frozenset[int],
    step_ns: float,
    compute_scale: float,
    named: set[int],
) -> list[Finding]:
    """Ranks whose operators work on more data than their replicas' in every profiled step, the same calls on
    larger inputs (``larger``: :func:`operators.larger_inputs`; a bigger local batch, longer sequences, an uneven
    split): more work by construction, which their inputs' sizes show where their time does not. A ``slow_device``
    finding names the rank; its impact is a lower bound of that work's time per step (the median step; at the
    clock's pace on CPU ranks), which must be EXTRA_IMPACT_PCT of the step (:func:`counted`). Not for ranks that
    another finding names already (``named``: :func:`more_data` adds the cause to a timed one)."""
    out = []
    for rank, sized in larger.items():
        counted_work = _counted_work(
            sized["per_step"], rank in named, rank in host_ranks, step_ns, compute_scale
        )
        if counted_work is None:
            continue
        work_ns, impact = counted_work
        peers = len(next(p for p in peer_sets if rank in p)) - 1
        evidence = (
            f"rank {rank}'s operators work on more data than its {peers} peer{'s' if peers > 1 else ''}' in every "
            f"step, the same calls on larger inputs: {_larger(sized, frame)}: at least {work_ns / 1e6:.2f} ms more "
            f"work a step {SIZED}"
        )
        out.append(_work_finding("slow_device", blamed([rank]), sized["per_step"], impact, evidence))
    return out


def _larger(sized: dict[str, Any], frame: Frame) -> str:
    """The operator whose inputs grew most, how many more did, and what it means."""
    ops = sized["operators"]
    top = max(ops, key=lambda o: o["ratio"])
    return (
        f"{short_name(frame.names[top['name']])} {top['ratio']:.2f}x their input bytes"
        + (f", {len(ops) - 1} more operator{'s' if len(ops) > 2 else ''} larger" if len(ops) > 1 else "")
        + ", none smaller (a bigger batch or longer sequences, not a slower device)"
    )


def more_data(found: list[Finding], larger: dict[int, dict[str, Any]], frame: Frame) -> list[Finding]:
    """The timed ``slow_device`` findings of one rank whose operators take larger inputs than its replicas'
    (``larger``: :func:`operators.larger_inputs`), their evidence completed with that cause: the rank is slow
    because it has more data, which a faster device would not cure."""
    return [
        replace(
            f,
            evidence=f"{f.evidence}; its operators work on more data than its peers': {_larger(larger[r], frame)}",
        )
        if f.kind == "slow_device" and len(f.culprit.ranks) == 1 and (r := f.culprit.ranks[0]) in larger
        else f
        for f in found
    ]


def counted(f: Finding) -> bool:
    """A finding of extra calls or larger inputs (:func:`extra_call_findings`, :func:`larger_input_findings`) or of
    a stage heavier in work than in time (:func:`stage_findings`), whose evidence is counted, not timed."""
    return f.evidence.endswith((COUNTED, SIZED, WORKED))


def _rank_detector(e: Evidence, _before: Sequence[Finding]) -> list[Finding]:
    """Culprit ranks by their own time, then (not those) ranks that call operators more often than their
    replicas, then ranks whose operators take larger inputs than theirs, then (none of those) ranks that hold their peers back from outside it: late arrivers of a
    data-parallel job, late senders of a pipeline."""
    found = rank_findings(
        e.frame, e.figures, e.peer_sets, e.ep_of, e.waits, e.step_ns, e.host_ranks, e.compute_scale
    )
    named = {r for f in found for r in f.culprit.ranks}
    # Calls and input sizes per (rank, step, operator), once for both counts (typical durations of every call)
    calls = per_step_calls(e.frame, e.host_ranks) if any(len(p) >= 2 for p in e.peer_sets) else None
    found += extra_call_findings(
        extra_calls(calls, e.peer_sets), e.frame, e.peer_sets, e.host_ranks, e.step_ns, e.compute_scale, named
    )
    named = {r for f in found for r in f.culprit.ranks}
    larger = larger_inputs(calls, e.peer_sets)
    found = more_data(found, larger, e.frame)
    found += larger_input_findings(
        larger, e.frame, e.peer_sets, e.host_ranks, e.step_ns, e.compute_scale, named
    )
    named = {r for f in found for r in f.culprit.ranks}
    if e.pp == e.tp == 1:
        holes = arrival_holes(e.frame, e.participation, e.host_ranks) if e.participation is not None else None
        found += late_arrivals(
            e.instances,
            named,
            e.step_ns,
            e.steps_total,
            e.host_ranks,
            e.clock_compute,
            e.figures,
            e.members,
            holes,
        )
    elif e.pp > 1:
        found += late_senders(e.frame, e.p2p, named, e.host_ranks, e.step_ns, e.steps_total)
    return found


def _stage_detector(e: Evidence, before: Sequence[Finding]) -> list[Finding]:
    work = (
        stage_work(e.frame, e.stages, e.host_ranks, recomputed(e.frame, e.passes))
        if e.on_host and len(e.stages) > 1
        else []
    )
    held = {r for f in before if f.kind == "host_stall" for r in f.culprit.ranks}
    return stage_hotspots(
        stage_findings(e.stage_metrics, e.on_host, work, e.compute_scale, held),
        e.frame,
        e.stages,
        e.host_ranks,
    )


def _link_detector(e: Evidence, _before: Sequence[Finding]) -> list[Finding]:
    return link_findings(
        e.instances, e.p2p, e.members, e.host_of, e.step_ns, e.steps_total, e.links, between_hosts=e.on_host
    )


def _clock_detector(e: Evidence, _before: Sequence[Finding]) -> list[Finding]:
    return clock_findings(e.ranks)


# The detectors, in the order they run and their findings are listed (``ranked`` orders them later; each is given
# the findings of those before it), and whether each needs the job's step time (work measured against the step): a
# new kind's detector is added here.
DETECTORS: tuple[tuple[Callable[[Evidence, Sequence[Finding]], list[Finding]], bool], ...] = (
    (_rank_detector, True),
    (_stage_detector, True),
    (_link_detector, True),
    (_clock_detector, False),
)


def detect(e: Evidence) -> list[Finding]:
    """Every detector's findings (those that need a step time only where the job has one)."""
    found: list[Finding] = []
    for detector, timed in DETECTORS:
        if e.step_ns > 0 or not timed:
            found += detector(e, found)
    return found
