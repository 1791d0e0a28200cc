"""Per-step time breakdown of one device, with the definitions Ascend users know from ``step_trace_time.csv``
(torch_npu / CANN Overlap Analysis), computed from canonical events.

For the device work launched in a step:

* ``computing`` = length of the union of compute events;
* ``communication`` = length of the union of communication events (HCCL ops);
* ``communication_not_overlapped`` = communication minus its overlap with computing;
* ``overlapped`` = communication - communication_not_overlapped;
* ``free`` = the span from the first to the last compute/communication event, minus the union of both;
* ``bubble`` = total duration of receive collectives (pipeline waits); ``stage`` = span - bubble;
* ``preparing`` = first compute/communication start - the step's host start (ProfilerStep#N).

All values are integer nanoseconds. Memory copies and sync tasks do not count, as in the producer's own numbers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from paradiag.intervals import merge, union_length

COLUMNS = (
    "computing_ns",
    "communication_not_overlapped_ns",
    "overlapped_ns",
    "communication_ns",
    "free_ns",
    "stage_ns",
    "bubble_ns",
    "communication_not_overlapped_exclude_receive_ns",
    "preparing_ns",
)
BREAKDOWN = pa.schema([("rank", pa.int32()), ("step", pa.int32()), *[(c, pa.int64()) for c in COLUMNS]])


def step_row(
    compute: tuple[np.ndarray, np.ndarray],
    comm: tuple[np.ndarray, np.ndarray],
    receive_ns: int,
    host_start: int | None,
) -> dict[str, Any]:
    """One step's breakdown from its compute and communication intervals (start, end arrays)."""
    cu, co = merge(*compute), merge(*comm)
    computing = int((cu[1] - cu[0]).sum())
    communication = int((co[1] - co[0]).sum())
    # |C ∩ M| = |C| + |M| - |C ∪ M|
    overlapped = (
        computing
        + communication
        - union_length(np.concatenate((cu[0], co[0])), np.concatenate((cu[1], co[1])))
    )
    firsts = [x[0].min() for x in (cu, co) if len(x[0])]
    lasts = [x[1].max() for x in (cu, co) if len(x[1])]
    span = int(max(lasts) - min(firsts)) if firsts else 0
    busy = computing + communication - overlapped
    not_overlapped = communication - overlapped
    return {
        "computing_ns": computing,
        "communication_not_overlapped_ns": not_overlapped,
        "overlapped_ns": overlapped,
        "communication_ns": communication,
        "free_ns": span - busy,
        "stage_ns": span - receive_ns,
        "bubble_ns": receive_ns,
        "communication_not_overlapped_exclude_receive_ns": max(not_overlapped - receive_ns, 0),
        "preparing_ns": int(min(firsts) - host_start) if firsts and host_start is not None else None,
    }


def step_breakdown(events: pa.Table, steps: pa.Table) -> pa.Table:
    """The breakdown per (rank, step) of the device events, one row per row of ``steps``."""
    kind = events.column("kind").combine_chunks().cast(pa.string())
    device = pc.greater_equal(events.column("device"), 0)
    rows: dict[str, list[Any]] = {f.name: [] for f in BREAKDOWN}
    is_compute = pc.and_(device, pc.equal(kind, "compute")).to_numpy(zero_copy_only=False)
    is_comm = pc.and_(device, pc.equal(kind, "communication")).to_numpy(zero_copy_only=False)
    collective = events.column("collective").combine_chunks().cast(pa.string()).fill_null("")
    is_recv = is_comm & pc.equal(collective, "recv").to_numpy(zero_copy_only=False)
    rank = events.column("rank").to_numpy()
    step = events.column("step").to_numpy()
    start = events.column("start_ns").to_numpy()
    end = start + events.column("dur_ns").to_numpy()
    for r, s, host_start in zip(
        steps.column("rank").to_pylist(),
        steps.column("step").to_pylist(),
        steps.column("start_ns").to_pylist(),
        strict=True,
    ):
        mine = (rank == r) & (step == s)
        c, m = mine & is_compute, mine & is_comm
        row = step_row(
            (start[c], end[c]), (start[m], end[m]), int((end - start)[mine & is_recv].sum()), host_start
        )
        rows["rank"].append(r)
        rows["step"].append(s)
        for col in COLUMNS:
            rows[col].append(row[col])
    return pa.Table.from_pydict(rows, schema=BREAKDOWN)
