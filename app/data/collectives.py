"""Collective instances matched across their members by ``(group, step, seq)``: who arrived late, who waited.

A member's wait is the time it spent inside the instance before the last member arrived; the transfer is the rest.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from paradiag.app import store
from paradiag.dataset import Job

COLUMNS = ["rank", "device", "track", "kind", "name", "start_ns", "dur_ns", "step", "collective", "group", "seq", "peer", "bytes"]


def instances(job: Job) -> pa.Table:
    """Device communication events with ``instance`` (an id per matched instance), ``last_start_ns``,
    ``wait_ns`` and ``transfer_ns``."""
    return store.memo("collectives", job.content_hash, 1, lambda: _instances(job))


def _instances(job: Job) -> pa.Table:
    events = job.events(columns=COLUMNS)
    keep = pc.and_(pc.equal(events.column("kind").cast(pa.string()), "communication"), pc.greater_equal(events.column("device"), 0))
    comm = events.filter(keep).drop_columns(["kind", "device"])
    comm = comm.filter(pc.is_valid(comm.column("seq")))
    if comm.num_rows == 0:
        return comm.append_column("instance", pa.array([], pa.int64()))
    group = comm.column("group").cast(pa.string()).fill_null("")
    keys = pa.table({"g": group, "s": comm.column("step").fill_null(-1), "q": comm.column("seq")})
    _, instance = np.unique(
        np.rec.fromarrays([np.asarray(keys.column(c).to_numpy(zero_copy_only=False)) for c in ("g", "s", "q")]),
        return_inverse=True,
    )
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


def wait_by_rank_step(job: Job) -> dict[tuple[int, int], int]:
    table = instances(job)
    if table.num_rows == 0:
        return {}
    grouped = table.group_by(["rank", "step"]).aggregate([("wait_ns", "sum")])
    return {
        (r, s): int(w)
        for r, s, w in zip(grouped.column("rank").to_pylist(), grouped.column("step").to_pylist(), grouped.column("wait_ns_sum").to_pylist(), strict=True)
    }
