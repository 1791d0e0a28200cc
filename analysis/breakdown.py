"""Where each rank's device time goes: compute, communication (exposed and overlapped), memory copies, idle.

Definitions (docs/analysis.md says the same in words). Over a window of a rank's device timeline, let C, M, Y, S
be the unions of its compute, communication, memory and sync intervals (all streams):

* ``compute_ns``            = |C|
* ``comm_overlapped_ns``    = |M ∩ C|   (communication hidden under compute)
* ``comm_exposed_ns``       = |M − C|   (communication nothing else hides)
* ``memory_exposed_ns``     = |Y − (C ∪ M)|
* ``sync_exposed_ns``       = |S − (C ∪ M ∪ Y)|  (streams waiting on events, nothing running)
* ``idle_ns``               = window − |C ∪ M ∪ Y ∪ S|

so compute + comm_exposed + memory_exposed + sync_exposed + idle = window. The window is the span of the device
work launched in the profiled steps: every step, the last one included. HTA's ``get_temporal_breakdown`` uses
the same sets (its ``non_compute`` is comm_exposed + memory_exposed + sync_exposed) but drops the last step and
rounds timestamps down to whole microseconds; ``convention="hta"`` reproduces that for cross-checks.

``convention="ascend"`` (the default for NPU ranks) is torch_npu's ``step_trace_time``: per step, the window is
the span of that step's compute and communication (memory copies and sync tasks are not counted, they fall in
Free), and the steps' figures are summed, so that compute, comm_exposed (Communication (Not Overlapped)),
comm_overlapped (Overlapped) and idle (Free) match the producer's per step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from paradiag import schema
from paradiag.intervals import union_length

if TYPE_CHECKING:
    from paradiag.job import Job

BREAKDOWN_COLUMNS = ("kind", "device", "step", "start_ns", "dur_ns")


@dataclass
class Breakdown:
    window_ns: int
    compute_ns: int
    comm_ns: int
    comm_overlapped_ns: int
    comm_exposed_ns: int
    memory_ns: int
    memory_exposed_ns: int
    sync_exposed_ns: int
    idle_ns: int

    @property
    def overlap_ratio(self) -> float | None:
        """Share of communication time hidden under compute (HTA's comp_comm_overlap_pctg / 100)."""
        return self.comm_overlapped_ns / self.comm_ns if self.comm_ns else None

    def pct(self, name: str) -> float:
        return 100.0 * getattr(self, name) / self.window_ns if self.window_ns else 0.0

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = asdict(self)
        out["overlap_ratio"] = self.overlap_ratio
        for name in ("compute_ns", "comm_exposed_ns", "memory_exposed_ns", "sync_exposed_ns", "idle_ns"):
            out[name.replace("_ns", "_pct")] = round(self.pct(name), 3)
        return out


def _arrays(events: pa.Table) -> dict[str, np.ndarray]:
    kind = events.column("kind")
    kind_str = kind.cast(pa.string()) if pa.types.is_dictionary(kind.type) else kind
    return {
        "kind": np.asarray(kind_str.to_numpy(zero_copy_only=False)),
        "device": events.column("device").to_numpy(),
        "step": events.column("step").to_numpy(),
        "start": events.column("start_ns").to_numpy(),
        "end": events.column("start_ns").to_numpy() + events.column("dur_ns").to_numpy(),
    }


def device_work(events: pa.Table, steps: list[int] | None = None) -> dict[str, np.ndarray]:
    """One rank's device intervals (compute/communication/memory/sync), restricted to ``steps`` when given."""
    a = _arrays(events)
    keep = (a["device"] >= 0) & np.isin(a["kind"], schema.DEVICE_KINDS)
    if steps is not None:
        keep &= np.isin(a["step"], steps)
    return {k: v[keep] for k, v in a.items()}


def breakdown_of(
    work: dict[str, np.ndarray], lo: int | None = None, hi: int | None = None
) -> Breakdown | None:
    """The breakdown of device intervals over [lo, hi) (default: their own span); None without device work."""
    start, end, kind = work["start"], work["end"], work["kind"]
    if lo is not None or hi is not None:
        lo_v = int(start.min()) if lo is None else lo
        hi_v = int(end.max()) if hi is None else hi
        start, end = np.maximum(start, lo_v), np.minimum(end, hi_v)
        keep = end > start
        start, end, kind = start[keep], end[keep], kind[keep]
    if len(start) == 0:
        return None
    window = (int(end.max()) if hi is None else hi) - (int(start.min()) if lo is None else lo)
    is_c, is_m, is_y = kind == schema.COMPUTE, kind == schema.COMMUNICATION, kind == schema.MEMORY
    c = union_length(start[is_c], end[is_c])
    m = union_length(start[is_m], end[is_m])
    cm = union_length(start[is_c | is_m], end[is_c | is_m])
    cmy = union_length(start[is_c | is_m | is_y], end[is_c | is_m | is_y])
    everything = union_length(start, end)
    return Breakdown(
        window_ns=window,
        compute_ns=c,
        comm_ns=m,
        comm_overlapped_ns=c + m - cm,
        comm_exposed_ns=cm - c,
        memory_ns=union_length(start[is_y], end[is_y]),
        memory_exposed_ns=cmy - cm,
        sync_exposed_ns=everything - cmy,
        idle_ns=window - everything,
    )


CONVENTIONS = ("paradiag", "hta", "ascend")


def default_convention(device_type: str | None) -> str:
    """The breakdown users of a device know: the producer's step_trace_time on NPUs, paradiag's own elsewhere."""
    return "ascend" if device_type == "npu" else "paradiag"


def _ascend_breakdown(work: dict[str, np.ndarray]) -> Breakdown | None:
    """Per step, compute and communication over their own span; the steps' figures summed."""
    keep = np.isin(work["kind"], (schema.COMPUTE, schema.COMMUNICATION))
    parts = [
        breakdown_of({k: v[keep & (work["step"] == s)] for k, v in work.items()})
        for s in np.unique(work["step"][keep])
    ]
    found = [p for p in parts if p is not None]
    if not found:
        return None
    return Breakdown(
        **{name: sum(getattr(p, name) for p in found) for name in Breakdown.__dataclass_fields__}
    )


def rank_breakdown(
    events: pa.Table, step_ids: list[int] | None = None, convention: str = "paradiag"
) -> Breakdown | None:
    """The breakdown of one rank over its profiled steps.

    ``step_ids``: the rank's steps (from the steps table); without steps every device event counts.
    ``convention="hta"``: drop the last step and round times down to microseconds, as HTA 0.5 does;
    ``convention="ascend"``: torch_npu's step_trace_time, step by step (see the module's docstring)."""
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown breakdown convention {convention!r} (one of {', '.join(CONVENTIONS)})")
    kept = sorted(step_ids) if step_ids else None
    if convention == "ascend":
        return _ascend_breakdown(device_work(events, kept))
    if convention == "hta" and kept:
        kept = kept[:-1] or kept
        events = events.filter(launched_in_trace(events))
    work = device_work(events, kept)
    if convention == "hta":
        work = dict(work)
        start_us = work["start"] // 1000
        work["end"] = (start_us + (work["end"] - work["start"]) // 1000) * 1000
        work["start"] = start_us * 1000
    return breakdown_of(work)


def convention_breakdown(job: Job, rank: int, convention: str) -> Breakdown | None:
    """A rank's breakdown over its profiled steps in ``convention``, from its events (HTA's needs the host launches
    too: it drops device work whose launch is not in the trace)."""
    events = job.events(ranks=[rank])
    if convention != "hta":
        events = events.filter(pc.greater_equal(events.column("device"), 0))
    return rank_breakdown(events, rank_steps(job.steps, rank).column("step").to_pylist(), convention)


def launched_in_trace(events: pa.Table) -> pa.Array:
    """Mask of events that are host events or device work whose launch call is in the trace (HTA assigns
    steps to device work only through its launch; work launched before the profiler started is dropped)."""
    category = events.column("category").cast(pa.string())
    is_launch = pc.is_in(category, pa.array(["cuda_runtime", "Runtime", "cuda_driver"]))
    launched = pc.filter(
        events.column("correlation"), pc.and_(is_launch, pc.greater_equal(events.column("correlation"), 0))
    )
    on_host = pc.less(events.column("device"), 0)
    return pc.or_(on_host, pc.is_in(events.column("correlation"), launched.unique()))


def step_breakdowns(events: pa.Table, steps: pa.Table, convention: str = "paradiag") -> list[dict[str, Any]]:
    """Per step of one rank: the step's host time, its device span and the breakdown over that span (``ascend``:
    over the span of its compute and communication, as step_trace_time)."""
    work = device_work(events)
    if convention == "ascend":
        keep = np.isin(work["kind"], (schema.COMPUTE, schema.COMMUNICATION))
        work = {k: v[keep] for k, v in work.items()}
    out = []
    for row in steps.to_pylist():
        mine = {k: v[work["step"] == row["step"]] for k, v in work.items()}
        b = breakdown_of(mine)
        out.append(
            {
                "step": row["step"],
                "step_time_ns": row["end_ns"] - row["start_ns"],
                "device_span_ns": (row["device_end_ns"] - row["device_start_ns"])
                if row["device_start_ns"] is not None
                else None,
                "breakdown": b.as_dict() if b else None,
            }
        )
    return out


def rank_steps(steps: pa.Table, rank: int) -> pa.Table:
    return steps.filter(pc.equal(steps.column("rank"), rank)).sort_by("step")
