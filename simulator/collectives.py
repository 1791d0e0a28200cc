"""How long a collective takes once every participant has arrived: ring or tree over the mesh's links.

Bandwidths are the per-device figures of :mod:`devices` (GB/s = 1000 bytes/us); a ring runs at the speed of its
slowest link, which is how one slow link slows every member of every group whose ring crosses it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

LinkFn = Callable[[int, int], tuple[float, float]]  # (rank a, rank b) -> (GB/s, latency us)

STARTUP_US = 6.0


def protocol(nbytes: float) -> str:
    if nbytes < 64 * 1024:
        return "LL"
    return "LL128" if nbytes < 4 * 1024 * 1024 else "SIMPLE"


def ring(ranks: Sequence[int], link: LinkFn) -> tuple[float, float]:
    """Bottleneck bandwidth and the largest latency of the ring through ``ranks`` in order."""
    n = len(ranks)
    links = [link(ranks[i], ranks[(i + 1) % n]) for i in range(n)]
    return min(bw for bw, _ in links), max(lat for _, lat in links)


def duration(
    collective: str, nbytes: float, ranks: Sequence[int], link: LinkFn, multi_node: bool
) -> tuple[float, str]:
    """(microseconds, algorithm) of one collective moving ``nbytes`` (the largest per-rank buffer)."""
    n = len(ranks)
    if n < 2:
        return STARTUP_US, "RING"
    bw, lat = ring(ranks, link)
    per_us = bw * 1e3  # bytes per microsecond
    if collective == "allreduce":
        ring_t = 2 * (n - 1) / n * nbytes / per_us + 2 * (n - 1) * lat
        tree_t = 2 * nbytes / per_us + 2 * math.log2(n) * lat
        if multi_node and tree_t < ring_t:
            return STARTUP_US + tree_t, "TREE"
        return STARTUP_US + ring_t, "RING"
    if collective in ("_allgather_base", "_reduce_scatter_base", "alltoall_base"):
        return STARTUP_US + (n - 1) / n * nbytes / per_us + (n - 1) * lat, "RING"
    if collective == "broadcast":
        return STARTUP_US + nbytes / per_us + (n - 1) * lat, "RING"
    return STARTUP_US + nbytes / per_us + lat, "RING"  # send / recv
