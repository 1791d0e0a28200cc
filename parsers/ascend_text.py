"""Ascend PyTorch Profiler text export (``ASCEND_PROFILER_OUTPUT/trace_view.json`` + CSV/JSON) -> canonical tables.

The timeline (trace_view.json) is streamed into columns by :mod:`ascend_trace` and turned into canonical events by
:mod:`ascend_timeline`; this module reads the CSV/JSON deliverables beside it (with Arrow's CSV reader) and puts
the rank together. Format notes: ../shared/formats/ascend.md.
"""

from __future__ import annotations

import codecs
import csv
import io
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from paradiag.parsers import ascend_common as common
from paradiag.parsers import ascend_timeline, ascend_trace
from paradiag.parsers.ascend_trace import ts_ns
from paradiag.parsers.base import Group, ParsedRank, TraceError

FORMAT = "ascend_text"
TRACE_FILE = "trace_view.json"
_NUMBER = r"^\s*-?\d+(\.\d*)?([eE][-+]?\d+)?\s*$"

__all__ = ["FORMAT", "detect", "parse", "read_csv", "read_csv_table", "ts_ns"]


# ---- CSV and JSON deliverables -------------------------------------------------------------------------------


def read_csv_table(
    path: Path, shown: Path, warnings: list[str], columns: Iterable[str] | None = None
) -> pa.Table | None:
    """The CSV as a table of string columns named by their (stripped) headers, cells stripped of the tabs
    torch_npu appends for Excel; a truncated or malformed row is dropped with a warning. Arrow's reader, with
    the Python one as the fallback for what it refuses (a quote left open, invalid UTF-8, duplicate headers).
    ``columns``: read only these (those present), e.g. 15 of kernel_details.csv's 46."""
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            header = next(csv.reader([f.readline()]), [])
    except OSError as exc:
        warnings.append(f"{shown}: cannot read the file ({exc})")
        return None
    except csv.Error as exc:
        warnings.append(f"{shown}: malformed CSV header ({exc}); skipped")
        return None
    if not [h for h in header if h.strip()]:
        warnings.append(f"{shown}: empty file")
        return None
    skipped: list[str] = []

    def skip(row: Any) -> str:
        where = f"row {row.number}" if row.number is not None else "a row"
        skipped.append(
            f"{shown}: truncated or malformed {where} ({row.actual_columns} of {row.expected_columns} fields); skipped"
        )
        return "skip"

    names = [h.strip() for h in header]
    wanted = [n for n in names if columns is None or n in set(columns)]
    if not _is_utf8(path):  # Arrow cannot hand a row of invalid UTF-8 to the handler below (it fails inside)
        return _python_csv(path, shown, warnings)
    try:
        table = pacsv.read_csv(
            path,
            read_options=pacsv.ReadOptions(use_threads=False, column_names=names, skip_rows=1),
            parse_options=pacsv.ParseOptions(invalid_row_handler=skip),
            convert_options=pacsv.ConvertOptions(
                column_types=dict.fromkeys(names, pa.string()),
                strings_can_be_null=False,
                include_columns=wanted,
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowKeyError, ValueError):
        return _python_csv(path, shown, warnings)
    if len(set(names)) != len(names):
        return _python_csv(path, shown, warnings)
    warnings.extend(skipped)
    return pa.table({n: pc.utf8_trim(table.column(n), " \t\r\n") for n in wanted})


def _is_utf8(path: Path) -> bool:
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        with open(path, "rb") as f:
            while block := f.read(4 * 1024 * 1024):
                decoder.decode(block)
            decoder.decode(b"", final=True)
    except (UnicodeDecodeError, OSError):
        return False
    return True


def _python_csv(path: Path, shown: Path, warnings: list[str]) -> pa.Table | None:
    rows = read_csv(path, shown, warnings)
    if not rows:
        return None
    return pa.table({k: pa.array([r[k] for r in rows], type=pa.string()) for k in rows[0]})


def read_csv(path: Path, shown: Path, warnings: list[str]) -> list[dict[str, str]]:
    """Rows keyed by header name (Python's csv module: the fallback reader, and for small files)."""
    try:
        text = path.read_text(encoding="utf-8-sig", errors="replace")
    except OSError as exc:
        warnings.append(f"{shown}: cannot read the file ({exc})")
        return []
    reader = csv.reader(io.StringIO(text))
    try:
        header = [h.strip() for h in next(reader, [])]
    except csv.Error as exc:  # a header cell over the csv module's size limit
        warnings.append(f"{shown}: malformed CSV header ({exc}); skipped")
        return []
    if not header:
        warnings.append(f"{shown}: empty file")
        return []
    rows = []
    for cells in _rows(reader, shown, warnings):
        if not cells:
            continue
        if len(cells) != len(header):
            warnings.append(
                f"{shown}: truncated or malformed row {reader.line_num} ({len(cells)} of {len(header)} fields); skipped"
            )
            continue
        rows.append({h: c.strip() for h, c in zip(header, cells, strict=True)})
    return rows


def _rows(reader: Any, shown: Path, warnings: list[str]) -> Iterator[list[str]]:
    """The reader's rows up to the first it cannot read (a field over the csv module's size limit)."""
    try:
        yield from reader
    except csv.Error as exc:
        warnings.append(
            f"{shown}: malformed CSV at line {reader.line_num} ({exc}); the rest of the file was skipped"
        )


def number_column(text: pa.Array) -> pa.Array:
    """Numbers written as text -> float64; "", "N/A" and anything else -> null."""
    ok = pc.match_substring_regex(text, _NUMBER)
    return pc.cast(pc.if_else(ok, text, pa.scalar(None, pa.string())), pa.float64())


def int_text_column(text: pa.Array) -> pa.Array:
    """Integers written as text (or as "12.0") -> int64, truncated as int(float(x)); others -> null."""
    return whole_int64(pc.trunc(number_column(text)))


def ns_text_column(text: pa.Array, scale: int = 1000) -> pa.Array:
    """Microseconds as text -> exact int64 ns (``scale`` 1000); ``scale`` 1 for plain integers."""
    if scale == 1000:
        return ascend_trace.us_text_to_ns(text)
    return whole_int64(pc.round(pc.multiply(number_column(text), float(scale))))


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


def _column(table: pa.Table, title: str) -> pa.Array:
    if title in table.column_names:
        return table.column(title).combine_chunks()
    return pa.nulls(table.num_rows, pa.string())


def _round_ns(values: pa.Array, scale: float) -> pa.Array:
    return whole_int64(pc.round(pc.multiply(values, scale), round_mode="half_to_even"))


def whole_int64(values: pa.Array) -> pa.Array:
    """Whole float values as int64; beyond 2**62 (a damaged cell) they are null, not an error."""
    in_range = pc.less(pc.abs(values), 2.0**62)
    return pc.cast(pc.if_else(in_range, values, pa.scalar(None, values.type)), pa.int64())


def step_trace_table(table: pa.Table, rank: int) -> pa.Table:
    out: dict[str, Any] = {
        "rank": pa.repeat(pa.scalar(rank, pa.int32()), table.num_rows),
        "step": int_text_column(_column(table, "Step")).fill_null(-1),
    }
    for title, col in common.STEP_TRACE_COLUMNS.items():
        out[col] = _round_ns(number_column(_column(table, title)), 1000.0)
    return common.extra_table("step_trace", out)


_KERNEL_COLUMNS = {
    "Step Id": "step", "Stream ID": "stream", "Task ID": "task_id", "Name": "name", "Type": "op_type",
    "Accelerator Core": "accelerator_core", "Start Time(us)": "start_ns", "Duration(us)": "dur_ns",
    "Wait Time(us)": "wait_ns", "Block Dim": "block_dim", "Block Num": "block_dim", "Input Shapes": "input_shapes",
    "Input Data Types": "input_dtypes", "Output Shapes": "output_shapes", "Output Data Types": "output_dtypes",
}  # fmt: skip
_INT_KERNEL = {"step", "stream", "task_id", "block_dim"}
_NS_KERNEL = {"start_ns", "dur_ns", "wait_ns"}


def kernels_table(table: pa.Table, rank: int) -> pa.Table:
    """kernel_details.csv mapped by column name (the set of columns depends on version and level)."""
    out: dict[str, Any] = {"rank": pa.repeat(pa.scalar(rank, pa.int32()), table.num_rows)}
    for title, col in _KERNEL_COLUMNS.items():
        if title not in table.column_names:
            continue
        values = _column(table, title)
        if col in _INT_KERNEL:
            out[col] = int_text_column(values)
        elif col in _NS_KERNEL:
            out[col] = ns_text_column(values)
        else:
            missing = pc.is_in(values, pa.array(["", "N/A"]))
            out[col] = pc.if_else(missing, pa.scalar(None, pa.string()), pc.utf8_trim(values, '"'))
    return common.extra_table("kernels", out)


def op_statistic_table(table: pa.Table, rank: int) -> pa.Table:
    out: dict[str, Any] = {
        "rank": pa.repeat(pa.scalar(rank, pa.int32()), table.num_rows),
        "op_type": _column(table, "OP Type"),
        "core_type": _column(table, "Core Type"),
        "count": _round_ns(number_column(_column(table, "Count")), 1.0),
        "ratio": number_column(_column(table, "Ratio(%)")),
    }
    for title, col in (
        ("Total Time(us)", "total_ns"),
        ("Min Time(us)", "min_ns"),
        ("Avg Time(us)", "avg_ns"),
        ("Max Time(us)", "max_ns"),
    ):
        out[col] = _round_ns(number_column(_column(table, title)), 1000.0)
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


def comm_tasks_table(plane: pa.Table, rank: int, device: int, op_group: dict[str, str]) -> pa.Table:
    """The plane tasks with their rank, device, group and bandwidth (bytes per ns = GB/s)."""
    n = plane.num_rows
    nbytes = plane.column("bytes").combine_chunks()
    dur = plane.column("dur_ns").combine_chunks()
    moved = pc.and_(pc.greater(nbytes.fill_null(0), 0), pc.greater(dur, 0))
    bandwidth = pc.if_else(moved, pc.divide(pc.cast(nbytes, pa.float64()), pc.cast(dur, pa.float64())), 0.0)
    out = {
        "rank": pa.repeat(pa.scalar(rank, pa.int32()), n),
        "device": pa.repeat(pa.scalar(device, pa.int16()), n),
        "group": ascend_timeline.map_text(
            plane.column("op_name").combine_chunks().fill_null(""), op_group.get
        ),
        **{k: plane.column(k).combine_chunks() for k in plane.column_names},
        "bandwidth_gbps": bandwidth,
    }
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
    rank = -1 if info.rank is None else info.rank
    notes: list[str] = []
    extra, op_group = _deliverables(output, shown / common.OUTPUT_DIR, rank, info, notes)
    columns = ascend_trace.read_trace(trace, shown / common.OUTPUT_DIR / TRACE_FILE)
    device = columns.layout.device if columns.layout.device is not None else first_device_id(output)
    cols, plane, warnings = ascend_timeline.build(columns, device or 0, op_group, info.groups, info.rank)
    del columns
    if plane.num_rows:
        extra["comm_tasks"] = comm_tasks_table(plane, rank, device or 0, op_group)
    table, steps = common.finish(cols, info.rank)
    return common.parsed_rank(shown, fmt, table, steps, info, device, warnings + notes, extra)


def _deliverables(
    output: Path, shown: Path, rank: int, info: common.FolderInfo, warnings: list[str]
) -> tuple[dict[str, pa.Table], dict[str, str]]:
    """The CSV/JSON files next to trace_view.json: each one that is missing or broken costs only its own table."""
    extra: dict[str, pa.Table] = {}
    csvs = (("step_trace_time.csv", "step_trace", step_trace_table), ("kernel_details.csv", "kernels", kernels_table),
            ("op_statistic.csv", "op_statistic", op_statistic_table))  # fmt: skip
    for file, key, build in csvs:
        if (output / file).is_file():
            table = read_csv_table(
                output / file, shown / file, warnings, _KERNEL_COLUMNS if key == "kernels" else None
            )
            if table is not None and table.num_rows:
                extra[key] = build(table, rank)
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
        with common.shape_guard(shown / path.name, warnings, "its tables were skipped"):
            if key == "comm_ops":
                extra["comm_ops"], extra["comm_bandwidth"], op_group = communication_tables(data, rank)
            else:
                extra["links"], sizes = links_table(data, rank, info.groups)
                for gid, size in sizes.items():
                    info.group_sizes.setdefault(gid, size)
    return extra, op_group
