"""One pass over a job's tables that computes everything the report, the CLI and the dashboard show.

``diagnose(job)`` returns the typed :class:`Diagnosis` holding the layout, the per-(rank, step) figures and
breakdowns, the collective and send/recv tables, the pipeline passes, the stage and operator figures, the critical
path and the ranked findings. Each piece comes from a pure function of the tables (``layout``, ``comm``,
``stages``, ``operators``, ``findings``, ``breakdown``); this module only chains them. It runs at ingest;
``stored_or_computed`` is how a job gets its Diagnosis afterwards.

The work splits in two. ``rank_tables`` (the map) needs one rank's events only: it runs where the rank is
parsed (a local worker process or a Dask worker) and its small tables are stored beside the rank's events: the
breakdowns, the device time per (step, operator), the communication records (each collective and send/recv
kernel, with the direction of a send/recv whose peer the trace does not name), the figures per step and the
pipeline passes. ``diagnose`` (the reduce) runs once per job over every rank and reads those tables instead of
recomputing them (a cache written before they existed, or by another analysis version, gets them computed here,
by the same function): the layout, the peers of those sends and receives (their stage neighbours), collective
participation and instances, send/recv matching, the waits, the stages and the findings. What needs every
rank's events at once still reads them (``read_frame``: the columns those need only): the critical path, the
operator imbalance and totals, and the what-if replay of a finding."""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from paradiag import schema
from paradiag.analysis import comm, findings, kinds, stages, whatif
from paradiag.analysis.breakdown import (
    BREAKDOWN_COLUMNS,
    Breakdown,
    default_convention,
    rank_breakdown,
    rank_steps,
    step_breakdowns,
)
from paradiag.analysis.compare import operator_times
from paradiag.analysis.critical_path import critical_path
from paradiag.analysis.diagnosis_types import (
    BREAKDOWN_FIELDS,
    CommLink,
    CommunicationSummary,
    Diagnosis,
    GroupInfo,
    OperatorImbalance,
    StageMetrics,
    analysis_version,
    load,
    save,
)
from paradiag.analysis.frame import COLUMNS as FRAME_COLUMNS
from paradiag.analysis.frame import (
    Frame,
    concat,
    device_frame,
    group_bounds,
    load_frame,
    robust_z,
    table_frame,
)
from paradiag.analysis.layout import Layout, parallel_layout
from paradiag.analysis.operators import host_speeds, operator_imbalance

if TYPE_CHECKING:
    from paradiag.job import Job

EVENT_COLUMNS = tuple(dict.fromkeys((*FRAME_COLUMNS, *BREAKDOWN_COLUMNS)))
OPERATOR_KINDS = (
    schema.COMPUTE,
    schema.COMMUNICATION,
    schema.MEMORY,
)  # what the detail view totals per operator


def peer_sets(layout: Layout) -> list[list[int]]:
    """Ranks that should do the same work: the ranks of one pipeline stage."""
    return [s for s in layout.stages if s]


def stored_or_computed(job: Job) -> Diagnosis:
    """The Diagnosis stored in the job's cache; computed (and stored, where the cache can be written) when it is
    missing or was written by another version of the analysis."""
    found = load(job.cache_dir)
    if found is not None:
        return found
    diagnosis = diagnose(job)
    with contextlib.suppress(
        OSError
    ):  # a read-only cache still opens: the Diagnosis is then computed each time
        save(diagnosis, job.cache_dir)
    return diagnosis


# What rank_tables returns, stored per rank in the cache. Their times (ON_OWN_CLOCK) are on the rank's own clock.
RANK_TABLES = ("breakdowns", "operator_totals", "communication", "step_figures", "passes")
ON_OWN_CLOCK = {"communication": ("start", "end"), "passes": ("start_ns", "end_ns")}
# What the reduce still reads of the events: the critical path, the operator figures and the what-if replay
# (whose communication columns come from the per-rank records; the correlation ids give each kernel's launch;
# ``bytes`` the sizes of a host lane's operator inputs, which ``findings.larger_input_findings`` compares).
WORK_COLUMNS = (
    "rank",
    "device",
    "track",
    "kind",
    "category",
    "name",
    "start_ns",
    "dur_ns",
    "step",
    "correlation",
    "external_id",
    "collective",
    "bytes",
)


def rank_tables(
    events: pa.Table, steps: pa.Table, convention: str, frame: Frame | None = None, host_lanes: bool = False
) -> dict[str, pa.Table]:
    """The per-rank part of the analysis, from one rank's events (``EVENT_COLUMNS`` at least) and its steps
    (sorted by step): its breakdowns (one row per step, and a row with a null step over all its steps, in the
    device's ``convention``), its device time per (step, operator), its communication records
    (``comm.communication_records``), its figures per step (``findings.step_figures``) and its pipeline passes
    (``stages.rank_pass_table``). Breakdowns, totals and figures are durations, so any one clock serves; the
    records' and passes' times are on the clock of ``events`` (the rank's own at ingest: the reduce shifts them).
    The tables carry no rank id: the rank a source gets is settled later, across sources. ``frame`` is
    ``device_frame(events)`` where the caller has it already; ``host_lanes``: the rank's device is its threads (a
    CPU rank: ``findings.step_figures``)."""
    device = events.filter(pc.greater_equal(events.column("device"), 0))
    frame = device_frame(events) if frame is None else frame
    return {
        "breakdowns": _breakdown_table(_rank_breakdowns(device, steps, convention)),
        "operator_totals": _operator_totals(frame),
        "communication": comm.communication_records(frame),
        "step_figures": findings.step_figures(frame, steps, host_lanes),
        "passes": stages.rank_pass_table(frame, events, host_lanes),
    }


def read_rank_tables(job: Job) -> dict[str, list[pa.Table]]:
    """Every rank's per-rank tables (stored at ingest, else computed here from its events), rank by rank, each
    with a ``rank`` column and its times on the job's aligned clock."""
    parts: dict[str, list[pa.Table]] = {name: [] for name in RANK_TABLES}
    device_type, offset = job.by_rank("device_type"), job.by_rank("clock_offset_ns")
    for rank in job.rank_ids:
        tables, shift = job.rank_tables(rank, RANK_TABLES), offset.get(rank) or 0
        if tables is None:  # read on the aligned clock: nothing to shift
            events = job.events(ranks=[rank], columns=EVENT_COLUMNS)
            kind = device_type.get(rank)
            tables, shift = (
                rank_tables(
                    events, rank_steps(job.steps, rank), default_convention(kind), host_lanes=kind == "cpu"
                ),
                0,
            )
        for name in RANK_TABLES:
            table = _shifted(tables[name], ON_OWN_CLOCK.get(name, ()), shift)
            parts[name].append(table.add_column(0, "rank", pa.array(np.full(table.num_rows, rank, np.int32))))
    return parts


def _shifted(table: pa.Table, columns: tuple[str, ...], offset: int) -> pa.Table:
    """``table`` with ``offset`` added to its time ``columns``: a stored table's times onto the aligned clock."""
    for name in columns if offset else ():
        table = table.set_column(
            table.schema.get_field_index(name),
            name,
            pc.add(table.column(name), pa.scalar(offset, pa.int64())),
        )
    return table


def read_frame(job: Job) -> Frame:
    """The job's device events as one :class:`Frame` of the ``WORK_COLUMNS`` (the communication columns -1:
    :func:`add_communication` fills them in), each rank's events read once (and dropped before the next rank is
    read). A job just ingested has each rank's frame from its map (``Job.work_frame_file``): read instead of the
    events, it is the same frame, without decoding a Parquet part and building the frame again."""
    offsets = job.by_rank("clock_offset_ns")
    frames = []
    for rank in job.rank_ids:
        file = job.work_frame_file(rank)
        if file is None:
            frames.append(device_frame(job.events(ranks=[rank], columns=WORK_COLUMNS)))
        else:
            frames.append(_aligned(load_frame(file), rank, offsets.get(rank) or 0))
    return concat(frames)


def work_frame(frame: Frame) -> Frame:
    """What :func:`read_frame` gets of a rank's events, from the map's ``device_frame`` of them: the same but
    for the communication columns, which the reduce fills in from the records (:func:`add_communication`; the
    bytes of other rows, a host lane's operator inputs, stay)."""
    n = len(frame)
    return dataclasses.replace(
        frame,
        group=np.full(n, -1, np.int32),
        peer=np.full(n, -1, np.int32),
        seq=np.full(n, -1, np.int32),
        groups=[],
    )


def _aligned(frame: Frame, rank: int, offset: int) -> Frame:
    """A map's :func:`work_frame` (rank -1, times on the rank's own clock) given its rank and the job's clock.
    A launch of -1 is none (times are never negative: the parsers drop them; -1 marks an invalid one)."""
    frame.rank[:] = rank
    if offset:
        frame.start += offset
        frame.end += offset
        frame.launch = np.where(frame.launch != -1, frame.launch + offset, -1)
    return frame


def add_communication(frame: Frame, records: Frame) -> None:
    """Fill in, in place, the group, peer, bytes and sequence number of ``frame``'s communication kernels from
    ``records`` (the same kernels in the same order, peers inferred)."""
    rows = np.flatnonzero(frame.kind == frame.code("kinds", "communication"))
    if len(rows) != len(records) or frame.collectives != records.collectives:
        raise ValueError(
            f"the communication records ({len(records)}) are not the events' communication kernels ({len(rows)})"
        )
    frame.groups = records.groups
    for name in ("group", "peer", "bytes", "seq"):
        getattr(frame, name)[rows] = getattr(records, name)


def _records(tables: list[pa.Table]) -> tuple[Frame, np.ndarray]:
    """The communication records of every rank as one :class:`Frame`, and their peer directions."""
    directions = [t.column("peer_direction").to_numpy() for t in tables]
    return concat([table_frame(t) for t in tables]), np.concatenate(directions) if directions else np.zeros(
        0, np.int8
    )


def _concat(tables: list[pa.Table], name: str) -> pa.Table:
    if not tables:
        return _EMPTY[name]
    table = pa.concat_tables(tables)
    return (
        table.sort_by([("step", "ascending"), ("rank", "ascending"), ("name", "ascending")])
        if name == "operator_totals"
        else table
    )


def _rank_breakdowns(
    events: pa.Table, steps: pa.Table, convention: str
) -> list[tuple[int | None, Breakdown | None]]:
    """(step, breakdown) per step of the rank, and (None, breakdown over all its steps), in the device's own
    ``convention``."""
    out: list[tuple[int | None, Breakdown | None]] = [
        (None, rank_breakdown(events, steps.column("step").to_pylist(), convention))
    ]
    for s in step_breakdowns(events, steps, convention):
        b = s["breakdown"]
        out.append((s["step"], Breakdown(**{k: b[k] for k in BREAKDOWN_FIELDS}) if b else None))
    return out


def _breakdown_table(rows: list[tuple[int | None, Breakdown | None]]) -> pa.Table:
    cols: dict[str, Any] = {"step": pa.array([s for s, _ in rows], pa.int32())}
    for name in BREAKDOWN_FIELDS:
        cols[name] = pa.array([getattr(b, name) if b else None for _, b in rows], pa.int64())
    return pa.table(cols)


def diagnose(job: Job) -> Diagnosis:
    """Everything about ``job``: the per-rank tables reduced across ranks, then the parts that need the events."""
    per_rank = read_rank_tables(job)
    records, directions = _records(per_rank.pop("communication"))
    layout = parallel_layout(job.ranks, job.groups, records)
    members, host_of = job.group_members(), job.by_rank("host")
    comm.assign_peers(records, directions, members, layout.stage_of)
    participation = comm.collective_participation(records)
    instances = comm.collective_instances(participation, layout.group_sizes(members))
    p2p = comm.p2p_transfers(records)
    waits = comm.rank_waits(participation, p2p)
    figures = findings.rank_step_figures(pa.concat_tables(per_rank.pop("step_figures")), job.steps)
    step_ns = float(statistics.median(f["step_ns"] for f in figures.values())) if figures else 0.0
    rank_passes = pa.concat_tables(per_rank.pop("passes"))
    virtual = stages.virtual_stages(rank_passes, layout.stages[0] if layout.stages else [], layout.size["pp"])
    passes = stages.number_passes(rank_passes, layout.stage_of, virtual, layout.size["pp"])
    host_ranks = job.cpu_ranks()
    stretch = _host_stretch(per_rank["breakdowns"], figures, host_ranks)
    metrics = stages.stage_metrics(
        passes, layout.stages, virtual, step_ns, stretch, stages.annotated_micro_batches(rank_passes)
    )
    if metrics:
        metrics["schedule"] = stages.schedule_kind(passes, layout.size["pp"], virtual)
    frame = read_frame(job)
    add_communication(frame, records)
    p2p = comm.with_deliveries(p2p, frame, host_ranks)
    del records  # the frame holds them now (the peak comes later: the critical path, the replay)
    peers = peer_sets(layout)
    steps_total = len({s for _, s in figures}) or 1
    speeds = host_speeds(
        frame, peers, host_ranks, stretch
    )  # a CPU rank's compute weighed at its own speed per call
    at_speed = {
        k: {**v, "compute_ns": round(v["compute_ns"] / speeds[k[0]])} if k[0] in speeds else v
        for k, v in figures.items()
    }
    on_host = bool(host_ranks) and set(job.rank_ids) <= host_ranks
    evidence = findings.Evidence(
        frame=frame, figures=at_speed, peer_sets=peers, ep_of={r: c["ep"] for r, c in layout.coords.items()}, waits=waits, step_ns=step_ns,
        host_ranks=host_ranks, compute_scale=stretch, stage_metrics=metrics, on_host=on_host, pp=layout.size["pp"], tp=layout.size["tp"],
        stages=layout.stages, instances=instances, p2p=p2p, members=members, host_of=host_of, steps_total=steps_total,
        links=job.extra("links") if step_ns > 0 else None, ranks=job.ranks, clock_compute=_clock_compute(per_rank["breakdowns"], host_ranks),
        participation=participation, passes=passes,
    )  # fmt: skip
    found = findings.detect(evidence)
    del evidence
    operators = [OperatorImbalance(**o) for o in operator_imbalance(frame, peers)]
    times = operator_times(frame, len(set(job.steps.column("step").to_pylist())))
    path = critical_path(frame, participation, p2p, job.steps)
    if any(kinds.finding_edits(f) for f in found):  # the graph costs seconds at 1024 ranks: only for a replay
        # The replay comes last: its graph takes the frame's arrays over (the events are not held twice).
        graph = whatif.build_graph(frame, job.steps, p2p, host_of, passes, host_ranks)
        del frame
        found = whatif.replay_findings(
            found, graph, whatif.peers_of(layout.stage_of, figures, metrics, host_ranks), host_ranks
        )
        del graph
    if on_host:
        found = findings.above_host_noise(found)
    return Diagnosis(
        version=analysis_version(),
        layout=layout,
        groups=_groups(job.groups, layout),
        step_time_ns=step_ns,
        stage_metrics=StageMetrics.from_json(metrics) if metrics else None,
        operators=operators,
        findings=findings.ranked(found, by_replay=on_host),
        communication=communication_summary(instances, p2p),
        communication_matrix=[
            CommLink(**c)
            for c in comm.comm_matrix(instances, p2p, members, host_of, job.extra("links"), layout.world)
        ],
        operator_times=times,
        rank_steps=rank_step_table(job.steps, figures, waits, layout),
        breakdowns=_concat(per_rank["breakdowns"], "breakdowns"),
        participation=participation,
        instances=instances,
        p2p=p2p,
        passes=passes,
        operator_totals=_concat(per_rank["operator_totals"], "operator_totals"),
        critical_path=path,
    )


def _clock_compute(breakdowns: list[pa.Table], host_ranks: frozenset[int]) -> dict[tuple[int, int], int]:
    """(rank, step) -> the clock's compute time of each CPU rank's step (the breakdowns')."""
    out = {}
    for table in breakdowns:
        cols = table.select(["rank", "step", "compute_ns"]).to_pydict()
        for rank, step, wall in zip(cols["rank"], cols["step"], cols["compute_ns"], strict=True):
            if rank in host_ranks and step is not None and wall:
                out[(rank, step)] = int(wall)
    return out


def _host_stretch(
    breakdowns: list[pa.Table], figures: dict[tuple[int, int], dict[str, int]], host_ranks: frozenset[int]
) -> float:
    """How much longer the clock's compute of CPU ranks is than their compute at typical durations (the median
    over their steps, at least 1; 1 without CPU ranks): on a busy host every rank's step is stretched by its
    share of the cores, so a rank's extra work (counted at typical durations) is weighed against the step at
    that speed too."""
    ratios = []
    for table in breakdowns:
        cols = table.select(["rank", "step", "compute_ns"]).to_pydict()
        for rank, step, wall in zip(cols["rank"], cols["step"], cols["compute_ns"], strict=True):
            typical = (
                figures.get((rank, step), {}).get("compute_ns")
                if rank in host_ranks and step is not None
                else None
            )
            if typical and wall:
                ratios.append(wall / typical)
    return max(float(statistics.median(ratios)), 1.0) if ratios else 1.0


def _groups(groups: pa.Table, layout: Layout) -> list[GroupInfo]:
    cols = groups.select(["group", "description", "ranks"]).to_pydict()
    return [
        GroupInfo(group=g, name=d, role=layout.roles.get(g), ranks=[int(r) for r in m])
        for g, d, m in zip(cols["group"], cols["description"], cols["ranks"], strict=True)
    ]


def rank_step_table(
    steps: pa.Table,
    figures: dict[tuple[int, int], dict[str, int]],
    waits: dict[tuple[int, int], dict[str, int]],
    layout: Layout,
) -> pa.Table:
    """One row per (rank, step) of the steps table: the findings' figures (null without device work), the waits,
    and the robust z-scores of compute and launch delay against the rank's stage in that step."""
    keys = sorted(zip(steps.column("rank").to_pylist(), steps.column("step").to_pylist(), strict=True))
    stage = layout.stage_of
    cols: dict[str, list[Any]] = {
        "rank": [r for r, _ in keys],
        "step": [s for _, s in keys],
        "stage": [stage.get(r, 0) for r, _ in keys],
    }
    for part in ("step_ns", "compute_ns", "launch_delay_ns", "idle_ns", "hooks_ns"):
        cols[part] = [figures[k][part] if k in figures else None for k in keys]
    for part in ("wait_ns", "caused_ns"):
        cols[part] = [waits.get(k, {}).get(part, 0) for k in keys]
    for part in ("compute_ns", "launch_delay_ns"):
        cols[part.replace("_ns", "_z")] = _stage_z(keys, cols["stage"], cols[part])
    types = {
        "rank": pa.int32(),
        "step": pa.int32(),
        "stage": pa.int32(),
        "compute_z": pa.float64(),
        "launch_delay_z": pa.float64(),
    }
    return pa.table({k: pa.array(v, types.get(k, pa.int64())) for k, v in cols.items()})


def _stage_z(
    keys: list[tuple[int, int]], stage_of_row: list[int], values: list[int | None]
) -> list[float | None]:
    """Per row, the robust z-score of its value among the rows of the same stage and step."""
    by_cell: dict[tuple[int, int], list[int]] = {}
    for i, ((_, step), stage) in enumerate(zip(keys, stage_of_row, strict=True)):
        if values[i] is not None:
            by_cell.setdefault((stage, step), []).append(i)
    out: list[float | None] = [None] * len(keys)
    for rows in by_cell.values():
        z = robust_z(np.array([values[i] for i in rows], dtype=float))
        for i, v in zip(rows, z.tolist(), strict=True):
            out[i] = round(v, 4)
    return out


def _operator_totals(frame: Frame) -> pa.Table:
    """Device time per (step, operator name) of one rank's compute, communication and memory work in its steps,
    sorted by step and name."""
    keep = np.isin(frame.kind, frame.codes("kinds", OPERATOR_KINDS)) & (frame.step >= 0)
    f = frame.take(keep)
    order, firsts = group_bounds(
        f.name, f.step
    )  # a frame's names are sorted: name codes order as the names do
    totals = np.add.reduceat((f.end - f.start)[order], firsts) if len(order) else np.zeros(0, np.int64)
    head = order[firsts]
    names = pa.DictionaryArray.from_arrays(
        pa.array(f.name[head], pa.int32()), pa.array(frame.names, pa.string())
    )
    return pa.table(
        {
            "step": pa.array(f.step[head], pa.int32()),
            "name": names.cast(pa.string()),
            "dur_ns_sum": pa.array(totals, pa.int64()),
        }
    )


_EMPTY = {
    "breakdowns": _breakdown_table([]).add_column(0, "rank", pa.array([], pa.int32())),
    "operator_totals": pa.table(
        {
            "step": pa.array([], pa.int32()),
            "rank": pa.array([], pa.int32()),
            "name": pa.array([], pa.string()),
            "dur_ns_sum": pa.array([], pa.int64()),
        }
    ),
}


def communication_summary(instances: pa.Table, p2p: pa.Table) -> CommunicationSummary:
    """Arrival skew over the collective instances, and bus bandwidth per collective kind (medians)."""
    inst = instances.select(["skew_ns", "collective", "busbw_gbps", "late_rank", "total_wait_ns"]).to_pydict()
    skew = sorted(inst["skew_ns"])
    by_kind: dict[str, list[float]] = {}
    for kind, bw in zip(inst["collective"], inst["busbw_gbps"], strict=True):
        by_kind.setdefault(kind, [])
        if bw == bw:  # not NaN: null where it cannot be computed
            by_kind[kind].append(bw)
    late: dict[int, int] = {}
    for rank, wait in zip(inst["late_rank"], inst["total_wait_ns"], strict=True):
        late[rank] = late.get(rank, 0) + wait
    return CommunicationSummary(
        collective_instances=len(skew),
        p2p_transfers=p2p.num_rows,
        arrival_skew_ns={
            "median": statistics.median(skew),
            "p95": skew[int(0.95 * (len(skew) - 1))],
            "max": skew[-1],
        }
        if skew
        else None,
        busbw_gbps_median={
            k: round(statistics.median(v), 3) if v else None for k, v in sorted(by_kind.items())
        },
        caused_wait_ns_top=[
            {"rank": r, "caused_wait_ns": w} for r, w in sorted(late.items(), key=lambda kv: -kv[1])[:5]
        ],
    )
