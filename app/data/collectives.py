"""Collective instances matched across their members by ``(group, step, seq)``: who arrived late, who waited.

A member's wait is the time it spent inside the instance before the last member arrived; the transfer is the rest.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from paradiag.app import store
from paradiag.app.data.common import read_events
from paradiag.dataset import Job

COLUMNS = ["rank", "device", "track", "kind", "name", "start_ns", "dur_ns", "step", "collective", "group", "seq", "peer", "bytes"]


def instances(job: Job) -> pa.Table:
    """Device communication events with ``instance`` (an id per matched instance: group, step, seq and, for
    send/recv, the pair of ranks), ``last_start_ns``,
    ``wait_ns`` and ``transfer_ns``."""
    return store.memo("collectives", job.content_hash, 1, lambda: _instances(job))


def _instances(job: Job) -> pa.Table:
    events = read_events(job, columns=COLUMNS)
    keep = pc.and_(pc.equal(events.column("kind").cast(pa.string()), "communication"), pc.greater_equal(events.column("device"), 0))
    comm = events.filter(keep).drop_columns(["kind", "device"])
    comm = comm.filter(pc.is_valid(comm.column("seq")))
    if comm.num_rows == 0:
        return comm.append_column("instance", pa.array([], pa.int64()))
    group = comm.column("group").cast(pa.string()).fill_null("")
    comm = comm.sort_by([("rank", "ascending"), ("start_ns", "ascending")])
    group = comm.column("group").cast(pa.string()).fill_null("")
    keys = [
        np.asarray(group.to_numpy(zero_copy_only=False)),
        comm.column("step").fill_null(-1).to_numpy(),
        comm.column("seq").to_numpy().astype(np.int64),
        np.full(comm.num_rows, -1, dtype=np.int64),
    ]
    _p2p_keys(comm, keys)
    _, instance = np.unique(np.rec.fromarrays(keys), return_inverse=True)
    start = comm.column("start_ns").to_numpy()
    dur = comm.column("dur_ns").to_numpy()
    last = np.full(instance.max() + 1, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(last, instance, start)
    last_start = last[instance]
    wait = np.clip(last_start - start, 0, dur)
    return (
        comm.append_column("instance", pa.array(instance.astype(np.int64)))
        .append_column("last_start_ns", pa.array(last_start))
        .append_column("wait_ns", pa.array(wait))
        .append_column("transfer_ns", pa.array(dur - wait))
    )


def _p2p_keys(comm: pa.Table, keys: list[np.ndarray]) -> None:
    """Send/recv match by order, not by ``seq``: the k-th send from a to b in a step is the k-th receive at b
    from a. Their key becomes (step, k, a -> b) in place of (group, step, seq)."""
    kind = np.asarray(comm.column("collective").cast(pa.string()).fill_null("").to_numpy(zero_copy_only=False))
    rank = comm.column("rank").to_numpy().astype(np.int64)
    peer = comm.column("peer").fill_null(-1).to_numpy().astype(np.int64)
    is_send, is_recv = kind == "send", kind == "recv"
    p2p = (is_send | is_recv) & (peer >= 0)
    src = np.where(is_send, rank, peer)
    dst = np.where(is_send, peer, rank)
    link = src * 1_000_000 + dst
    ordinal = np.zeros(len(rank), dtype=np.int64)
    counter: dict[tuple[int, int, int, bool], int] = {}
    for i in np.flatnonzero(p2p).tolist():  # rows are in start order per rank
        key = (int(rank[i]), int(keys[1][i]), int(link[i]), bool(is_send[i]))
        ordinal[i] = counter.get(key, 0)
        counter[key] = ordinal[i] + 1
    keys[0] = np.where(p2p, "p2p", keys[0])
    keys[2] = np.where(p2p, ordinal, keys[2])
    keys[3] = np.where(p2p, link, keys[3])


def wait_by_rank_step(job: Job) -> dict[tuple[int, int], int]:
    table = instances(job)
    if table.num_rows == 0:
        return {}
    grouped = table.group_by(["rank", "step"]).aggregate([("wait_ns", "sum")])
    return {
        (r, s): int(w)
        for r, s, w in zip(grouped.column("rank").to_pylist(), grouped.column("step").to_pylist(), grouped.column("wait_ns_sum").to_pylist(), strict=True)
    }
