"""What-if replay: the job's steps re-timed on their dependency graph with a cause removed.

The pieces, each a module: the edit language (``paradiag.analysis.edit``: :class:`Edit`, ``--set`` text, the peers
an edit compares with), the dependency graph (``paradiag.analysis.depgraph``, the one the critical path walks), the
replay (``paradiag.analysis.replay``), the pipeline rebalancing of ``stages=balanced``
(``paradiag.analysis.rebalance``) and each finding kind's edits (``paradiag.analysis.kinds``). This module applies
edits to the replay's timings (:func:`apply`), replays them (:func:`what_if`) and gives each finding its
``what_if`` (:func:`replay_findings`).

An edit changes durations, transfers or host gaps (:class:`Edit`); a rank's step then ends as much later or
earlier as its last device work does, and starts as much later or earlier as its previous step ended. The
predicted step time is the median over (rank, step), as the measured one (``Diagnosis.step_time_ns``).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from paradiag.analysis import kinds
from paradiag.analysis.depgraph import Graph, build_graph
from paradiag.analysis.edit import (
    BALANCED,
    COMPARABLE,
    PARTS,
    PEER_MEDIAN,
    REMOVE,
    SET_HELP,
    Edit,
    EditError,
    Peers,
    parse_edit,
    peers_of,
)
from paradiag.analysis.frame import group_bounds
from paradiag.analysis.rebalance import LayerSplit, balance, layer_split
from paradiag.analysis.replay import Timing, after_first_step, replay, replay_error, step_times

if TYPE_CHECKING:
    from paradiag.analysis.diagnosis_types import Diagnosis, Finding
    from paradiag.job import Job

__all__ = [
    "BALANCED", "COMPARABLE", "PARTS", "PEER_MEDIAN", "REMOVE", "SET_HELP", "Edit", "EditError", "Graph", "LayerSplit", "Peers", "WhatIf",
    "apply", "build_graph", "finding_edits", "job_graph", "layer_split", "parse_edit", "peers_of", "replay", "replay_error",
    "replay_findings", "step_times", "what_if",
]  # fmt: skip


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


def what_if(g: Graph, peers: Peers, edits: Sequence[Edit]) -> WhatIf:
    """Replay ``g`` with ``edits`` (an :class:`EditError` when one names a rank, link or step the job lacks)."""
    t = Timing.of(g)
    splits = [split for e in edits if (split := apply(g, t, peers, e)) is not None]
    measured = step_times(g, g.end)
    predicted = step_times(g, replay(g, t))
    if not measured:
        raise EditError("the job has no step with device work to replay")
    saving = statistics.fmean(measured[k] - predicted[k] for k in steady(measured, edits))
    by_step: dict[int, list[tuple[float, float]]] = {}
    for (rank, step), ns in measured.items():
        by_step.setdefault(step, []).append((ns, predicted[(rank, step)]))
    per_step = tuple(
        (s, statistics.median(m for m, _ in v), statistics.median(p for _, p in v))
        for s, v in sorted(by_step.items())
    )
    return WhatIf(
        tuple(e.text() for e in edits),
        float(statistics.median(measured.values())),
        float(statistics.median(predicted.values())),
        saving,
        per_step,
        splits[-1] if splits else None,
    )


def steady(steps: dict[tuple[int, int], float], edits: Sequence[Edit]) -> list[tuple[int, int]]:
    """The (rank, step) keys a saving is counted over: every one, but a split of the layers (which changes every
    step alike) is counted over the steps after the first profiled one (``replay.after_first_step``): a PanGu
    pipeline whose layers moved from 4/2/1/1 to 3/2/2/1 ran its second step 0.22 ms faster on every stage while
    the later stages' first-step spans grew 0.3-0.4 ms, and the mean over all of them "saved" nothing."""
    keys = list(steps)
    return after_first_step(keys) if any(e.target == "stages" for e in edits) else keys


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
        return balance(g, t, peers, steps)
    if e.target == "link":
        _link(g, t, e, steps)
    elif e.part == "host":
        _host(g, t, peers, e, steps)
    else:
        _part(g, t, peers, e, steps)
    return None


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
        ours = (
            steps
            & is_part
            & np.isin(g.rank, ranks if balanced else [r for r in e.ranks if peers.stage_of[r] == stage])
        )
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
        others = [
            peers.launch_delay[(r, step)]
            for r in peers.stages[peers.stage_of[rank]]
            if r not in e.ranks and (r, step) in peers.launch_delay
        ]
        if (
            not others
        ):  # alone in its stage: as late as the other lone ranks (findings.rank_excess weighs it so)
            others = [
                d
                for (r, s), d in peers.launch_delay.items()
                if s == step and r not in e.ranks and len(peers.stages[peers.stage_of[r]]) == 1
            ]
        own = peers.launch_delay.get((rank, step))
        if others and own is not None:
            t.own("gap")[i] -= max(own - int(statistics.median(others)), 0)
    culprits = [r for r in e.ranks if r in peers.host_ranks]
    if culprits:
        _host_idle(g, t, peers, culprits, steps)


def _host_idle(g: Graph, t: Timing, peers: Peers, culprits: list[int], steps: np.ndarray) -> None:
    """CPU ranks (their host is their device): the host gaps of each of the culprits' steps (the time from the work
    that released an event to its start: Python, a sleep, a late send) no longer in all than on its peers
    (median; a rank alone in its stage: the other lone ranks), the excess taken off its largest gaps first (a stall
    is one long hole, or the same hole before every send)."""
    anchored = np.flatnonzero(steps & (g.anchor >= 0))
    if not len(anchored):
        return
    gap = t.own("gap")
    keys = g.rank[anchored].astype(np.int64) * (1 << 32) + g.step[anchored].astype(np.int64)
    uniq, which = np.unique(keys, return_inverse=True)
    totals = np.bincount(which, weights=gap[anchored].astype(np.float64))
    total = {
        (int(k >> 32), int(k & 0xFFFFFFFF)): float(v)
        for k, v in zip(uniq.tolist(), totals.tolist(), strict=True)
    }
    lone = [r for r, s in peers.stage_of.items() if len(peers.stages[s]) == 1]
    for c in culprits:
        stage = peers.stages[peers.stage_of[c]]
        against = [r for r in (stage if len(stage) > 1 else lone) if r not in culprits]
        for k in np.flatnonzero(uniq >> 32 == c).tolist():
            step = int(uniq[k] & 0xFFFFFFFF)
            others = [total[(r, step)] for r in against if (r, step) in total]
            if not others:
                continue
            excess = total[(c, step)] - statistics.median(others)
            mine = anchored[which == k]
            for i in mine[np.argsort(-gap[mine], kind="stable")].tolist():
                if excess <= 0:
                    break
                cut = min(int(gap[i]), int(excess))
                gap[i] -= cut
                excess -= cut


def _link(g: Graph, t: Timing, e: Edit, steps: np.ndarray) -> None:
    """The transfers of every collective among the link's ranks and every send/receive between them: as long as
    the median transfer of comparable ones (same collective, size, group size and span) elsewhere, or scaled."""
    has = g.instance >= 0
    total = len(g.inst_key)
    on_link = np.bincount(g.instance[has & np.isin(g.rank, e.ranks)], minlength=total) == len(e.ranks)
    if not on_link.any():
        raise EditError(
            f"{e.text()}: no collective or send/receive joins ranks {', '.join(map(str, e.ranks))}"
        )
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


def finding_edits(f: Finding) -> list[Edit]:
    """The cause of a finding, removed, as its kind's entry says (``paradiag.analysis.kinds``): a culprit's compute
    to its peers', its stall removed, its link's transfers to comparable links', the stages balanced; none for clock
    skew (a data problem, no time lost)."""
    return kinds.finding_edits(f)


def replay_findings(
    found: list[Finding], g: Graph, peers: Peers, host_ranks: frozenset[int] = frozenset()
) -> list[Finding]:
    """The findings, each with its ``what_if`` (its cause removed, the steps replayed) and its ``impact_pct`` from
    it. A finding of extra work (``kinds.EXTRA_WORK``) on CPU ranks only (``host_ranks``) keeps its own estimate,
    made from typical durations: the replay runs the clock's durations, which on a busy host the scheduler moves
    more than the work does. A finding with no edit, or none that applies, is as it was."""
    return [_replayed(f, g, peers, host_ranks) for f in found]


def _replayed(f: Finding, g: Graph, peers: Peers, host_ranks: frozenset[int]) -> Finding:
    from paradiag.analysis.findings import counted, severity, stage_evidence

    edits = finding_edits(f)
    if not edits or not len(g):
        return f
    try:
        result = what_if(g, peers, edits)
    except EditError:
        return f  # the culprit has no peer or link to compare with: the estimate stays the heuristic one
    replayed = result.as_json()
    if kinds.of(f.kind).extra_work and host_ranks and set(f.culprit.ranks) <= host_ranks:
        layers = replayed.get("layers")
        if layers and layers["now"] == layers["balanced"] and peers.stage_metrics and not counted(f):
            # the replay moved no layer (none would do better): say so beside the estimate kept
            metrics = peers.stage_metrics
            return replace(
                f,
                what_if=replayed,
                evidence=stage_evidence(
                    metrics, metrics["balanced_step_time_ns"], layers, estimate_kept=True
                ),
            )
        return replace(f, what_if=replayed)
    evidence = f.evidence
    if result.layers is not None and peers.stage_metrics:
        evidence = stage_evidence(peers.stage_metrics, result.predicted_step_ns, replayed["layers"])
    impact = round(max(result.saving_pct, 0.0), 2)
    return replace(f, what_if=replayed, evidence=evidence, impact_pct=impact, severity=severity(impact))


def job_graph(job: Job, d: Diagnosis) -> tuple[Graph, Peers]:
    """The replay graph and peers of a job whose Diagnosis is stored (its device events read again)."""
    from paradiag.analysis import comm
    from paradiag.analysis.frame import job_frame

    frame = job_frame(job)
    members = job.group_members()
    comm.infer_peers(frame, members, d.layout.stage_of)
    host_of = job.by_rank("host")
    metrics = d.stage_metrics.as_json() if d.stage_metrics else None
    host_ranks = job.cpu_ranks()
    return build_graph(frame, job.steps, d.p2p, host_of, d.passes, host_ranks), peers_of(
        d.layout.stage_of, d.figures(), metrics, host_ranks
    )
