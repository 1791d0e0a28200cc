"""Ascend PyTorch Profiler db export (``ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_{rank}.db`` +
``analysis.db``, SQLite, integer ns; strings interned in ``STRING_IDS``) -> canonical tables.

The rules are those of the text reader (see :mod:`ascend_common`), so both exports of a job give the same
canonical tables. Differences of the db itself: the TASK table also holds the runtime's wrapper task of a kernel
(same connection id, no COMPUTE_TASK_INFO row) and the HCCL op's own task; both are left out, as the text export
leaves them out. Format notes: ../shared/formats/ascend.md section 1.10.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

from paradiag import schema
from paradiag.parsers import ascend_common as common
from paradiag.parsers.base import MAX_RANK, ParsedRank, TraceError, collective_from_kernel_name

FORMAT = "ascend_db"
_EVENT_TABLES = frozenset({"PYTORCH_API", "CANN_API", "TASK", "COMMUNICATION_OP"})
DB_GLOBS = ("ascend_pytorch_profiler*.db", "ascend_mindspore_profiler*.db")
_PYTORCH_CATEGORY = {50001: "cpu_op", 50003: "python_function", 50004: "mstx"}


def find_db(path: Path) -> Path | None:
    output = path / common.OUTPUT_DIR
    for pattern in DB_GLOBS:
        found = sorted(output.glob(pattern))
        if found:
            return found[0]
    return None


def detect(path: Path) -> bool:
    """A rank folder whose db export is present."""
    return find_db(path) is not None


# A damaged file can make SQLite's own error message invalid UTF-8, which the sqlite3 module fails to decode.
_DB_ERRORS = (sqlite3.DatabaseError, UnicodeDecodeError)


@contextmanager
def connect(path: Path, shown: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection that never writes beside the database; TraceError when it is not a database.
    The exports are in WAL mode, where even a read-only open creates ``-shm``/``-wal`` files next to the database
    (or fails in a read-only folder): ``immutable=1`` reads the file as it is. A non-empty ``-wal`` holds data
    not yet copied into the database: then both are copied to a temporary folder and opened there."""
    wal = path.with_name(path.name + "-wal")
    with contextlib.ExitStack() as stack:
        if wal.is_file() and wal.stat().st_size > 0:
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="paradiag-db-")))
            for source in (path, wal):
                shutil.copyfile(source, scratch / source.name)
            path = scratch / path.name
        try:
            conn = sqlite3.connect(
                f"file:{path}?mode=ro{'' if path.parent != wal.parent else '&immutable=1'}", uri=True
            )
            stack.callback(conn.close)
            conn.text_factory = _text  # TEXT that is not UTF-8 is read, not fatal
            conn.execute("select count(*) from sqlite_master").fetchone()
        except _DB_ERRORS as exc:
            raise TraceError(shown, f"not a readable SQLite database ({exc})") from exc
        yield conn


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


# SQLite keeps any value in any column. Rows whose times are not integer ns in [0, 2**62) (or the digit strings
# PYTORCH_API stores) are skipped and counted, so that a damaged row costs that row, not the whole rank.
_TIME = (
    "(typeof({c}) = 'integer' and {c} between 0 and 4611686018427387903"
    " or typeof({c}) = 'text' and length({c}) between 1 and 19 and {c} not glob '*[^0-9]*'"
    " and cast({c} as integer) < 4611686018427387904)"
)
_INT_OR_NULL = "(typeof({c}) in ('integer', 'null'))"


def valid_rows(
    conn: sqlite3.Connection,
    shown: Path,
    table: str,
    rules: dict[str, str],
    warnings: list[str],
    alias: str = "",
) -> str:
    """The SQL condition that keeps the rows of ``table`` whose columns follow ``rules`` (column -> _TIME or
    _INT_OR_NULL); the rows it drops are counted in a warning."""
    prefix = f"{alias}." if alias else ""
    cond = " and ".join(rule.format(c=f"{prefix}{col}") for col, rule in rules.items())
    bad = query(conn, shown, f"select count(*) from {table} {alias} where not ({cond})")[0][0]
    if bad:
        warnings.append(
            f"{shown.name}: {table}: {bad} rows with a missing or malformed {' / '.join(rules)} were skipped"
        )
    return cond


def tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("select name from sqlite_master where type='table'")}


def query(conn: sqlite3.Connection, shown: Path, sql: str) -> list[tuple[Any, ...]]:
    try:
        return conn.execute(sql).fetchall()
    except _DB_ERRORS as exc:
        raise TraceError(shown, f"cannot read the database ({exc})") from exc


def parse(path: Path, root: Path | None = None, fmt: str = FORMAT) -> ParsedRank:
    """One rank folder of the db export -> canonical tables."""
    shown = common.shown_path(path, root)
    db = find_db(path)
    if db is None:
        raise TraceError(shown, f"no {common.OUTPUT_DIR}/ascend_pytorch_profiler_*.db")
    info = common.folder_info(path, root)
    db_shown = common.shown_path(db, root)
    warnings: list[str] = []
    with connect(db, db_shown) as conn:
        names = tables(conn)
        if not names & _EVENT_TABLES:
            empty = "the file is empty" if db.stat().st_size == 0 else "no profiler tables"
            raise TraceError(db_shown, f"{empty}: none of {', '.join(sorted(_EVENT_TABLES))}")
        strings = (
            dict(query(conn, db_shown, "select id, cast(value as text) from STRING_IDS"))
            if "STRING_IDS" in names
            else {}
        )
        device = _rank_info(conn, db_shown, names, info)
        cols = common.EventColumns()
        launch = _add_host(conn, db_shown, names, strings, cols, warnings)
        task_ok = valid_rows(conn, db_shown, "TASK", _TASK_RULES, warnings, "t") if "TASK" in names else ""
        op_connections, op_stream = _add_tasks(conn, db_shown, names, strings, cols, device, launch, task_ok)
        ops_block = len(cols.blocks)
        ops = _add_ops(conn, db_shown, names, strings, cols, device, op_stream, launch, info, warnings)
        comm_tasks = _comm_tasks(conn, db_shown, names, strings, ops, info.rank, device, task_ok)
        if len(cols.blocks) > ops_block:  # send/recv peers from their link-level tasks
            block = cols.blocks[ops_block]
            block["peer"] = common.p2p_peers(
                block["name"], block["collective"], block["group"], comm_tasks, info.rank, info.groups
            )
        kernels = _kernels(conn, db_shown, names, strings, info.rank, task_ok)
    if not cols.blocks:
        raise TraceError(db_shown, "no event with valid times in the database")
    del op_connections
    extra = _analysis(path / common.OUTPUT_DIR / "analysis.db", root, info, warnings)
    if comm_tasks.num_rows:
        extra["comm_tasks"] = comm_tasks
    if kernels.num_rows:
        extra["kernels"] = kernels
    table, steps = common.finish(cols, info.rank)
    return common.parsed_rank(shown, fmt, table, steps, info, device, warnings, extra)


def _rank_info(conn: sqlite3.Connection, shown: Path, names: set[str], info: common.FolderInfo) -> int:
    """Rank, device, host and the parallel layout the database records."""
    device = 0
    if "RANK_DEVICE_MAP" in names:
        rows = query(conn, shown, "select rankId, deviceId from RANK_DEVICE_MAP")
        if rows:
            rank, device = rows[0]
            if info.rank is None:
                info.rank = common.whole(rank, 0, MAX_RANK)
    if "HOST_INFO" in names:
        rows = query(conn, shown, "select hostName from HOST_INFO")
        if rows and rows[0][0]:
            info.host = info.host or str(rows[0][0])
    if "META_DATA" in names:
        meta: dict[str, Any] = {}
        for name, value in query(conn, shown, "select name, value from META_DATA"):
            if name in ("distributed_args", "parallel_group_info"):
                try:
                    meta[name] = json.loads(value)
                except (TypeError, ValueError, RecursionError):  # not JSON text, or nested too deeply
                    continue
        with common.shape_guard(shown, info.warnings, "the parallel layout is unknown"):
            common.apply_metadata(info, meta)
    return common.whole(device, 0, 127) or 0


def _enum(conn: sqlite3.Connection, shown: Path, names: set[str], table: str) -> dict[int, str]:
    return dict(query(conn, shown, f"select id, name from {table}")) if table in names else {}


def _add_host(
    conn: sqlite3.Connection,
    shown: Path,
    names: set[str],
    strings: dict[int, str],
    cols: common.EventColumns,
    warnings: list[str],
) -> dict[int, int]:
    """PYTORCH_API (times stored as TEXT) and CANN_API rows; returns connection id -> launch time."""
    api_type = _enum(conn, shown, names, "ENUM_API_TYPE")
    if "PYTORCH_API" in names:
        ok = valid_rows(
            conn,
            shown,
            "PYTORCH_API",
            {"startNs": _TIME, "endNs": _TIME, "globalTid": _INT_OR_NULL},
            warnings,
        )
        rows = query(conn, shown, f"select startNs, endNs, globalTid, name, type from PYTORCH_API where {ok}")
        start, dur, track, kind, cat, name = [], [], [], [], [], []
        for s, e, tid, n, t in rows:
            text = strings.get(n, "")
            s, e = int(s), int(e)
            start.append(s)
            dur.append(max(e - s, 0))
            track.append((tid or 0) & 0xFFFFFFFF)
            name.append(text)
            kind.append(schema.ANNOTATION if common.STEP_NAME.match(text) else schema.HOST)
            if t == 50002:  # the task queue: Enqueue / Dequeue@...
                cat.append("dequeue" if text.startswith("Dequeue") else "enqueue")
            else:
                cat.append(_PYTORCH_CATEGORY.get(t) or api_type.get(t, "python"))
        cols.add(device=-1, track=track, kind=kind, category=cat, name=name, start_ns=start, dur_ns=dur)
    launch: dict[int, int] = {}
    if "CANN_API" in names:
        rules = {"startNs": _TIME, "endNs": _TIME, "globalTid": _INT_OR_NULL, "connectionId": _INT_OR_NULL}
        ok = valid_rows(conn, shown, "CANN_API", rules, warnings)
        rows = query(
            conn,
            shown,
            f"select startNs, endNs, type, globalTid, connectionId, name from CANN_API where {ok}",
        )
        cat = [api_type.get(r[2], "cann") for r in rows]
        cols.add(
            device=-1, track=[(r[3] or 0) & 0xFFFFFFFF for r in rows], kind=schema.HOST, category=cat,
            name=[strings.get(r[5], "") for r in rows], start_ns=[r[0] for r in rows],
            dur_ns=[max(r[1] - r[0], 0) for r in rows], correlation=[-1 if r[4] is None else r[4] for r in rows],
        )  # fmt: skip
        launch = {r[4]: r[0] for r in rows if r[4] is not None}
    return launch


def _add_tasks(
    conn: sqlite3.Connection,
    shown: Path,
    names: set[str],
    strings: dict[int, str],
    cols: common.EventColumns,
    device: int,
    launch: dict[int, int],
    task_ok: str,
) -> tuple[set[int], dict[int, int]]:
    """Device tasks, without HCCL ops' tasks and without the wrapper task of a kernel that has a named one
    (``task_ok``: the SQL condition on TASK t that keeps rows with valid values)."""
    if "TASK" not in names:
        return set(), {}
    has_compute = "COMPUTE_TASK_INFO" in names
    info_join = "left join COMPUTE_TASK_INFO c on c.globalTaskId = t.globalTaskId" if has_compute else ""
    info_cols = "c.name, c.taskType" if has_compute else "null, null"
    sql = f"select t.startNs, t.endNs, t.streamId, t.connectionId, t.taskType, {info_cols} from TASK t {info_join}"
    rows = query(conn, shown, f"{sql} where {task_ok}")
    op_connections: set[int] = set()
    if "COMMUNICATION_OP" in names:
        op_connections = {r[0] for r in query(conn, shown, "select connectionId from COMMUNICATION_OP")}
    named = {r[3] for r in rows if r[5] is not None}
    start, dur, track, kind, cat, name, corr, when = [], [], [], [], [], [], [], []
    op_stream: dict[int, int] = {}
    for s, e, stream, cid, ttype, cname, ctype in rows:
        if cid in op_connections:
            op_stream.setdefault(cid, stream)
            continue
        if cname is None and cid in named:
            continue
        task_type = strings.get(ctype if ctype is not None else ttype, "")
        label = strings.get(cname, "") if cname is not None else task_type
        start.append(s)
        dur.append(max(e - s, 0))
        track.append(-1 if stream is None else stream)
        kind.append(schema.COMPUTE if cname is not None else common.task_kind(task_type, label))
        cat.append(task_type or "task")
        name.append(label)
        corr.append(cid if cid is not None else -1)
        when.append(launch.get(cid, -1))
    cols.add(
        device=device,
        track=track,
        kind=kind,
        category=cat,
        name=name,
        start_ns=start,
        dur_ns=dur,
        correlation=corr,
        launch_ns=when,
    )
    return op_connections, op_stream


_TASK_RULES = {"startNs": _TIME, "endNs": _TIME, "streamId": _INT_OR_NULL, "connectionId": _INT_OR_NULL}


def _add_ops(
    conn: sqlite3.Connection,
    shown: Path,
    names: set[str],
    strings: dict[int, str],
    cols: common.EventColumns,
    device: int,
    op_stream: dict[int, int],
    launch: dict[int, int],
    info: common.FolderInfo,
    warnings: list[str],
) -> dict[int, tuple[str, str]]:
    """HCCL ops (group id = the text export's hash of the group name); returns opId -> (op name, group id)."""
    if "COMMUNICATION_OP" not in names:
        return {}
    dtype = _enum(conn, shown, names, "ENUM_HCCL_DATA_TYPE")
    rules = {"startNs": _TIME, "endNs": _TIME, "connectionId": _INT_OR_NULL}
    ok = valid_rows(conn, shown, "COMMUNICATION_OP", rules, warnings)
    rows = query(
        conn,
        shown,
        f"select opName, startNs, endNs, connectionId, groupName, opId, dataType, count from COMMUNICATION_OP where {ok}",
    )
    ops: dict[int, tuple[str, str]] = {}
    start, dur, track, name, corr, when, coll, group, ranks, nbytes = [], [], [], [], [], [], [], [], [], []
    for op, s, e, cid, gname, op_id, dt, count in rows:
        text = strings.get(op, "")
        gid = common.group_hash(strings.get(gname, str(gname)))
        ops[op_id] = (text, gid)
        start.append(s)
        dur.append(max(e - s, 0))
        track.append(op_stream.get(cid, -1))
        name.append(text)
        corr.append(cid if cid is not None else -1)
        when.append(launch.get(cid, -1))
        coll.append(collective_from_kernel_name(text))
        group.append(gid)
        ranks.append(",".join(map(str, info.groups[gid].ranks)) if gid in info.groups else None)
        nbytes.append(common.collective_bytes(count, dtype.get(dt)))
    cols.add(
        device=device, track=track, kind=schema.COMMUNICATION, category="hccl_op", name=name, start_ns=start,
        dur_ns=dur, correlation=corr, launch_ns=when, collective=coll, group=group, group_ranks=ranks, bytes=nbytes,
    )  # fmt: skip
    return ops


def _comm_tasks(
    conn: sqlite3.Connection,
    shown: Path,
    names: set[str],
    strings: dict[int, str],
    ops: dict[int, tuple[str, str]],
    rank: int | None,
    device: int,
    task_ok: str,
) -> pa.Table:
    out: dict[str, list[Any]] = {f.name: [] for f in common.EXTRA_SCHEMAS["comm_tasks"]}
    if "COMMUNICATION_TASK_INFO" not in names or "TASK" not in names:
        return common.extra_table("comm_tasks", out)
    transport = _enum(conn, shown, names, "ENUM_HCCL_TRANSPORT_TYPE")
    link = _enum(conn, shown, names, "ENUM_HCCL_LINK_TYPE")
    rows = query(
        conn,
        shown,
        "select i.opId, i.planeId, i.name, t.startNs, t.endNs, i.srcRank, i.dstRank, i.transportType, i.linkType,"
        " i.size from COMMUNICATION_TASK_INFO i join TASK t on t.globalTaskId = i.globalTaskId"
        f" where {task_ok} order by t.startNs",
    )
    for op_id, plane, n, s, e, src, dst, tr, lk, size in rows:
        op_name, gid = ops.get(op_id, (None, None))
        d = max(e - s, 0)
        row = {
            "rank": -1 if rank is None else rank, "device": device, "group": gid, "op_name": op_name, "plane": _plane(plane),
            "name": strings.get(n, ""), "start_ns": s, "dur_ns": d, "src_rank": _rank(src), "dst_rank": _rank(dst),
            "transport": transport.get(tr), "link_type": link.get(lk), "bytes": size,
            "bandwidth_gbps": size / d if isinstance(size, int | float) and size and d else 0.0,
        }  # fmt: skip
        for col in out:
            out[col].append(row[col])
    return common.extra_table("comm_tasks", out)


_KERNEL_INFO = (
    "name", "opType", "taskType", "waitNs", "blockDim", "inputShapes", "inputDataTypes", "outputShapes", "outputDataTypes",
)  # fmt: skip


def columns(conn: sqlite3.Connection, table: str) -> set[str]:
    """The columns a table has in this schema version (they come and go between torch_npu releases)."""
    return {r[1] for r in conn.execute(f"pragma table_info({table})")}


def _plane(value: Any) -> int | None:
    """The plane id; None for the 32-bit "no value" marker (4294967295) that Level0 exports write."""
    return value if isinstance(value, int) and 0 <= value < 2**15 else None


def _rank(value: Any) -> int | None:
    return value if isinstance(value, int) and 0 <= value < common.NO_RANK else None


def _kernels(
    conn: sqlite3.Connection,
    shown: Path,
    names: set[str],
    strings: dict[int, str],
    rank: int | None,
    task_ok: str,
) -> pa.Table:
    """COMPUTE_TASK_INFO joined to TASK: the db's kernel_details."""
    out: dict[str, list[Any]] = {f.name: [] for f in common.EXTRA_SCHEMAS["kernels"]}
    if "COMPUTE_TASK_INFO" not in names or "TASK" not in names:
        return common.extra_table("kernels", out)
    have = columns(conn, "COMPUTE_TASK_INFO")
    picked = ", ".join(f"c.{c}" if c in have else "null" for c in _KERNEL_INFO)
    rows = query(
        conn,
        shown,
        f"select t.streamId, t.taskId, t.startNs, t.endNs, {picked}"
        " from COMPUTE_TASK_INFO c join TASK t on t.globalTaskId = c.globalTaskId"
        f" where {task_ok} order by t.startNs",
    )
    for stream, task, s, e, n, op, core, wait, block, ish, idt, osh, odt in rows:
        row = {
            "rank": -1 if rank is None else rank, "stream": stream, "task_id": task, "name": strings.get(n),
            "op_type": strings.get(op), "accelerator_core": strings.get(core), "start_ns": s, "dur_ns": e - s,
            "wait_ns": wait, "block_dim": block, "input_shapes": strings.get(ish), "input_dtypes": strings.get(idt),
            "output_shapes": strings.get(osh), "output_dtypes": strings.get(odt),
        }  # fmt: skip
        for col in out:
            out[col].append(row.get(col))
    return common.extra_table("kernels", out)


def _analysis(
    path: Path, root: Path | None, info: common.FolderInfo, warnings: list[str]
) -> dict[str, pa.Table]:
    """analysis.db: the producer's step breakdown and communication analysis (times in ms / us there)."""
    extra: dict[str, pa.Table] = {}
    if not path.is_file():
        warnings.append(common.level0_note(info.level))
        return extra
    shown = common.shown_path(path, root)
    rank = -1 if info.rank is None else info.rank
    try:
        with connect(path, shown) as conn:
            names = tables(conn)
            if "StepTraceTime" in names:
                extra["step_trace"] = _step_trace(conn, shown, rank)
            if "CommAnalyzerTime" in names:
                extra["comm_ops"] = _comm_ops(conn, shown, rank)
            if "CommAnalyzerBandwidth" in names:
                extra["comm_bandwidth"] = _bandwidth(conn, shown, rank)
            if "CommAnalyzerMatrix" in names:
                extra["links"] = _links(conn, shown, rank, info)
    except TraceError as exc:
        warnings.append(str(exc))
    if "comm_ops" not in extra:
        warnings.append(common.level0_note(info.level))
    return extra


def _step_trace(conn: sqlite3.Connection, shown: Path, rank: int) -> pa.Table:
    cols = list(common.STEP_TRACE_COLUMNS.values())
    sql_cols = ", ".join(c.removesuffix("_ns").replace("_exclude_", "_and_exclude_") for c in cols)
    out: dict[str, list[Any]] = {"rank": [], "step": [], **{c: [] for c in cols}}
    for row in query(conn, shown, f"select step, {sql_cols} from StepTraceTime"):
        out["rank"].append(rank)
        out["step"].append(common.step_number(row[0]))
        for col, value in zip(cols, row[1:], strict=True):
            out[col].append(common.us_to_ns_value(value))
    return common.extra_table("step_trace", out)


def _comm_ops(conn: sqlite3.Connection, shown: Path, rank: int) -> pa.Table:
    out: dict[str, list[Any]] = {f.name: [] for f in common.EXTRA_SCHEMAS["comm_ops"]}
    sql = (
        "select hccl_op_name, group_name, start_timestamp, elapse_time, transit_time, wait_time, synchronization_time,"
        " idle_time, step, type from CommAnalyzerTime"
    )
    for op, group, start, *times, step, kind in query(conn, shown, sql):
        if str(op).startswith("Total Op Info"):
            continue
        elapse, transit, wait, sync, idle = (common.ms_to_ns(t) for t in times)
        row = {
            "rank": rank, "step": common.step_number(step), "op_name": op, "group": str(group), "p2p": kind == "p2p",
            "start_ns": common.us_to_ns_value(start), "elapse_ns": elapse, "transit_ns": transit, "wait_ns": wait,
            "synchronization_ns": sync, "idle_ns": idle, "wait_ratio": _ratio(wait, transit),
            "synchronization_ratio": _ratio(sync, transit),
        }  # fmt: skip
        for col in out:
            out[col].append(row[col])
    return common.extra_table("comm_ops", out)


def _ratio(part: int | None, transit: int | None) -> float | None:
    """Wait (or synchronization) / (itself + transit), 4 dp, as communication.json writes it."""
    if part is None or transit is None or part + transit == 0:
        return 0.0 if part is not None and transit is not None else None
    return round(part / (part + transit), 4)


def _bandwidth(conn: sqlite3.Connection, shown: Path, rank: int) -> pa.Table:
    """One row per (op, link type): the table repeats the totals once per packet size."""
    out: dict[str, list[Any]] = {f.name: [] for f in common.EXTRA_SCHEMAS["comm_bandwidth"]}
    sql = (
        "select hccl_op_name, group_name, transport_type, transit_size, transit_time, bandwidth, large_packet_ratio,"
        " step from CommAnalyzerBandwidth"
    )
    seen: set[tuple[Any, ...]] = set()
    for op, group, link, size, ttime, bw, large, step in query(conn, shown, sql):
        key = (op, group, link, step)
        if key in seen or not size or str(op).startswith("Total Op Info"):
            continue
        seen.add(key)
        row = {
            "rank": rank, "step": common.step_number(step), "op_name": op, "group": str(group), "link_type": link,
            "transit_bytes": common.scaled(size, 1e6), "transit_ns": common.ms_to_ns(ttime), "bandwidth_gbps": bw,
            "large_packet_ratio": large,
        }  # fmt: skip
        for col in out:
            out[col].append(row[col])
    return common.extra_table("comm_bandwidth", out)


def _links(conn: sqlite3.Connection, shown: Path, rank: int, info: common.FolderInfo) -> pa.Table:
    out: dict[str, list[Any]] = {f.name: [] for f in common.EXTRA_SCHEMAS["links"]}
    sql = (
        "select hccl_op_name, group_name, src_rank, dst_rank, transport_type, transit_size, transit_time, bandwidth,"
        " step, op_name from CommAnalyzerMatrix"
    )
    for head, group, src, dst, transport, size, ttime, bw, step, op_name in query(conn, shown, sql):
        op_type, _, instance = str(head).rpartition("-")
        g = info.groups.get(str(group))
        s, d = common.whole(src, 0, MAX_RANK), common.whole(dst, 0, MAX_RANK)
        if s is None or d is None:
            continue  # a damaged row: no link to draw
        info.group_sizes[str(group)] = max(info.group_sizes.get(str(group), 0), s + 1, d + 1)
        row = {
            "rank": rank, "step": common.step_number(step), "group": str(group), "op_type": op_type or head,
            "instance": instance, "op_name": op_name, "src_rank": s, "dst_rank": d,
            "src_global": common.global_rank(g, s), "dst_global": common.global_rank(g, d), "transport": transport,
            "bytes": common.scaled(size or 0, 1e6), "transit_ns": common.ms_to_ns(ttime), "bandwidth_gbps": bw,
        }  # fmt: skip
        for col in out:
            out[col].append(row[col])
    return common.extra_table("links", out)
