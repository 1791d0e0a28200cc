"""Canonical event blocks from the streamed Ascend timeline (:mod:`ascend_trace`), all in column operations.

Processes: ``Python`` (host ops), ``CANN`` (runtime APIs), ``Ascend Hardware`` (device tasks, one thread per
stream), ``HCCL`` (``Group N Communication``: op-level collectives; ``Plane k``: link-level tasks). ``Overlap
Analysis`` and the counters are not kept (paradiag recomputes the overlap). Rules: docs/ascend.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from paradiag import schema
from paradiag.parsers import ascend_common as common
from paradiag.parsers.ascend_trace import Text, TraceColumns
from paradiag.parsers.base import Group, collective_from_kernel_name

GROUP_THREAD = re.compile(r"^Group (\S+) Communication$")
PLANE_THREAD = re.compile(r"^Plane (\d+)$")


def codes(*columns: np.ndarray) -> np.ndarray:
    """One int64 code per row for the tuple of values in ``columns``: equal tuples get equal codes."""
    code = np.zeros(len(columns[0]), dtype=np.int64)
    for col in columns:
        _, inverse = np.unique(col, return_inverse=True)
        code = code * (int(inverse.max()) + 1 if len(inverse) else 1) + inverse.reshape(-1)
        _, code = np.unique(code, return_inverse=True)
        code = code.reshape(-1).astype(np.int64)
    return code


def lookup(
    keys: np.ndarray, values: np.ndarray, queries: np.ndarray, last: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """For each query code: the value of the first (or last) row of ``keys`` with that code, and whether one exists."""
    if not len(keys):
        return np.zeros(len(queries), dtype=values.dtype), np.zeros(len(queries), dtype=bool)
    order = np.argsort(keys, kind="stable")
    if last:
        order = order[::-1]
    uniq, first = np.unique(keys[order], return_index=True)
    picked = values[order][first]
    pos = np.minimum(np.searchsorted(uniq, queries), len(uniq) - 1)
    found = uniq[pos] == queries
    return picked[pos], found


@dataclass
class Rows:
    """The timeline's complete events as numpy columns, and which process each belongs to."""

    pid: np.ndarray
    tid: np.ndarray  # -1 when missing
    ts: np.ndarray  # ns; valid_ts says where it is real
    dur: np.ndarray
    valid_ts: np.ndarray
    valid_dur: np.ndarray
    valid: np.ndarray  # time and duration present and not negative
    conn: np.ndarray  # connection id, -1 when missing
    python: np.ndarray
    cann: np.ndarray
    hardware: np.ndarray
    hccl: np.ndarray
    external: np.ndarray  # external_id (host op <-> device work), -1 when none


def rows_of(trace: TraceColumns) -> Rows:
    col = trace.column
    ts_arr, dur_arr = col("ts"), col("dur")
    valid_ts = pc.is_valid(ts_arr).to_numpy(zero_copy_only=False)
    valid_dur = pc.is_valid(dur_arr).to_numpy(zero_copy_only=False)
    ts = ts_arr.fill_null(-1).to_numpy(zero_copy_only=False)
    dur = dur_arr.fill_null(-1).to_numpy(zero_copy_only=False)
    pid = col("pid").fill_null(-1).to_numpy(zero_copy_only=False)
    tid = col("tid").fill_null(-1).to_numpy(zero_copy_only=False)
    conn = col("connection").fill_null(-1).to_numpy(zero_copy_only=False)
    layout = trace.layout
    for key in ("ts", "dur", "pid", "tid", "connection"):  # copied into numpy above: drop the Arrow originals
        trace.x.pop(key, None)
    return Rows(
        pid=pid,
        tid=tid,
        ts=ts,
        dur=dur,
        valid_ts=valid_ts,
        valid_dur=valid_dur,
        valid=valid_ts & valid_dur & (ts >= 0) & (dur >= 0),
        conn=conn,
        python=np.isin(pid, layout.pids("Python")),
        cann=np.isin(pid, layout.pids("CANN")),
        hardware=np.isin(pid, layout.pids("Ascend Hardware")),
        hccl=np.isin(pid, layout.pids("HCCL")),
        external=np.full(len(pid), -1, dtype=np.int64),
    )


def hccl_threads(trace: TraceColumns, r: Rows) -> tuple[np.ndarray, np.ndarray, list[str | None]]:
    """HCCL rows that are ops (``Group N Communication``) and plane tasks (``Plane k``), the plane number of
    every row (-1 elsewhere) and the group label ("Group N") of every op row."""
    idx = np.flatnonzero(r.hccl)
    is_op = np.zeros(len(r.pid), dtype=bool)
    plane = np.full(len(r.pid), -1, dtype=np.int64)
    if not len(idx):
        return is_op, plane, []
    pairs, inverse = np.unique(np.stack([r.pid[idx], r.tid[idx]], axis=1), axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    names = [trace.layout.threads.get((int(p), int(t)), "") for p, t in pairs]
    group = [m.group(1) if (m := GROUP_THREAD.match(n)) else None for n in names]
    planes = np.array(
        [int(m.group(1)) if (m := PLANE_THREAD.match(n)) else -1 for n in names], dtype=np.int64
    )
    is_op[idx] = np.array([g is not None for g in group], dtype=bool)[inverse]
    plane[idx] = planes[inverse]
    op_rows = np.flatnonzero(is_op)
    labels: list[str | None] = [f"Group {group[i]}" for i in inverse[np.isin(idx, op_rows)].tolist()]
    return is_op, plane, labels


def connection_launch(trace: TraceColumns, r: Rows) -> tuple[np.ndarray, np.ndarray]:
    """Host launch time per connection id, from the CANN APIs: the last ``node``-level API with that id, else
    the first API with it. Returns (connection ids, launch ns), sorted by id."""
    rows = np.flatnonzero(r.cann & (r.conn >= 0) & r.valid_ts)
    if not len(rows):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    level = trace.strings("level").take(rows)
    node = np.array([v == "node" for v in level.values] + [False], dtype=bool)[level.codes]
    order = np.lexsort((rows, node, r.conn[rows]))  # by id; within one: APIs, then node APIs, in file order
    cid, node_sorted, ts = r.conn[rows][order], node[order], r.ts[rows][order]
    uniq, first = np.unique(cid, return_index=True)
    last = np.r_[first[1:], len(cid)] - 1
    pick = np.where(node_sorted[last], last, first)
    return uniq, ts[pick]


def flow_pairs(trace: TraceColumns, cat: str | None = None) -> dict[str, np.ndarray]:
    """Flow arrows (of category ``cat``, or all): each finish (``head_*``: pid, tid, ts) with the start of the
    same (cat, id) (``tail_*``; the last one written when an id repeats)."""
    col = trace.column
    ids = col("id", "flows")
    names = ("head_pid", "head_tid", "head_ts", "tail_pid", "tail_tid", "tail_ts")
    if not len(ids):
        return {k: np.zeros(0, dtype=np.int64) for k in names}
    cats = col("cat", "flows").cast(pa.string()).fill_null("")
    keep = pc.and_(pc.is_valid(ids), pc.is_valid(col("ts", "flows")))
    if cat is not None:
        keep = pc.and_(keep, pc.equal(cats, cat))
    keep_np = keep.to_numpy(zero_copy_only=False)
    start = col("start", "flows").to_numpy(zero_copy_only=False)[keep_np]
    cat_codes = cats.dictionary_encode().indices.to_numpy(zero_copy_only=False)[keep_np]
    id_codes = ids.dictionary_encode().indices.to_numpy(zero_copy_only=False)[keep_np]
    key = codes(cat_codes, id_codes)
    tail, found = lookup(key[start], np.flatnonzero(start), key[~start], last=True)
    head = np.flatnonzero(~start)[found]
    tail = tail[found]
    pid = col("pid", "flows").fill_null(-1).to_numpy(zero_copy_only=False)[keep_np]
    tid = col("tid", "flows").fill_null(-1).to_numpy(zero_copy_only=False)[keep_np]
    ts = col("ts", "flows").to_numpy(zero_copy_only=False)[keep_np]
    return {
        "head_pid": pid[head], "head_tid": tid[head], "head_ts": ts[head],
        "tail_pid": pid[tail], "tail_tid": tid[tail], "tail_ts": ts[tail],
    }  # fmt: skip


def triple_lookup(
    keys: tuple[np.ndarray, np.ndarray, np.ndarray],
    values: np.ndarray,
    queries: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`lookup` on (pid, tid, ts) triples: the value of the first key equal to each query."""
    n = len(values)
    key = codes(*(np.r_[k, q] for k, q in zip(keys, queries, strict=True)))
    return lookup(key[:n], values, key[n:])


def launch_times(trace: TraceColumns, r: Rows, rows: np.ndarray) -> np.ndarray:
    """Host launch time of the device rows ``rows``: by connection id (CANN ``Node@launch``), else by the first
    flow arrow that lands on the row (Level0 has no CANN layer); -1 when unknown."""
    out = np.full(len(rows), -1, dtype=np.int64)
    found = np.zeros(len(rows), dtype=bool)
    cids, when = connection_launch(trace, r)
    if len(cids):
        value, found = lookup(cids, when, r.conn[rows])
        found &= r.conn[rows] >= 0
        out[found] = value[found]
    flows = flow_pairs(trace)
    todo = np.flatnonzero(~found & r.valid_ts[rows])
    if len(flows["head_ts"]) and len(todo):
        q = rows[todo]
        heads = (flows["head_pid"], flows["head_tid"], flows["head_ts"])
        value, hit = triple_lookup(heads, flows["tail_ts"], (r.pid[q], r.tid[q], r.ts[q]))
        out[todo[hit]] = value[hit]
    return out


def external_ids(trace: TraceColumns, r: Rows) -> np.ndarray:
    """``external_id`` of every row: a host op and the device work it launched (the ``async_npu`` arrow from the
    op's start to the task's start) share one id, numbered from 0 in file order; -1 elsewhere. When several host
    ops start at the arrow's tail, the innermost (shortest) one is taken."""
    out = np.full(len(r.pid), -1, dtype=np.int64)
    flows = flow_pairs(trace, "async_npu")
    if not len(flows["head_ts"]):
        return out
    device = np.flatnonzero((r.hardware | r.hccl) & r.valid_ts)
    heads = (flows["head_pid"], flows["head_tid"], flows["head_ts"])
    arrow, landed = triple_lookup(
        heads, np.arange(len(flows["head_ts"])), (r.pid[device], r.tid[device], r.ts[device])
    )
    device, arrow = device[landed], arrow[landed]
    host = np.flatnonzero(r.python & r.valid)
    host = host[np.argsort(r.dur[host], kind="stable")]  # shortest first: the innermost op wins
    tails = (flows["tail_pid"][arrow], flows["tail_tid"][arrow], flows["tail_ts"][arrow])
    op, ok = triple_lookup((r.pid[host], r.tid[host], r.ts[host]), host, tails)
    if not ok.any():
        return out
    ops, number = np.unique(op[ok], return_inverse=True)
    out[ops] = np.arange(len(ops))
    out[device[ok]] = number.reshape(-1)
    return out


def rare_values(trace: TraceColumns, rows: np.ndarray) -> dict[str, pa.Array]:
    """The HCCL args of ``rows`` (null where a row has none)."""
    rare = trace.rare_table()
    known = rare.column("row").to_numpy()
    pos = np.minimum(np.searchsorted(known, rows), max(len(known) - 1, 0))
    found = (known[pos] == rows) if len(known) else np.zeros(len(rows), dtype=bool)
    take = pa.array(pos, mask=~found) if len(known) else None
    out = {}
    for name in rare.column_names[1:]:
        column = rare.column(name).combine_chunks()
        out[name] = column.take(take) if take is not None else pa.nulls(len(rows), column.type)
    return out


def map_text(values: pa.Array, fn: Any) -> pa.Array:
    """``fn`` applied to each distinct string of ``values`` (a few thousand at most), not to every row."""
    encoded = values.cast(pa.string()).dictionary_encode()
    mapped = pa.array([fn(v) for v in encoded.dictionary.to_pylist()], type=pa.string())
    return mapped.take(encoded.indices)


def _track(r: Rows, rows: np.ndarray) -> np.ndarray:
    tid = r.tid[rows]
    return np.where(tid < 0, 0, tid)


def add_host(trace: TraceColumns, r: Rows, cols: common.EventColumns) -> None:
    """Python ops (category = their cat; ProfilerStep#N is an annotation) and CANN APIs (category = level,
    name without the ``AscendCL@`` / ``Node@`` prefix, as the db export spells it)."""
    python = np.flatnonzero(r.python & r.valid)
    names = trace.strings("name").take(python)
    kind = names.map(lambda n: schema.ANNOTATION if common.STEP_NAME.match(n) else schema.HOST)
    cols.add(
        device=-1, track=_track(r, python), kind=kind.arrow(), category=trace.strings("cat").take(python).fill("python").arrow(),
        name=names.arrow(), start_ns=r.ts[python], dur_ns=r.dur[python], external_id=r.external[python],
    )  # fmt: skip
    cann = np.flatnonzero(r.cann & r.valid)
    cols.add(
        device=-1, track=_track(r, cann), kind=schema.HOST, category=trace.strings("level").take(cann).fill("cann").arrow(),
        name=trace.strings("name").take(cann).map(lambda n: n.partition("@")[2] or n).arrow(),
        start_ns=r.ts[cann], dur_ns=r.dur[cann], correlation=r.conn[cann],
    )  # fmt: skip


def task_kinds(task_type: Text, names: Text) -> pa.Array:
    """common.task_kind of each (task type, name), computed once per distinct pair."""
    if not len(names.codes):
        return pa.array([], type=pa.string())
    pair = codes(task_type.codes, names.codes)
    uniq, first = np.unique(pair, return_index=True)
    kinds = [
        common.task_kind(task_type.values[task_type.codes[i]], names.values[names.codes[i]])
        for i in first.tolist()
    ]
    dictionary = sorted(set(kinds))
    table = np.array([dictionary.index(k) for k in kinds], dtype=np.int32)
    return Text(table[np.searchsorted(uniq, pair)], dictionary).arrow()


def add_tasks(
    trace: TraceColumns, r: Rows, cols: common.EventColumns, op_rows: np.ndarray, device: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """Device tasks (track = stream). Tasks that belong to an HCCL op (same connection id) are left out: the op
    is the communication event, its link-level detail is in the plane tasks. Returns the op connection ids and
    the stream of each (its first task's), and the number of tasks skipped for a bad time."""
    op_conn = np.unique(r.conn[op_rows][r.conn[op_rows] >= 0])
    hardware = np.flatnonzero(r.hardware)
    of_op = np.isin(r.conn[hardware], op_conn)
    first, found = lookup(r.conn[hardware][of_op], hardware[of_op], op_conn)
    op_stream = np.where(found, _track(r, first), -1)
    tasks = hardware[~of_op]
    bad = int((~r.valid[tasks]).sum())
    tasks = tasks[r.valid[tasks]]
    task_type = trace.strings("task_type").take(tasks).fill("")
    names = trace.strings("name").take(tasks)
    cols.add(
        device=device, track=_track(r, tasks), kind=task_kinds(task_type, names),
        category=task_type.map(lambda t: t or "task").arrow(), name=names.arrow(), start_ns=r.ts[tasks],
        dur_ns=r.dur[tasks], correlation=r.conn[tasks], launch_ns=launch_times(trace, r, tasks),
        external_id=r.external[tasks],
    )  # fmt: skip
    return op_conn, op_stream, bad


def plane_table(
    trace: TraceColumns, r: Rows, plane: np.ndarray, op_rows: np.ndarray, op_streams: np.ndarray
) -> pa.Table:
    """Link-level tasks (``Plane k`` threads), each tied to the op running on its stream at its start time."""
    rows = np.flatnonzero((plane >= 0) & r.valid_ts & r.valid_dur)
    rare = rare_values(trace, rows)
    stream = rare["stream"].fill_null(-1).to_numpy(zero_copy_only=False)
    start = r.ts[rows]
    op_of = np.full(len(rows), -1, dtype=np.int64)
    spans = op_rows[r.valid_ts[op_rows] & r.valid_dur[op_rows]]
    span_stream = op_streams[r.valid_ts[op_rows] & r.valid_dur[op_rows]]
    for s in np.unique(span_stream).tolist():
        mine = spans[span_stream == s]
        mine = mine[np.lexsort((r.ts[mine] + r.dur[mine], r.ts[mine]))]
        here = np.flatnonzero(stream == s)
        i = np.searchsorted(r.ts[mine], start[here], side="right") - 1
        inside = (i >= 0) & (start[here] <= (r.ts[mine] + r.dur[mine])[np.maximum(i, 0)])
        op_of[here[inside]] = mine[i[inside]]
    names = trace.strings("name")
    op_name = pa.array(
        Text(np.where(op_of < 0, -1, names.codes[np.maximum(op_of, 0)]), names.values).tolist(),
        type=pa.string(),
    )
    ranks = {k: rare[k].to_numpy(zero_copy_only=False) for k in ("src_rank", "dst_rank")}
    return pa.table({
        "op_name": op_name, "plane": pa.array(plane[rows], type=pa.int16()), "name": pa.array(names.take(rows).tolist(), type=pa.string()),
        "start_ns": start, "dur_ns": r.dur[rows],
        **{k: pa.array(np.nan_to_num(v, nan=-1).astype(np.int64), mask=~((v >= 0) & (v < common.NO_RANK))) for k, v in ranks.items()},
        "transport": rare["transport"], "link_type": rare["link_type"], "bytes": rare["size"],
    })  # fmt: skip


@dataclass
class Ops:
    """The HCCL op rows and what their events need."""

    rows: np.ndarray
    labels: list[str | None]  # "Group N" from the thread name
    streams: np.ndarray  # the stream of the op's device tasks, -1 when none
    op_group: dict[str, str]  # op name -> group id (communication.json)
    groups: dict[str, Group]  # group id -> members (profiler_metadata.json)
    plane: pa.Table
    rank: int | None
    device: int


def add_ops(trace: TraceColumns, r: Rows, cols: common.EventColumns, ops: Ops) -> int:
    """HCCL op-level collectives: the group id communication.json names for the op ("Group N" otherwise), its
    members when known, bytes = count x data type size, peer of a send/recv from its plane tasks."""
    keep = r.valid[ops.rows]
    rows = ops.rows[keep]
    labels = [g for g, k in zip(ops.labels, keep.tolist(), strict=True) if k]
    names = trace.strings("name").take(rows)
    name_list = [n or "" for n in names.tolist()]
    group = [ops.op_group.get(n, g) for n, g in zip(name_list, labels, strict=True)]
    collective = [c or "" for c in names.map(collective_from_kernel_name).tolist()]
    rare = rare_values(trace, rows)
    nbytes = [
        common.collective_bytes(c, d)
        for c, d in zip(rare["count"].to_pylist(), rare["data_type"].to_pylist(), strict=True)
    ]
    streams = ops.streams[keep]
    cols.add(
        device=ops.device, track=np.where(streams >= 0, streams, _track(r, rows)), kind=schema.COMMUNICATION,
        category="hccl_op", name=names.arrow(), start_ns=r.ts[rows], dur_ns=r.dur[rows], correlation=r.conn[rows],
        launch_ns=launch_times(trace, r, rows), external_id=r.external[rows], collective=collective, group=group,
        group_ranks=[",".join(map(str, ops.groups[g].ranks)) if g in ops.groups else None for g in group],
        peer=common.p2p_peers(name_list, collective, group, ops.plane, ops.rank, ops.groups), bytes=nbytes,
    )  # fmt: skip
    return int((~keep).sum())


def build(
    trace: TraceColumns, device: int, op_group: dict[str, str], groups: dict[str, Group], rank: int | None
) -> tuple[common.EventColumns, pa.Table, list[str]]:
    """Canonical event blocks (host, device tasks, HCCL ops), the plane tasks, and warnings."""
    r = rows_of(trace)
    r.external = external_ids(trace, r)
    is_op, plane, labels = hccl_threads(trace, r)
    op_rows = np.flatnonzero(is_op)
    cols = common.EventColumns()
    add_host(trace, r, cols)
    bad = int((~r.valid & (r.python | r.cann)).sum())
    op_conn, op_stream, bad_tasks = add_tasks(trace, r, cols, op_rows, device)
    stream, found = lookup(op_conn, op_stream, r.conn[op_rows])
    streams = np.where(found & (r.conn[op_rows] >= 0), stream, -1)
    planes = plane_table(trace, r, plane, op_rows, streams)
    bad += bad_tasks + add_ops(
        trace, r, cols, Ops(op_rows, labels, streams, op_group, groups, planes, rank, device)
    )
    warnings = list(trace.warnings)
    if bad:
        warnings.append(f"{bad} events with a missing or negative timestamp or duration were skipped")
    return cols, planes, warnings
