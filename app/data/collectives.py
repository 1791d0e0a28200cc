"""Collective and send/recv instances with their members, for the views: the Diagnosis' matching (one matcher,
``paradiag.analysis.comm``) shaped into one row per member event.

A member's wait is the time it spent inside the instance before the last member arrived; the transfer is the rest.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from paradiag.app.data.common import diagnosis, per_job
from paradiag.job import Job

P2P_GROUP = (
    "p2p"  # the group shown for send/recv pairs (they match by sender, receiver and order, not by group)
)


def instances(job: Job) -> pa.Table:
    """One row per member of a matched instance: ``instance`` (an id per collective instance or send/recv pair),
    rank, track, peer (send/recv), step, group, seq (the pair's ordinal for send/recv), collective, bytes,
    start_ns, dur_ns, ``last_start_ns`` (the last member's arrival), ``wait_ns`` and ``transfer_ns``."""
    return per_job("collectives", job, lambda: _instances(job))


def _instances(job: Job) -> pa.Table:
    d = diagnosis(job)
    part = d.participation
    start = part.column("start_ns").to_numpy()
    dur = part.column("end_ns").to_numpy() - start
    last = part.column("last_arrival_ns").to_numpy()
    collectives = pa.table(
        {
            "instance": part.column("instance").cast(pa.int64()),
            "rank": part.column("rank").cast(pa.int32()),
            "track": part.column("track").cast(pa.int32()),
            "peer": pa.nulls(part.num_rows, pa.int32()),
            "step": part.column("step").cast(pa.int32()),
            "group": part.column("group"),
            "seq": part.column("seq").cast(pa.int64()),
            "collective": part.column("collective"),
            "bytes": part.column("bytes").cast(pa.int64()),
            "start_ns": pa.array(start),
            "dur_ns": pa.array(dur),
            "last_start_ns": pa.array(last),
        }
    )
    first_pair = int(pc.max(part.column("instance")).as_py() or 0) + 1 if part.num_rows else 0
    table = pa.concat_tables([collectives, _p2p_members(d.p2p, first_pair)])
    start, dur, last = (table.column(c).to_numpy() for c in ("start_ns", "dur_ns", "last_start_ns"))
    wait = np.clip(last - start, 0, dur)
    return table.append_column("wait_ns", pa.array(wait)).append_column("transfer_ns", pa.array(dur - wait))


def _p2p_members(p2p: pa.Table, first: int) -> pa.Table:
    """Each matched pair as two members, the send (on its sender) and the receive; their last arrival is the later
    of the two starts."""
    c = {
        k: p2p.column(k).to_numpy()
        for k in (
            "src",
            "dst",
            "src_track",
            "dst_track",
            "step",
            "ordinal",
            "bytes",
            "send_start_ns",
            "send_end_ns",
            "recv_start_ns",
            "recv_end_ns",
        )
    }
    n = p2p.num_rows
    instance = np.arange(first, first + n, dtype=np.int64)
    last = np.maximum(c["send_start_ns"], c["recv_start_ns"])
    both = np.concatenate
    return pa.table(
        {
            "instance": both([instance, instance]),
            "rank": pa.array(both([c["src"], c["dst"]]), pa.int32()),
            "track": pa.array(both([c["src_track"], c["dst_track"]]), pa.int32()),
            "peer": pa.array(both([c["dst"], c["src"]]), pa.int32()),
            "step": pa.array(both([c["step"], c["step"]]), pa.int32()),
            "group": pa.array([P2P_GROUP] * (2 * n), pa.string()),
            "seq": pa.array(both([c["ordinal"], c["ordinal"]]), pa.int64()),
            "collective": pa.array(["send"] * n + ["recv"] * n, pa.string()),
            "bytes": pa.array(both([c["bytes"], c["bytes"]]), pa.int64()),
            "start_ns": both([c["send_start_ns"], c["recv_start_ns"]]),
            "dur_ns": both([c["send_end_ns"] - c["send_start_ns"], c["recv_end_ns"] - c["recv_start_ns"]]),
            "last_start_ns": both([last, last]),
        }
    )


def wait_by_rank_step(job: Job) -> dict[tuple[int, int], int]:
    """Per (rank, step): the time the rank waited for others in collectives and receives."""
    t = diagnosis(job).rank_steps.select(["rank", "step", "wait_ns"]).to_pydict()
    return dict(zip(zip(t["rank"], t["step"], strict=True), t["wait_ns"], strict=True))
