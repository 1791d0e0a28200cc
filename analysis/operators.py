"""Operator imbalance across ranks that should do the same work (the DP replicas and TP shards of a stage).

For each set of peers and each compute operator (kernel name), a rank's time on that operator per step is
compared with the median of its peers': ``ratio`` = rank / peer median, ``z`` = robust z-score over the peers
(median and 1.4826 x MAD, spread floored at 1 % of the median), ``excess_ns`` = rank - peer median per step.
Operators are identified by name; a rank that runs an operator n times per step is compared on the total of
those n instances (their position in the step is the same on every peer, so totals compare like with like and
are less noisy than single instances).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from paradiag.analysis.frame import Frame, group_bounds, robust_z


def short_name(name: str) -> str:
    """A kernel or operator name without namespaces, template and argument lists
    (``void at::native::flash_fwd_kernel<...>(...)`` -> ``flash_fwd_kernel``): the one rule for every output."""
    text = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    return text.split("<", 1)[0].split("(", 1)[0].rsplit("::", 1)[-1].strip() or name


def operator_time(frame: Frame) -> dict[tuple[int, int], np.ndarray]:
    """(rank, name code) -> total compute time per step (median over the rank's steps), from the compute
    kernels of ``frame``."""
    c = frame.of_kind("compute")
    keep = c.step >= 0
    rank, name, step, dur = c.rank[keep], c.name[keep], c.step[keep], (c.end - c.start)[keep]
    order, firsts = group_bounds(step, name, rank)
    if len(order) == 0:
        return {}
    totals = np.add.reduceat(dur[order], firsts)
    out: dict[tuple[int, int], list[int]] = {}
    for r, n, t in zip(rank[order][firsts].tolist(), name[order][firsts].tolist(), totals.tolist(), strict=True):
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


def rank_operator_excess(times: dict[tuple[int, int], np.ndarray], rank: int, peers: list[int]) -> dict[int, float]:
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
