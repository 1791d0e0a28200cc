"""Per-device detail: one rank in one step against the median of its stage peers."""

from __future__ import annotations

import statistics
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

from paradiag.analysis.kinds import standout_operators
from paradiag.analysis.report import BreakdownJson
from paradiag.app import store
from paradiag.app.data import collectives
from paradiag.app.data.common import diagnosis, read_events, step_span
from paradiag.app.data.mesh import mesh_of
from paradiag.app.data.overview import report
from paradiag.app.data.shapes import CollectiveTime, DetailBreakdown, DetailData, Durations
from paradiag.job import Job

TOP = 12
HOT = 3  # operators that stand out from the peers', listed first
DISTRIBUTION_PEERS = 7  # peers whose instances the duration distribution reads (each costs a Parquet read)
BREAKDOWN: tuple[
    Literal["compute_ns", "comm_exposed_ns", "memory_exposed_ns", "sync_exposed_ns", "idle_ns"], ...
] = (
    "compute_ns",
    "comm_exposed_ns",
    "memory_exposed_ns",
    "sync_exposed_ns",
    "idle_ns",
)


def detail_data(job: Job, rank: int, step: int, operator: str | None = None) -> DetailData:
    return store.memo("detail", job, [rank, step, operator], lambda: _detail(job, rank, step, operator))


def peers_of(job: Job, rank: int) -> list[int]:
    mesh = mesh_of(job)
    return [r for r in mesh.ranks_of_stage(mesh.stage.get(rank, 0)) if r != rank]


def operator_totals(job: Job) -> pa.Table:
    """Device time per (step, rank, operator) over the whole job, computed once: the detail of any rank in any
    step then reads no events for its top operators."""
    return store.memo("operator-totals", job, None, lambda: _operator_totals(job))


def _operator_totals(job: Job) -> pa.Table:
    events = read_events(job, columns=["rank", "device", "kind", "name", "dur_ns", "step"])
    kind = events.column("kind").cast(pa.string())
    keep = pc.and_(
        pc.is_valid(events.column("step")),
        pc.and_(
            pc.greater_equal(events.column("device"), 0),
            pc.is_in(kind, pa.array(["compute", "communication", "memory"])),
        ),
    )
    ops = events.filter(keep).select(["step", "rank", "name", "dur_ns"])
    return (
        ops.set_column(2, "name", ops.column("name").cast(pa.string()))
        .group_by(["step", "rank", "name"])
        .aggregate([("dur_ns", "sum")])
    )


def _device_ops(job: Job, ranks: list[int], step: int) -> pa.Table:
    lo, hi = step_span(job, step, ranks)  # only the row groups of this step are read
    events = read_events(
        job, ranks=ranks, start_ns=lo, end_ns=hi, columns=["rank", "device", "kind", "name", "dur_ns", "step"]
    )
    kind = events.column("kind").cast(pa.string())
    keep = pc.and_(
        pc.equal(events.column("step"), step),
        pc.and_(
            pc.greater_equal(events.column("device"), 0),
            pc.is_in(kind, pa.array(["compute", "communication", "memory"])),
        ),
    )
    return events.filter(keep)


def _detail(job: Job, rank: int, step: int, operator: str | None) -> DetailData:
    peers = peers_of(job, rank)
    everything = operator_totals(job)
    totals = everything.filter(
        pc.and_(
            pc.equal(everything.column("step"), step),
            pc.is_in(everything.column("rank"), value_set=pa.array([rank, *peers], pa.int32())),
        )
    )
    mine: dict[str, int] = {}
    theirs: dict[str, list[int]] = {}
    for r, name, total in zip(
        totals.column("rank").to_pylist(),
        totals.column("name").cast(pa.string()).to_pylist(),
        totals.column("dur_ns_sum").to_pylist(),
        strict=True,
    ):
        if r == rank:
            mine[name] = total
        else:
            theirs.setdefault(name, []).append(total)
    # The operators that stand out from the peers' first (the analysis' rule), most extra time first; then the
    # rank's largest. The durations open on the first that stands out.
    hot = [o.operator for o in standout_operators(diagnosis(job), rank) if o.operator in mine][:HOT]
    top = [*hot, *(n for n in sorted(mine, key=mine.get, reverse=True) if n not in hot)][:TOP]  # type: ignore[arg-type]
    operator = operator if operator in mine else (top[0] if top else None)
    return {
        "rank": rank,
        "step": step,
        "peers": peers,
        "operators": [
            {
                "name": n,
                "rank_ms": mine[n] / 1e6,
                "peer_ms": statistics.median(theirs[n]) / 1e6 if theirs.get(n) else None,
                "standout": n in hot,
            }
            for n in top
        ],
        "breakdown": _breakdown(job, rank, peers, step),
        "operator": operator,
        "distribution": _distribution(
            _device_ops(job, [rank, *peers[:DISTRIBUTION_PEERS]], step), rank, operator
        ),
        "collectives": _collectives(job, rank, step),
    }


def _breakdown(job: Job, rank: int, peers: list[int], step: int) -> DetailBreakdown:
    per_rank: dict[int, BreakdownJson] = {}
    for entry in report(job)["ranks"]:
        for s in entry["steps"]:
            if s["step"] == step and s["breakdown"]:
                per_rank[entry["rank"]] = s["breakdown"]
    own = per_rank.get(rank)
    peer_rows = [per_rank[p] for p in peers if p in per_rank]
    return {
        "parts": [p.replace("_ns", "") for p in BREAKDOWN],
        "rank_ms": [own[p] / 1e6 for p in BREAKDOWN] if own else None,
        "peer_ms": [statistics.median(b[p] for b in peer_rows) / 1e6 for p in BREAKDOWN]
        if peer_rows
        else None,
    }


def _distribution(ops: pa.Table, rank: int, operator: str | None) -> Durations:
    if operator is None:
        return {"rank_us": [], "peer_us": []}
    same = ops.filter(pc.equal(ops.column("name").cast(pa.string()), operator))
    is_mine = pc.equal(same.column("rank"), rank)
    return {
        "rank_us": (same.filter(is_mine).column("dur_ns").to_numpy() / 1e3).round(3).tolist(),
        "peer_us": (same.filter(pc.invert(is_mine)).column("dur_ns").to_numpy() / 1e3).round(3).tolist(),
    }


def _collectives(job: Job, rank: int, step: int) -> list[CollectiveTime]:
    table = collectives.instances(job)
    if table.num_rows == 0:
        return []
    mine = table.filter(pc.and_(pc.equal(table.column("rank"), rank), pc.equal(table.column("step"), step)))
    if mine.num_rows == 0:
        return []
    kinds = mine.column("collective").cast(pa.string()).fill_null("other")
    grouped = (
        pa.table({"c": kinds, "w": mine.column("wait_ns"), "t": mine.column("transfer_ns")})
        .group_by("c")
        .aggregate([("w", "sum"), ("t", "sum"), ("w", "count")])
    )
    rows: list[CollectiveTime] = [
        {"collective": c, "wait_ms": w / 1e6, "transfer_ms": t / 1e6, "count": n}
        for c, w, t, n in zip(
            *(grouped.column(k).to_pylist() for k in ("c", "w_sum", "t_sum", "w_count")), strict=True
        )
    ]
    return sorted(rows, key=lambda r: -(r["wait_ms"] + r["transfer_ms"]))
