"""Ascend PyTorch Profiler text export (``ASCEND_PROFILER_OUTPUT/trace_view.json`` + CSV/JSON) -> canonical tables.

trace_view.json is a Chrome-trace JSON array whose ``ts`` is a *string* of epoch microseconds with three
decimals: it is decoded with typed msgspec Structs and converted to exact integer nanoseconds (a float64 would
lose the last digits). Processes: ``Python`` (host ops), ``CANN`` (runtime APIs), ``Ascend Hardware`` (device
tasks, one thread per stream), ``HCCL`` (``Group N Communication`` op-level collectives, ``Plane k`` link-level
tasks), ``Overlap Analysis`` (derived; not kept: paradiag recomputes it). Format notes: ../shared/formats/ascend.md.
"""

from __future__ import annotations

import bisect
import csv
import io
import re
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from paradiag import schema
from paradiag.parsers import ascend_common as common
from paradiag.parsers.base import Group, ParsedRank, TraceError, collective_from_kernel_name

FORMAT = "ascend_text"
TRACE_FILE = "trace_view.json"

Value = int | float | str | None


class Args(msgspec.Struct, gc=False, frozen=True):
    """The args paradiag keeps, over all processes; call stacks and shapes are skipped by the decoder."""

    name: str | None = None  # metadata: process / thread name
    labels: str | None = None
    level: str | None = None  # CANN: acl, node, runtime, hccl, model
    connection_id: Value = None
    task_type: str | None = msgspec.field(default=None, name="Task Type")
    data_type: str | None = None  # HCCL op
    count: Value = None
    plane_task_type: str | None = msgspec.field(default=None, name="task type")
    stream: Value = msgspec.field(default=None, name="stream id")
    src_rank: Value = msgspec.field(default=None, name="src rank")
    dst_rank: Value = msgspec.field(default=None, name="dst rank")
    transport: str | None = msgspec.field(default=None, name="transport type")
    size: Value = msgspec.field(default=None, name="size(Byte)")
    link_type: str | None = msgspec.field(default=None, name="link type")


NO_ARGS = Args()


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    name: str = ""
    cat: str | None = None
    pid: Value = None
    tid: Value = None
    ts: Value = None
    dur: Value = None
    id: Value = None
    args: Args = NO_ARGS


_DECODER = msgspec.json.Decoder(list[Event])
_GROUP_THREAD = re.compile(r"^Group (\S+) Communication$")
_PLANE_THREAD = re.compile(r"^Plane (\d+)$")
_NPU_LABEL = re.compile(r"^NPU\s*(\d+)$")


def ts_ns(value: Value) -> int | None:
    """A trace ``ts`` (string "1736408883704643.212", or a number) in integer ns, exactly."""
    if isinstance(value, str):
        whole, _, frac = value.strip().partition(".")
        try:
            return int(whole) * 1000 + (int((frac + "000")[:3]) if frac else 0)
        except ValueError:
            return None
    if isinstance(value, int):
        return value * 1000
    if isinstance(value, float):
        return round(value * 1000)
    return None


def dur_ns(value: Value) -> int | None:
    if isinstance(value, int | float):
        return round(value * 1000)
    if isinstance(value, str):
        try:
            return round(float(value) * 1000)
        except ValueError:
            return None
    return None


def as_int(value: Value) -> int | None:
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value == value:
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


def decode_trace(path: Path, shown: Path) -> list[Event]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceError(shown, f"cannot read the file ({exc})") from exc
    if not data.strip():
        raise TraceError(shown, "the file is empty")
    try:
        return _DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise TraceError(shown, f"not an Ascend trace_view: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise TraceError(shown, f"truncated or invalid JSON ({exc})") from exc


class Layout:
    """Which pid is which process, and which thread is an HCCL group or plane."""

    def __init__(self, events: list[Event]) -> None:
        self.process: dict[Value, str] = {}
        self.threads: dict[tuple[Value, Value], str] = {}
        self.device: int | None = None
        for e in events:
            if e.ph != "M":
                continue
            if e.name == "process_name" and e.args.name:
                self.process[e.pid] = e.args.name
            elif e.name == "thread_name" and e.args.name:
                self.threads[(e.pid, e.tid)] = e.args.name
            elif e.name == "process_labels" and e.args.labels:
                match = _NPU_LABEL.match(e.args.labels.strip())
                if match:
                    self.device = int(match.group(1))

    def pids(self, name: str) -> set[Value]:
        return {pid for pid, n in self.process.items() if n == name}


def read_events(
    events: list[Event], device: int
) -> tuple[common.EventColumns, list[dict[str, Any]], list[str]]:
    """Canonical event blocks, the HCCL plane tasks (for the comm_tasks table) and warnings."""
    layout = Layout(events)
    python, cann = layout.pids("Python"), layout.pids("CANN")
    hardware, hccl = layout.pids("Ascend Hardware"), layout.pids("HCCL")
    host_x: list[Event] = []
    cann_x: list[Event] = []
    tasks: list[Event] = []
    ops: list[Event] = []
    planes: list[Event] = []
    flows_s: dict[tuple[Any, Value], int] = {}
    flows_f: list[Event] = []
    for e in events:
        ph = e.ph
        if ph == "X":
            pid = e.pid
            if pid in hardware:
                tasks.append(e)
            elif pid in python:
                host_x.append(e)
            elif pid in cann:
                cann_x.append(e)
            elif pid in hccl:
                thread = layout.threads.get((pid, e.tid), "")
                if _GROUP_THREAD.match(thread):
                    ops.append(e)
                elif _PLANE_THREAD.match(thread):
                    planes.append(e)
        elif ph == "s":
            t = ts_ns(e.ts)
            if t is not None:
                flows_s[(e.cat, e.id)] = t
        elif ph == "f":
            flows_f.append(e)
    launch_of = _launch_times(cann_x, flows_s, flows_f)
    cols = common.EventColumns()
    warnings: list[str] = []
    bad = _add_host(cols, host_x, cann_x)
    op_connections = {as_int(e.args.connection_id) for e in ops}
    op_stream, bad_tasks = _add_tasks(cols, tasks, device, op_connections, launch_of)
    bad += bad_tasks
    bad += _add_ops(cols, ops, layout, device, op_stream, launch_of)
    if bad:
        warnings.append(f"{bad} events with a missing or negative timestamp or duration were skipped")
    plane_rows = _plane_rows(planes, layout, ops, op_stream)
    return cols, plane_rows, warnings


def _launch_times(
    cann_x: list[Event], flows_s: dict[tuple[Any, Value], int], flows_f: list[Event]
) -> dict[Any, int]:
    """Host launch time of device work, keyed by connection id (CANN ``Node@launch``) and, where CANN data is
    absent (Level0), by (pid, tid, ts) of the flow arrow that lands on the device task."""
    launch: dict[Any, int] = {}
    for e in cann_x:
        cid = as_int(e.args.connection_id)
        t = ts_ns(e.ts)
        if cid is not None and t is not None and (e.args.level == "node" or cid not in launch):
            launch[cid] = t
    for e in flows_f:
        src = flows_s.get((e.cat, e.id))
        t = ts_ns(e.ts)
        if src is not None and t is not None:
            launch.setdefault((e.pid, e.tid, t), src)
    return launch


def _add_host(cols: common.EventColumns, host_x: list[Event], cann_x: list[Event]) -> int:
    """Python ops (category = their cat; ProfilerStep#N is an annotation) and CANN APIs (category = level,
    name without the ``AscendCL@`` / ``Node@`` prefix, as the db export spells it)."""
    bad = 0
    for block, is_cann in ((host_x, False), (cann_x, True)):
        start, dur, track, kind, cat, name, corr = [], [], [], [], [], [], []
        for e in block:
            t, d = ts_ns(e.ts), dur_ns(e.dur)
            if t is None or d is None or t < 0 or d < 0:
                bad += 1
                continue
            start.append(t)
            dur.append(d)
            track.append(as_int(e.tid) or 0)
            if is_cann:
                name.append(e.name.partition("@")[2] or e.name)
                cat.append(e.args.level or "cann")
                kind.append(schema.HOST)
                corr.append(as_int(e.args.connection_id) or -1)
            else:
                name.append(e.name)
                cat.append(e.cat or "python")
                kind.append(schema.ANNOTATION if common.STEP_NAME.match(e.name) else schema.HOST)
                corr.append(-1)
        cols.add(
            device=-1,
            track=track,
            kind=kind,
            category=cat,
            name=name,
            start_ns=start,
            dur_ns=dur,
            correlation=corr,
        )
    return bad


def _add_tasks(
    cols: common.EventColumns,
    tasks: list[Event],
    device: int,
    op_connections: set[int | None],
    launch_of: dict[Any, int],
) -> tuple[dict[int, int], int]:
    """Device tasks (track = stream). Tasks that belong to an HCCL op (same connection id) are left out: the op
    is the communication event, and its link-level detail is in the plane tasks."""
    start, dur, track, kind, cat, name, corr, launch = [], [], [], [], [], [], [], []
    op_stream: dict[int, int] = {}
    bad = 0
    for e in tasks:
        cid = as_int(e.args.connection_id)
        stream = as_int(e.tid) or 0
        if cid is not None and cid in op_connections:
            op_stream.setdefault(cid, stream)
            continue
        t, d = ts_ns(e.ts), dur_ns(e.dur)
        if t is None or d is None or t < 0 or d < 0:
            bad += 1
            continue
        task_type = e.args.task_type or ""
        start.append(t)
        dur.append(d)
        track.append(stream)
        kind.append(common.task_kind(task_type, e.name))
        cat.append(task_type or "task")
        name.append(e.name)
        corr.append(cid if cid is not None else -1)
        launch.append(launch_of.get(cid, launch_of.get((e.pid, e.tid, t), -1)))
    cols.add(
        device=device,
        track=track,
        kind=kind,
        category=cat,
        name=name,
        start_ns=start,
        dur_ns=dur,
        correlation=corr,
        launch_ns=launch,
    )
    return op_stream, bad


def _add_ops(
    cols: common.EventColumns,
    ops: list[Event],
    layout: Layout,
    device: int,
    op_stream: dict[int, int],
    launch_of: dict[Any, int],
) -> int:
    """HCCL op-level collectives; the group is filled in later from communication.json (op name -> group)."""
    start, dur, track, name, corr, launch, coll, group, nbytes = [], [], [], [], [], [], [], [], []
    bad = 0
    for e in ops:
        t, d = ts_ns(e.ts), dur_ns(e.dur)
        if t is None or d is None or t < 0 or d < 0:
            bad += 1
            continue
        cid = as_int(e.args.connection_id)
        start.append(t)
        dur.append(d)
        track.append(op_stream.get(cid, as_int(e.tid) or 0) if cid is not None else as_int(e.tid) or 0)
        name.append(e.name)
        corr.append(cid if cid is not None else -1)
        launch.append(launch_of.get(cid, launch_of.get((e.pid, e.tid, t), -1)))
        coll.append(collective_from_kernel_name(e.name))
        thread = _GROUP_THREAD.match(layout.threads.get((e.pid, e.tid), ""))
        group.append(f"Group {thread.group(1)}" if thread else None)
        nbytes.append(common.collective_bytes(e.args.count, e.args.data_type))
    cols.add(
        device=device, track=track, kind=schema.COMMUNICATION, category="hccl_op", name=name, start_ns=start,
        dur_ns=dur, correlation=corr, launch_ns=launch, collective=coll, group=group, bytes=nbytes,
    )  # fmt: skip
    return bad


def _plane_rows(
    planes: list[Event], layout: Layout, ops: list[Event], op_stream: dict[int, int]
) -> list[dict[str, Any]]:
    """Link-level tasks, each tied to the op running on its stream at its start time."""
    spans: dict[int, list[tuple[int, int, str]]] = {}
    for e in ops:
        t, d, cid = ts_ns(e.ts), dur_ns(e.dur), as_int(e.args.connection_id)
        if t is not None and d is not None:
            stream = op_stream.get(cid, -1) if cid is not None else -1
            spans.setdefault(stream, []).append((t, t + d, e.name))
    for v in spans.values():
        v.sort()
    starts = {s: [a for a, _, _ in v] for s, v in spans.items()}
    rows = []
    for e in planes:
        t, d = ts_ns(e.ts), dur_ns(e.dur)
        if t is None or d is None:
            continue
        arg_stream = as_int(e.args.stream)
        stream = -1 if arg_stream is None else arg_stream
        op = None
        cands = spans.get(stream) or []
        i = bisect.bisect_right(starts.get(stream, []), t) - 1
        if i >= 0 and t <= cands[i][1]:
            op = cands[i][2]
        plane = _PLANE_THREAD.match(layout.threads.get((e.pid, e.tid), ""))
        rows.append(
            {
                "op_name": op, "plane": int(plane.group(1)) if plane else None, "name": e.name, "start_ns": t,
                "dur_ns": d, "src_rank": _rank(e.args.src_rank), "dst_rank": _rank(e.args.dst_rank),
                "transport": e.args.transport, "link_type": e.args.link_type, "bytes": as_int(e.args.size),
            }
        )  # fmt: skip
    return rows


def _rank(value: Value) -> int | None:
    r = as_int(value)
    return None if r is None or r < 0 or r >= common.NO_RANK else r


# ---- CSV and JSON deliverables -------------------------------------------------------------------------------


def read_csv(path: Path, shown: Path, warnings: list[str]) -> list[dict[str, str]]:
    """Rows keyed by header name (headers and cells stripped of the tabs torch_npu appends for Excel); a
    truncated last row is dropped with a warning."""
    try:
        text = path.read_text(encoding="utf-8-sig", errors="replace")
    except OSError as exc:
        warnings.append(f"{shown}: cannot read the file ({exc})")
        return []
    reader = csv.reader(io.StringIO(text))
    header = [h.strip() for h in next(reader, [])]
    if not header:
        warnings.append(f"{shown}: empty file")
        return []
    rows = []
    for cells in reader:
        if not cells:
            continue
        if len(cells) != len(header):
            warnings.append(
                f"{shown}: truncated or malformed row {reader.line_num} ({len(cells)} of {len(header)} fields); skipped"
            )
            continue
        rows.append({h: c.strip() for h, c in zip(header, cells, strict=True)})
    if text and not text.endswith(("\n", "\r")) and rows and len(rows[-1]) == len(header):
        pass  # a last line without a newline is normal when it is complete
    return rows


def num(text: str | None) -> float | None:
    if text is None or text in ("", "N/A"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def us_text_ns(text: str | None) -> int | None:
    """A CSV microsecond cell (``"1736408883704643.212"``) in exact ns."""
    if text is None or text in ("", "N/A"):
        return None
    return ts_ns(text) if re.fullmatch(r"-?\d+(\.\d+)?", text) else None


def step_trace_table(rows: list[dict[str, str]], rank: int) -> pa.Table:
    out: dict[str, list[Any]] = {
        "rank": [],
        "step": [],
        **{c: [] for c in common.STEP_TRACE_COLUMNS.values()},
    }
    for row in rows:
        step = row.get("Step")
        out["rank"].append(rank)
        out["step"].append(int(num(step) or -1) if step not in (None, "") else -1)
        for title, col in common.STEP_TRACE_COLUMNS.items():
            value = num(row.get(title))
            out[col].append(None if value is None else round(value * 1000))
    return common.extra_table("step_trace", out)


_KERNEL_COLUMNS = {
    "Step Id": "step", "Stream ID": "stream", "Task ID": "task_id", "Name": "name", "Type": "op_type",
    "Accelerator Core": "accelerator_core", "Start Time(us)": "start_ns", "Duration(us)": "dur_ns",
    "Wait Time(us)": "wait_ns", "Block Dim": "block_dim", "Block Num": "block_dim", "Input Shapes": "input_shapes",
    "Input Data Types": "input_dtypes", "Output Shapes": "output_shapes", "Output Data Types": "output_dtypes",
}  # fmt: skip
_INT_KERNEL = {"step", "stream", "task_id", "block_dim"}
_NS_KERNEL = {"start_ns", "dur_ns", "wait_ns"}


def kernels_table(rows: list[dict[str, str]], rank: int) -> pa.Table:
    """kernel_details.csv mapped by column name (the set of columns depends on version and level)."""
    out: dict[str, list[Any]] = {"rank": [rank] * len(rows)}
    present = {title: col for title, col in _KERNEL_COLUMNS.items() if rows and title in rows[0]}
    for title, col in present.items():
        values = [row[title] for row in rows]
        if col in _INT_KERNEL:
            out[col] = [int(v) if (v := num(x)) is not None else None for x in values]
        elif col in _NS_KERNEL:
            out[col] = [us_text_ns(x) for x in values]
        else:
            out[col] = [None if x in ("", "N/A") else x.strip('"') for x in values]
    return common.extra_table("kernels", out)


def op_statistic_table(rows: list[dict[str, str]], rank: int) -> pa.Table:
    cols = {
        "Count": "count",
        "Total Time(us)": "total_ns",
        "Min Time(us)": "min_ns",
        "Avg Time(us)": "avg_ns",
        "Max Time(us)": "max_ns",
    }
    out: dict[str, list[Any]] = {
        "rank": [rank] * len(rows),
        "op_type": [r.get("OP Type") for r in rows],
        "core_type": [r.get("Core Type") for r in rows],
    }
    for title, col in cols.items():
        scale = 1 if col == "count" else 1000
        out[col] = [None if (v := num(r.get(title))) is None else round(v * scale) for r in rows]
    out["ratio"] = [num(r.get("Ratio(%)")) for r in rows]
    return common.extra_table("op_statistic", out)


def communication_tables(data: Any, rank: int) -> tuple[pa.Table, pa.Table, dict[str, str]]:
    """communication.json -> comm_ops and comm_bandwidth tables, and op name -> group id."""
    ops: dict[str, list[Any]] = {f.name: [] for f in common.EXTRA_SCHEMAS["comm_ops"]}
    bw: dict[str, list[Any]] = {f.name: [] for f in common.EXTRA_SCHEMAS["comm_bandwidth"]}
    op_group: dict[str, str] = {}
    for step_key, kinds in (data or {}).items():
        step = common.step_number(step_key)
        for kind_key in ("collective", "p2p"):
            for key, info in ((kinds or {}).get(kind_key) or {}).items():
                op_name, _, group = key.rpartition("@")
                if not op_name or op_name.startswith("Total Op Info") or not isinstance(info, dict):
                    continue
                op_group[op_name] = group
                t = info.get("Communication Time Info") or {}
                ops["rank"].append(rank)
                ops["step"].append(step)
                ops["op_name"].append(op_name)
                ops["group"].append(group)
                ops["p2p"].append(kind_key == "p2p")
                ops["start_ns"].append(common.us_to_ns_value(t.get("Start Timestamp(us)")))
                for title, col in (("Elapse", "elapse_ns"), ("Transit", "transit_ns"), ("Wait", "wait_ns"),
                                   ("Synchronization", "synchronization_ns"), ("Idle", "idle_ns")):  # fmt: skip
                    ops[col].append(common.ms_to_ns(t.get(f"{title} Time(ms)")))
                ops["wait_ratio"].append(t.get("Wait Time Ratio"))
                ops["synchronization_ratio"].append(t.get("Synchronization Time Ratio"))
                for link, b in (info.get("Communication Bandwidth Info") or {}).items():
                    if not isinstance(b, dict) or not b.get("Transit Size(MB)"):
                        continue
                    for col, value in (("rank", rank), ("step", step), ("op_name", op_name), ("group", group),
                                       ("link_type", link)):  # fmt: skip
                        bw[col].append(value)
                    bw["transit_bytes"].append(round(float(b["Transit Size(MB)"]) * 1e6))
                    bw["transit_ns"].append(common.ms_to_ns(b.get("Transit Time(ms)")))
                    bw["bandwidth_gbps"].append(b.get("Bandwidth(GB/s)"))
                    bw["large_packet_ratio"].append(b.get("Large Packet Ratio"))
    return common.extra_table("comm_ops", ops), common.extra_table("comm_bandwidth", bw), op_group


def links_table(data: Any, rank: int, groups: dict[str, Group]) -> tuple[pa.Table, dict[str, int]]:
    """communication_matrix.json -> links (group-local ranks as written, global ranks when the group is known),
    and the group size each group's local ranks imply."""
    out: dict[str, list[Any]] = {f.name: [] for f in common.EXTRA_SCHEMAS["links"]}
    sizes: dict[str, int] = {}
    for step_key, kinds in (data or {}).items():
        step = common.step_number(step_key)
        for kind_key in ("collective", "p2p"):
            for key, links in ((kinds or {}).get(kind_key) or {}).items():
                head, _, group = key.rpartition("@")
                op_type, _, instance = head.rpartition("-")
                if not isinstance(links, dict) or head.startswith("Total Op Info"):
                    continue
                for pair, info in links.items():
                    src, _, dst = pair.partition("-")
                    if not (src.isdigit() and dst.isdigit()) or not isinstance(info, dict):
                        continue
                    s, d = int(src), int(dst)
                    sizes[group] = max(sizes.get(group, 0), s + 1, d + 1)
                    g = groups.get(group)
                    row = {
                        "rank": rank, "step": step, "group": group, "op_type": op_type or head, "instance": instance,
                        "op_name": info.get("Op Name"), "src_rank": s, "dst_rank": d,
                        "src_global": common.global_rank(g, s), "dst_global": common.global_rank(g, d),
                        "transport": info.get("Transport Type"),
                        "bytes": round(float(info.get("Transit Size(MB)") or 0) * 1e6),
                        "transit_ns": common.ms_to_ns(info.get("Transit Time(ms)")),
                        "bandwidth_gbps": info.get("Bandwidth(GB/s)"),
                    }  # fmt: skip
                    for col, value in row.items():
                        out[col].append(value)
    return common.extra_table("links", out), sizes


def comm_tasks_table(
    rows: list[dict[str, Any]], rank: int, device: int, op_group: dict[str, str]
) -> pa.Table:
    out: dict[str, list[Any]] = {f.name: [] for f in common.EXTRA_SCHEMAS["comm_tasks"]}
    for row in rows:
        row = {**row, "rank": rank, "device": device, "group": op_group.get(row["op_name"] or "")}
        b, d = row["bytes"], row["dur_ns"]
        row["bandwidth_gbps"] = b / d if b and d else 0.0  # bytes per ns = GB/s
        for col in out:
            out[col].append(row.get(col))
    return common.extra_table("comm_tasks", out)


def first_device_id(output: Path) -> int | None:
    """The NPU id of a single-device rank, from the first data row of memory_record.csv / npu_module_mem.csv
    (``NPU:1``): trace_view labels the device process only "NPU"."""
    for name in ("memory_record.csv", "npu_module_mem.csv"):
        path = output / name
        if not path.is_file():
            continue
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            f.readline()
            match = re.search(r"NPU:(\d+)", f.readline())
        if match:
            return int(match.group(1))
    return None


def np_int(values: list[Any]) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def detect(path: Path) -> bool:
    """A rank folder whose text export is present."""
    return (path / common.OUTPUT_DIR / TRACE_FILE).is_file()


def parse(path: Path, root: Path | None = None, fmt: str = FORMAT) -> ParsedRank:
    """One ``*_ascend_pt`` (or ``*_ascend_ms``) rank folder of the text export -> canonical tables."""
    shown = common.shown_path(path, root)
    output = path / common.OUTPUT_DIR
    if not output.is_dir():
        raise TraceError(
            shown, f"no {common.OUTPUT_DIR} folder: the profiler's offline parsing did not run for this rank"
        )
    trace = output / TRACE_FILE
    if not trace.is_file():
        raise TraceError(shown / common.OUTPUT_DIR, f"no {TRACE_FILE}")
    info = common.folder_info(path, root)
    events = decode_trace(trace, shown / common.OUTPUT_DIR / TRACE_FILE)
    layout_device = Layout(events).device
    device = layout_device if layout_device is not None else first_device_id(output)
    cols, plane_rows, warnings = read_events(events, 0 if device is None else device)
    del events
    rank = -1 if info.rank is None else info.rank
    extra, op_group = _deliverables(output, shown / common.OUTPUT_DIR, rank, info, warnings)
    _name_groups(cols, op_group, info.groups)
    if plane_rows:
        extra["comm_tasks"] = comm_tasks_table(plane_rows, rank, 0 if device is None else device, op_group)
    table, steps = common.finish(cols, info.rank)
    return common.parsed_rank(shown, fmt, table, steps, info, device, warnings, extra)


def _deliverables(
    output: Path, shown: Path, rank: int, info: common.FolderInfo, warnings: list[str]
) -> tuple[dict[str, pa.Table], dict[str, str]]:
    """The CSV/JSON files next to trace_view.json: each one that is missing or broken costs only its own table."""
    extra: dict[str, pa.Table] = {}
    csvs = (("step_trace_time.csv", "step_trace", step_trace_table), ("kernel_details.csv", "kernels", kernels_table),
            ("op_statistic.csv", "op_statistic", op_statistic_table))  # fmt: skip
    for file, key, build in csvs:
        if (output / file).is_file():
            rows = read_csv(output / file, shown / file, warnings)
            if rows:
                extra[key] = build(rows, rank)
    op_group: dict[str, str] = {}
    comm = output / "communication.json"
    matrix = output / "communication_matrix.json"
    if not comm.is_file() and not matrix.is_file():
        warnings.append(common.level0_note(info.level))
    for path, key in ((comm, "comm_ops"), (matrix, "links")):
        if not path.is_file():
            continue
        try:
            data = common.read_json_file(path, shown / path.name)
        except TraceError as exc:
            warnings.append(str(exc))
            continue
        if key == "comm_ops":
            extra["comm_ops"], extra["comm_bandwidth"], op_group = communication_tables(data, rank)
        else:
            extra["links"], sizes = links_table(data, rank, info.groups)
            for gid, size in sizes.items():
                info.group_sizes.setdefault(gid, size)
    return extra, op_group


def _name_groups(cols: common.EventColumns, op_group: dict[str, str], groups: dict[str, Group]) -> None:
    """Give each HCCL op the group id communication.json names for it (the thread name "Group N" otherwise),
    and the group's global ranks when profiler_metadata.json lists them."""
    for block in cols.blocks:
        if block["kind"] and block["kind"][0] == schema.COMMUNICATION:
            block["group"] = [op_group.get(n, g) for n, g in zip(block["name"], block["group"], strict=True)]
            block["group_ranks"] = [
                ",".join(map(str, groups[g].ranks)) if g in groups else None for g in block["group"]
            ]
