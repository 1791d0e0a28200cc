"""Clock alignment across ranks from the collectives they share.

Every participant leaves a collective instance at nearly the same moment (nobody finishes an all-reduce before
the last one has contributed), so the end times of one instance, read on each rank's own clock, differ by the
clock offsets plus a little noise. Offsets are estimated per clock domain (a host when the traces name it, a
rank otherwise) by alternating robust medians, with the lowest rank's domain as the reference.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

MAD_TO_SIGMA = 1.4826
ITERATIONS = 100  # each round closes about half of the remaining gap; stops early once converged


@dataclass
class Alignment:
    offset_ns: dict[int, int]  # rank -> nanoseconds to add to its timestamps
    uncertainty_ns: dict[int, int | None]  # rank -> robust spread of the residuals, None if not estimated
    instances: int  # matched collective instances used


def _instance_key(rank: int, coll: str, group: str, step: int, seq: int, peer: int | None) -> tuple[object, ...] | None:
    """What names one collective instance on all its members. A send and its recv are one instance: both kernels
    end when the transfer completes (pipeline jobs talk across nodes only through them)."""
    if coll in ("send", "recv"):
        if peer is None:
            return None
        src, dst = (rank, peer) if coll == "send" else (peer, rank)
        return ("p2p", group, step, src, dst, seq)
    return (group, coll, step, seq)


def _instance_ends(comm: dict[int, pa.Table]) -> dict[tuple[object, ...], dict[int, int]]:
    """instance -> {rank: end time on the rank's clock}, for instances seen on at least two ranks."""
    ends: dict[tuple[object, ...], dict[int, int]] = defaultdict(dict)
    for rank, table in comm.items():
        if table is None or table.num_rows == 0:
            continue
        cols = {c: table.column(c).to_pylist() for c in ("collective", "group", "step", "seq", "peer")}
        end = (table.column("start_ns").to_numpy() + table.column("dur_ns").to_numpy()).tolist()
        for i, coll in enumerate(cols["collective"]):
            if cols["seq"][i] is None:
                continue
            key = _instance_key(rank, coll, cols["group"][i], cols["step"][i], cols["seq"][i], cols["peer"][i])
            if key is not None:
                ends[key][rank] = end[i]
    return {k: v for k, v in ends.items() if len(v) > 1}


def estimate(comm: dict[int, pa.Table], domain_of: dict[int, object] | None = None) -> Alignment:
    """Offsets that bring every rank onto the clock of the lowest rank's domain."""
    ranks = sorted(comm)
    domain_of = domain_of or {r: r for r in ranks}
    instances = _instance_ends(comm)
    offsets = dict.fromkeys(ranks, 0)
    uncertainty: dict[int, int | None] = dict.fromkeys(ranks)
    if not instances:
        return Alignment(offsets, uncertainty, 0)
    domains = sorted({domain_of[r] for r in ranks}, key=lambda d: min(r for r in ranks if domain_of[r] == d))
    d_index = {d: i for i, d in enumerate(domains)}
    # Only instances that span two clock domains say anything about the offsets between them.
    keys = [k for k, members in instances.items() if len({domain_of[r] for r in members}) > 1]
    if not keys:
        return Alignment(offsets, uncertainty, 0)
    # Observations: (instance, domain, end on own clock).
    obs_i, obs_d, obs_e, obs_r = [], [], [], []
    for i, key in enumerate(keys):
        for rank, end in instances[key].items():
            obs_i.append(i)
            obs_d.append(d_index[domain_of[rank]])
            obs_e.append(end)
            obs_r.append(rank)
    inst = np.array(obs_i)
    dom = np.array(obs_d)
    end_arr = np.array(obs_e, dtype=np.int64)
    base = int(np.median(end_arr))
    e = (end_arr - base).astype(np.float64)  # keep float math small and exact to the ns
    off = np.zeros(len(domains))
    for _ in range(ITERATIONS):
        aligned = e + off[dom]
        t = _group_median(inst, aligned, len(keys))
        new = _group_median(dom, t[inst] - e, len(domains), fill=off)
        new -= new[0]
        if np.allclose(new, off, atol=0.5):
            off = new
            break
        off = new
    residual = t[inst] - e - off[dom]
    rank_arr = np.array(obs_r)
    for r in ranks:
        d = d_index[domain_of[r]]
        offsets[r] = round(off[d])
        mine = residual[rank_arr == r]
        if len(mine) and len({domain_of[x] for x in ranks}) > 1:
            mad = np.median(np.abs(mine - np.median(mine)))
            uncertainty[r] = round(MAD_TO_SIGMA * mad)
    return Alignment(offsets, uncertainty, len(keys))


def _group_median(groups: np.ndarray, values: np.ndarray, n: int, fill: np.ndarray | None = None) -> np.ndarray:
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
