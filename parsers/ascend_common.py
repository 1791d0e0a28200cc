"""What the Ascend readers share: the rank folder's metadata, task-type -> kind, the event columns they fill,
step attribution, and the documented extra tables (docs/ascend.md).

The text export (trace_view.json + CSV/JSON) and the db export (SQLite) describe the same things in different
spellings; both readers fill an :class:`EventColumns` and call :func:`finish`, so that the canonical tables
they return have the same rules for kinds, tracks, steps and groups.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from paradiag import schema
from paradiag.parsers.base import MAX_RANK, Group, ParsedRank, TraceError, sequence_numbers, step_of
from paradiag.parsers.json_stream import MAX_FILE_MB, max_file_bytes

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
# Folder names: {worker}_{YYYYmmddHHMMSSfff}_ascend_pt, default worker = {hostname}_{pid}.
FOLDER_NAME = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)_(?P<ts>\d{17})_ascend_(pt|ms)$")
NO_RANK = 4294967295  # uint32 -1: "no rank" in HCCL task args

# Device task types as the text export (hardware names) and the db export (runtime names) spell them.
COMPUTE_TASKS = frozenset(
    {
        "AI_CORE", "AI_VECTOR_CORE", "AI_CPU", "MIX_AIC", "MIX_AIV", "DSA_SQE", "FFTS_PLUS", "STARS_COMMON",
        "KERNEL_AICORE", "KERNEL_AIVEC", "KERNEL_AICPU", "KERNEL_MIX_AIC", "KERNEL_MIX_AIV", "AIC_SQE", "AIV_SQE",
        "AICPU_SQE", "FFTS_PLUS_SQE",
    }
)  # fmt: skip
MEMORY_TASKS = frozenset(
    {
        "PCIE_DMA_SQE",
        "SDMA_SQE",
        "MEMCPY_ASYNC",
        "MEMCPY",
        "SDMA",
        "ASYNC_MEMCPY",
        "MEMSET",
        "PCIE_DMA",
        "ASYNCDMA_SQE",
    }
)
ANNOTATION_TASKS = frozenset({"PLACE_HOLDER_SQE", "PROFILING_ENABLE", "PROFILING_DISABLE"})
# Everything else on a stream (event record/wait, notify, write value, ...) is the device waiting or signalling.

# Bytes per element of HCCL data types (text: "FP32", db: ENUM_HCCL_DATA_TYPE names).
HCCL_DTYPE_BYTES = {
    "INT8": 1, "UINT8": 1, "INT16": 2, "UINT16": 2, "FP16": 2, "BFP16": 2, "BF16": 2, "INT32": 4, "UINT32": 4,
    "FP32": 4, "INT64": 8, "UINT64": 8, "FP64": 8, "INT128": 16, "HIF8": 1, "FP8E4M3": 1, "FP8E5M2": 1,
}  # fmt: skip

LEVEL1_ANALYSES = (
    "communication time breakdown (transit / wait / synchronization / idle per collective)",
    "bandwidth per link type and the link matrix",
    "slow-link detection",
)


def task_kind(task_type: str, name: str) -> str:
    """The canonical kind of a device task of this type; a task of an unknown type is compute when it carries a
    kernel name of its own (runtime tasks are named after their type)."""
    if task_type in COMPUTE_TASKS:
        return schema.COMPUTE
    if task_type in MEMORY_TASKS:
        return schema.MEMORY
    if task_type in ANNOTATION_TASKS:
        return schema.ANNOTATION
    if name and name != task_type and task_type not in ("", "N/A") and "EVENT" not in task_type.upper():
        return schema.COMPUTE
    return schema.SYNC


def group_hash(name: str) -> str:
    """The id the text export (communication*.json) gives an HCCL group: two 32-bit polynomial hashes of the
    group name (multipliers 29 and 131), high and low word. The db export keeps the name itself; hashing it
    gives both exports the same group ids."""
    high = low = 0
    for ch in name:
        high = (high * 29 + ord(ch)) & 0xFFFFFFFF
        low = (low * 131 + ord(ch)) & 0xFFFFFFFF
    return str(high << 32 | low)


def read_json_file(path: Path, shown: Path) -> Any:
    """A small JSON file (metadata, communication*.json) as Python values; TraceError when truncated."""
    limit = max_file_bytes()
    try:
        if limit is not None and path.stat().st_size > limit:
            raise TraceError(shown, f"size exceeds {limit // (1024 * 1024)} MB (limit {MAX_FILE_MB})")
        return json.loads(path.read_bytes())
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(shown, f"cannot read the file ({exc})") from exc
    except json.JSONDecodeError as exc:
        raise TraceError(shown, f"truncated or invalid JSON ({exc.msg} at line {exc.lineno})") from exc
    except RecursionError as exc:
        raise TraceError(shown, "values nested too deeply") from exc


@dataclass
class FolderInfo:
    """What a rank folder says about itself, outside the traces."""

    rank: int | None = None
    rank_from: str = "metadata"
    host: str | None = None
    world_size: int | None = None
    level: str | None = None
    export_type: str | None = None
    parallel: dict[str, int] = field(default_factory=dict)
    groups: dict[str, Group] = field(default_factory=dict)  # by group id (hash)
    group_sizes: dict[str, int] = field(default_factory=dict)  # implied by group-local ranks in the matrix
    run_id: str | None = None
    warnings: list[str] = field(default_factory=list)


def folder_info(path: Path, root: Path | None) -> FolderInfo:
    """Rank, host, profiler level, parallel layout and run id from profiler_info_*.json / profiler_metadata.json."""
    info = FolderInfo()
    infos = sorted(path.glob("profiler_info*.json"))
    config: dict[str, Any] = {}
    if infos:
        try:
            data = read_json_file(infos[0], shown_path(infos[0], root))
        except TraceError as exc:  # the timeline is still readable; the rank comes from the file name
            info.warnings.append(str(exc))
            data = {}
        rank = whole(data.get("rank_id"), 0, MAX_RANK) if isinstance(data, dict) else None
        if rank is not None:
            info.rank = rank
        config = data if isinstance(data, dict) else {}
        with shape_guard(shown_path(infos[0], root), info.warnings, "the profiler level is unknown"):
            experimental = (config.get("config") or {}).get("experimental_config") or {}
            info.level = _text_or_none(experimental.get("_profiler_level"))
            export = experimental.get("_export_type")
            info.export_type = (
                ",".join(map(str, export)) if isinstance(export, list) else _text_or_none(export)
            )
    if info.rank is None and infos:
        match = re.search(r"profiler_info_(\d+)\.json$", infos[0].name)
        if match:
            info.rank, info.rank_from = int(match.group(1)), "file name"
    name = FOLDER_NAME.match(path.name)
    info.host = name.group("host") if name else None
    meta_path = path / "profiler_metadata.json"
    if meta_path.is_file():
        try:
            meta = read_json_file(meta_path, shown_path(meta_path, root))
        except TraceError as exc:
            info.warnings.append(str(exc))
        else:
            with shape_guard(shown_path(meta_path, root), info.warnings, "the parallel layout is unknown"):
                apply_metadata(info, meta)
    info.run_id = _run_id(config)
    return info


# What interpreting a small JSON document of free structure raises when a value has another shape than expected
# (a list where an object belongs, "12.5.3" where an integer does).
SHAPE_ERRORS = (AttributeError, TypeError, KeyError, ValueError, IndexError, OverflowError)


@contextmanager
def shape_guard(shown: Path, warnings: list[str], consequence: str) -> Iterator[None]:
    """Turn a document of unexpected structure into a warning naming the file: it costs only what it holds."""
    try:
        yield
    except SHAPE_ERRORS as exc:
        warnings.append(
            f"{shown}: unexpected structure ({type(exc).__name__}: {str(exc)[:120]}); {consequence}"
        )


def whole(value: Any, lo: int, hi: int) -> int | None:
    """An integer from lo to hi, from an int or a string of digits (SQLite TEXT); None for anything else."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value) < 20:
        value = int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi else None


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def apply_metadata(info: FolderInfo, meta: Any) -> None:
    """Parallel layout from ``distributed_args`` and groups from ``parallel_group_info``."""
    if not isinstance(meta, dict):
        return
    args = meta.get("distributed_args")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            args = None
    for key, value in (meta.get("parallel_group_info") or {}).items():
        if not isinstance(value, dict) or not isinstance(value.get("global_ranks"), list):
            continue
        gid = group_hash(str(key))
        info.groups[gid] = Group(
            gid, [int(r) for r in value["global_ranks"]], value.get("group_name") or str(key), "hccl"
        )
    if isinstance(args, dict):
        if info.rank is None:
            info.rank = whole(args.get("rank"), 0, MAX_RANK)
        info.world_size = whole(args.get("world_size"), 1, MAX_RANK) or info.world_size
        if info.rank is not None:
            info.parallel = parallel_coordinates(args, info.rank)
    by_name = {g.description: g for g in info.groups.values() if g.description}
    for axis, names in (("dp", ("dp", "dp_cp")), ("tp", ("tp",)), ("pp", ("pp",)), ("ep", ("ep", "exp"))):
        group = next((by_name[n] for n in names if n in by_name), None)
        if group is not None and info.rank in group.ranks and len(group.ranks) > 1:
            info.parallel.setdefault(axis, group.ranks.index(info.rank))


def parallel_coordinates(args: dict[str, Any], rank: int) -> dict[str, int]:
    """dp/tp/pp/ep coordinates of ``rank`` from Megatron sizes, in Megatron's default order (tp fastest, then
    cp, then dp, then pp; ep splits the data-parallel ranks)."""

    def size(key: str) -> int:
        value = args.get(key)
        return value if isinstance(value, int) and value > 0 else 1

    tp, cp, pp = (
        size("tensor_model_parallel_size"),
        size("context_parallel_size"),
        size("pipeline_model_parallel_size"),
    )
    ep = size("expert_model_parallel_size")
    dp = args.get("data_parallel_size")
    world = args.get("world_size")
    if not isinstance(dp, int) or dp <= 0:
        dp = world // (tp * cp * pp) if isinstance(world, int) and world >= tp * cp * pp else 1
    coords = {"tp": rank % tp, "dp": (rank // (tp * cp)) % dp, "pp": rank // (tp * cp * dp)}
    coords["ep"] = coords["dp"] % ep
    return coords


def _run_id(config: dict[str, Any]) -> str | None:
    """Ranks of one profiling run share the profiler configuration and the session's wall-clock hour; a folder
    mixing a Level0 and a Level1 run, or a text and a db run, differs here."""
    if not config:
        return None
    settings = json.dumps(config.get("config") or {}, sort_keys=True).encode()
    end_info = config.get("end_info")
    end = (end_info.get("collectionTimeEnd") if isinstance(end_info, dict) else None) or 0
    hour = int(end) // 3_600_000_000_000 if isinstance(end, int | float | str) and str(end).isdigit() else 0
    return f"{hashlib.sha1(settings).hexdigest()[:12]}@{hour}"


def shown_path(path: Path, root: Path | None) -> Path:
    return path.relative_to(root) if root is not None and path.is_relative_to(root) else path


class EventColumns:
    """Event columns filled block by block (host APIs, device tasks, collectives), concatenated at the end.

    Text columns may be Python lists or Arrow arrays; a single string stands for the whole block.
    ``launch_ns`` is the host time the device work was launched (-1 when unknown): steps are attributed
    through it, as Kineto attributes GPU work to the step of its launch."""

    NUMERIC = ("device", "track", "start_ns", "dur_ns", "correlation", "launch_ns", "external_id")
    TEXT = ("kind", "category", "name")
    COMM = ("collective", "group", "group_ranks", "peer", "bytes")
    INTEGER = ("peer", "bytes")

    def __init__(self) -> None:
        self.blocks: list[dict[str, Any]] = []

    def add(self, **columns: Any) -> None:
        """A block of events; a scalar (or None, for -1 / null) stands for the whole column of the block and is
        expanded only when the column is built."""
        n = len(columns["start_ns"])
        if n == 0:
            return
        block = {k: columns.get(k) for k in (*self.NUMERIC, *self.TEXT, *self.COMM)}
        block["n"] = n
        self.blocks.append(block)

    def take(self, key: str) -> Any:
        """:meth:`column`, handing the blocks' parts of it over (they are freed as the whole is built)."""
        whole = self.column(key)
        for block in self.blocks:
            block[key] = None
        return whole

    def column(self, key: str) -> Any:
        """A numeric column as an int64 numpy array; a text or communication column as an Arrow array."""
        if key in self.NUMERIC:
            parts = [self._numbers(b[key], b["n"]) for b in self.blocks]
            return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        kind = pa.int64() if key in self.INTEGER else pa.string()
        arrays = [self._values(b[key], b["n"], kind) for b in self.blocks]
        if not arrays:  # no event at all (a timeline cut before its first): the column keeps its type
            return (
                pa.array([], type=kind)
                if key in self.INTEGER
                else pa.DictionaryArray.from_arrays(pa.array([], pa.int32()), pa.array([], pa.string()))
            )
        if key in self.INTEGER:
            return pa.concat_arrays([a if a.type == kind else a.cast(kind) for a in arrays])
        encoded = [
            a if isinstance(a, pa.DictionaryArray) else a.cast(pa.string()).dictionary_encode()
            for a in arrays
        ]
        return compact(pa.chunked_array(encoded).unify_dictionaries().combine_chunks())

    @staticmethod
    def _numbers(values: Any, n: int) -> np.ndarray:
        if values is None or isinstance(values, int):
            return np.full(n, -1 if values is None else values, dtype=np.int64)
        return np.asarray(values, dtype=np.int64)

    @staticmethod
    def _values(values: Any, n: int, kind: pa.DataType) -> pa.Array:
        if values is None:
            return pa.nulls(n, kind)
        if isinstance(values, str):
            return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([values]))
        return values if isinstance(values, pa.Array) else pa.array(values, type=kind)


def compact(column: pa.DictionaryArray) -> pa.DictionaryArray:
    """The dictionary column with only the values its rows use (int32 indices)."""
    codes = column.indices.to_numpy(zero_copy_only=False)
    valid = column.indices.is_valid().to_numpy(zero_copy_only=False)
    used = np.unique(codes[valid]).astype(np.int64)
    remap = np.zeros(len(column.dictionary) + 1, dtype=np.int32)
    remap[used] = np.arange(len(used), dtype=np.int32)
    indices = pa.array(remap[np.where(valid, codes, 0).astype(np.int64)], type=pa.int32(), mask=~valid)
    return pa.DictionaryArray.from_arrays(indices, column.dictionary.take(pa.array(used)))


def finish(
    cols: EventColumns, rank: int | None, spans: list[tuple[int, int, int]] | None = None
) -> tuple[pa.Table, pa.Table]:
    """The canonical events (steps and seq filled) and steps tables of one rank. Steps come from the
    ProfilerStep#N annotations, or from ``spans`` (step, start, end) where the source has none (CANN msprof)."""
    start = cols.take("start_ns")
    dur = cols.take("dur_ns")
    device = cols.take("device")
    names = cols.take("name")
    kinds = cols.take("kind")
    n = len(start)
    step_rows, step_ids = _step_rows(names, device)
    order = np.argsort(start[step_rows], kind="stable")
    step_rows, step_ids = step_rows[order], step_ids[order]
    s_start, s_end = start[step_rows], start[step_rows] + dur[step_rows]
    if spans and not len(step_rows):
        spans = sorted(spans, key=lambda x: x[1])
        step_ids = np.array([s[0] for s in spans], dtype=np.int64)
        s_start = np.array([s[1] for s in spans], dtype=np.int64)
        s_end = np.array([s[2] for s in spans], dtype=np.int64)
    launch = cols.take("launch_ns")
    step = step_of(np.where((device >= 0) & (launch >= 0), launch, start), s_start, s_end, step_ids)
    del launch
    if len(step_rows) == len(step_ids):
        step[step_rows] = step_ids
    rank_id = -1 if rank is None else rank
    columns = {
        "rank": np.full(n, rank_id, dtype=np.int32),
        "device": device,
        "track": np.clip(cols.take("track"), -(2**31), 2**31 - 1),
        "kind": kinds,
        "category": cols.take("category"),
        "name": names,
        "start_ns": start,
        "dur_ns": dur,
        "step": step,
        "correlation": _int32_or_none(cols.take("correlation")),
        "external_id": _int32_or_none(cols.take("external_id")),
        **{k: cols.take(k) for k in EventColumns.COMM},
    }
    table = schema.build(schema.EVENTS, columns, n)
    table = table.set_column(table.schema.get_field_index("seq"), "seq", sequence_numbers(table))
    device_work = (device >= 0) & schema.in_values(kinds, schema.DEVICE_KINDS)
    return table, _steps(rank_id, step, step_ids, s_start, s_end, start, start + dur, device_work)


def _int32_or_none(values: np.ndarray) -> np.ndarray:
    return np.where(np.abs(values) < 2**31, values, -1)


def _step_rows(names: pa.DictionaryArray, device: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of the host's ``ProfilerStep#N`` annotations and their step numbers (matched once per distinct name)."""
    ids = [_step_number(v) for v in names.dictionary.to_pylist()]
    codes = names.indices.fill_null(-1).to_numpy(zero_copy_only=False)
    step = np.array([*ids, -1], dtype=np.int64)[codes]
    rows = np.flatnonzero((step >= 0) & (device < 0))
    return rows, step[rows]


def _step_number(name: str | None) -> int:
    """N of ``ProfilerStep#N``; -1 for other names and for an N the int32 step column cannot hold (not a step)."""
    m = STEP_NAME.match(name or "")
    return int(m.group(1)) if m and int(m.group(1)) < 2**31 else -1


def _steps(
    rank: int,
    step: np.ndarray,
    step_ids: np.ndarray,
    s_start: np.ndarray,
    s_end: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    device_work: np.ndarray,
) -> pa.Table:
    rows: dict[str, list[Any]] = {
        k: [] for k in ("rank", "step", "start_ns", "end_ns", "device_start_ns", "device_end_ns")
    }
    for sid, a, b in zip(step_ids.tolist(), s_start.tolist(), s_end.tolist(), strict=True):
        mine = device_work & (step == sid)
        rows["rank"].append(rank)
        rows["step"].append(sid)
        rows["start_ns"].append(a)
        rows["end_ns"].append(b)
        rows["device_start_ns"].append(int(start[mine].min()) if mine.any() else None)
        rows["device_end_ns"].append(int(end[mine].max()) if mine.any() else None)
    return schema.build(schema.STEPS, rows, len(step_ids))


def collective_bytes(count: Any, dtype: Any) -> int | None:
    """Payload of an HCCL op: element count times the element size of its data type."""
    if not isinstance(count, int | float) or not isinstance(dtype, str):
        return None
    size = HCCL_DTYPE_BYTES.get(dtype.upper())
    if not size or not math.isfinite(count) or not 0 <= count * size < 2**63:
        return None
    return int(count) * size


def level0_note(level: str | None) -> str:
    return (
        f"profiler level {level or 'Level0'}: no communication.json / communication_matrix.json and no HCCL plane "
        f"tasks, so these analyses need Level1 or higher: {'; '.join(LEVEL1_ANALYSES)}"
    )


# Extra tables (ParsedRank.extra); columns documented in docs/ascend.md. Times in integer ns.
_I32, _I64, _F64, _STR = pa.int32(), pa.int64(), pa.float64(), pa.string()
EXTRA_SCHEMAS: dict[str, pa.Schema] = {
    "comm_ops": pa.schema(
        [("rank", _I32), ("step", _I32), ("op_name", _STR), ("group", _STR), ("p2p", pa.bool_()), ("start_ns", _I64),
         ("elapse_ns", _I64), ("transit_ns", _I64), ("wait_ns", _I64), ("synchronization_ns", _I64), ("idle_ns", _I64),
         ("wait_ratio", _F64), ("synchronization_ratio", _F64)]
    ),
    "comm_bandwidth": pa.schema(
        [("rank", _I32), ("step", _I32), ("op_name", _STR), ("group", _STR), ("link_type", _STR),
         ("transit_bytes", _I64), ("transit_ns", _I64), ("bandwidth_gbps", _F64), ("large_packet_ratio", _F64)]
    ),
    "links": pa.schema(
        [("rank", _I32), ("step", _I32), ("group", _STR), ("op_type", _STR), ("instance", _STR), ("op_name", _STR),
         ("src_rank", _I32), ("dst_rank", _I32), ("src_global", _I32), ("dst_global", _I32), ("transport", _STR),
         ("bytes", _I64), ("transit_ns", _I64), ("bandwidth_gbps", _F64)]
    ),
    "comm_tasks": pa.schema(
        [("rank", _I32), ("device", pa.int16()), ("group", _STR), ("op_name", _STR), ("plane", pa.int16()),
         ("name", _STR), ("start_ns", _I64), ("dur_ns", _I64), ("src_rank", _I32), ("dst_rank", _I32),
         ("transport", _STR), ("link_type", _STR), ("bytes", _I64), ("bandwidth_gbps", _F64)]
    ),
    "step_trace": pa.schema(
        [("rank", _I32), ("step", _I32), ("computing_ns", _I64), ("communication_not_overlapped_ns", _I64),
         ("overlapped_ns", _I64), ("communication_ns", _I64), ("free_ns", _I64), ("stage_ns", _I64), ("bubble_ns", _I64),
         ("communication_not_overlapped_exclude_receive_ns", _I64), ("preparing_ns", _I64)]
    ),
    "kernels": pa.schema(
        [("rank", _I32), ("step", _I32), ("stream", _I32), ("task_id", _I64), ("name", _STR), ("op_type", _STR),
         ("accelerator_core", _STR), ("start_ns", _I64), ("dur_ns", _I64), ("wait_ns", _I64), ("block_dim", _I64),
         ("input_shapes", _STR), ("input_dtypes", _STR), ("output_shapes", _STR), ("output_dtypes", _STR)]
    ),
    "op_statistic": pa.schema(
        [("rank", _I32), ("op_type", _STR), ("core_type", _STR), ("count", _I64), ("total_ns", _I64), ("min_ns", _I64),
         ("avg_ns", _I64), ("max_ns", _I64), ("ratio", _F64)]
    ),
}  # fmt: skip

STEP_TRACE_COLUMNS = {
    "Computing": "computing_ns",
    "Communication(Not Overlapped)": "communication_not_overlapped_ns",
    "Overlapped": "overlapped_ns",
    "Communication": "communication_ns",
    "Free": "free_ns",
    "Stage": "stage_ns",
    "Bubble": "bubble_ns",
    "Communication(Not Overlapped and Exclude Receive)": "communication_not_overlapped_exclude_receive_ns",
    "Preparing": "preparing_ns",
}


def extra_table(name: str, rows: dict[str, list[Any]]) -> pa.Table:
    """An extra table from column lists (missing columns are null)."""
    sch = EXTRA_SCHEMAS[name]
    n = max((len(v) for v in rows.values()), default=0)
    arrays = [typed_array(rows[f.name], f.type) if f.name in rows else pa.nulls(n, f.type) for f in sch]
    return pa.Table.from_arrays(arrays, schema=sch)


def typed_array(values: list[Any], kind: pa.DataType) -> pa.Array:
    """``values`` as an Arrow array of ``kind``; a value of the wrong type, or out of the type's range (a TEXT in an
    integer column of a database, 2**40 in an int32 column) becomes null instead of failing the whole table."""
    try:
        return pa.array(values, type=kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        return pa.array([_fit(v, kind) for v in values], type=kind)


def _fit(value: Any, kind: pa.DataType) -> Any:
    if value is None:
        return None
    if pa.types.is_integer(kind):
        info = np.iinfo(kind.to_pandas_dtype())
        return (
            value
            if isinstance(value, int) and not isinstance(value, bool) and info.min <= value <= info.max
            else None
        )
    if pa.types.is_floating(kind):
        return float(value) if isinstance(value, int | float) and math.isfinite(value) else None
    if pa.types.is_boolean(kind):
        return value if isinstance(value, bool) else None
    return value if isinstance(value, str) else str(value)


def scaled(value: Any, scale: float) -> int | None:
    """A number (or numeric text) times ``scale``, rounded: ms / us / MB as integer ns / bytes; None for anything
    else (other text, NaN, infinity, beyond int64)."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    ns = float(value) * scale
    return round(ns) if math.isfinite(ns) and abs(ns) < 2**62 else None


def ms_to_ns(value: Any) -> int | None:
    return scaled(value, 1e6) if not isinstance(value, str) else None


def us_to_ns_value(value: Any) -> int | None:
    return scaled(value, 1e3) if not isinstance(value, str) else None


def step_number(key: Any) -> int:
    """``"step50"`` / ``"50"`` -> 50; ``"step"`` (no steps) -> -1."""
    digits = re.sub(r"\D", "", str(key))
    return int(digits) if digits else -1


def global_rank(group: Group | None, local: int | None) -> int | None:
    if group is None or local is None or not 0 <= local < len(group.ranks):
        return None
    return group.ranks[local]


def _largest_group(groups: Any) -> int | None:
    """Without distributed_args the world is at least the largest communication group the export records (an
    8-member all-reduce group in a data-parallel job of 8 ranks, however many of them were profiled)."""
    sizes = [max(len(g.ranks), g.size or 0) for g in groups]
    return max(sizes) if sizes and max(sizes) > 1 else None


def parsed_rank(
    shown: Path,
    fmt: str,
    events: pa.Table,
    steps: pa.Table,
    info: FolderInfo,
    device: int | None,
    warnings: list[str],
    extra: dict[str, pa.Table],
) -> ParsedRank:
    """The ParsedRank of an Ascend rank; groups seen on collectives but not listed in profiler_metadata.json are
    reported with no members (HCCL records only group-local ranks): discovery completes them from the ranks
    that report the same group id."""
    warnings = [*info.warnings, *warnings]
    if info.rank is None:
        warnings.append(
            "no rank_id in profiler_info_*.json and no distributed_args: rank assigned by folder order"
        )
    groups = dict(info.groups)
    seen = events.column("group").combine_chunks().cast(pa.string()).drop_null().unique().to_pylist()
    for gid in seen:
        if gid not in groups:
            size = info.group_sizes.get(gid)
            note = f"HCCL group of {size} ranks" if size else "HCCL group"
            groups[gid] = Group(gid, [], f"{note}; members not recorded", "hccl", size=size)
    return ParsedRank(
        source=str(shown),
        format=fmt,
        events=events,
        steps=steps,
        rank=info.rank,
        rank_from=info.rank_from if info.rank is not None else "assigned",
        device_type="npu",
        host=info.host,
        device=device,
        world_size=info.world_size or _largest_group(groups.values()),
        parallel=info.parallel,
        groups=list(groups.values()),
        warnings=warnings,
        extra=extra,
        run_id=info.run_id,
    )


def p2p_peers(
    names: list[str],
    collectives: list[str],
    groups: list[str | None],
    tasks: pa.Table,
    rank: int | None,
    members: dict[str, Group],
) -> list[int | None]:
    """The other rank of each send/recv op, from its HCCL plane tasks (``tasks``: op_name, src_rank, dst_rank,
    bytes; group-local ranks). The transfer tasks (bytes > 0) are preferred. When this rank's place in the group
    is known, the peer is the task end that is not this rank; otherwise a send's destination and a receive's
    source. Global when the group's members are known (profiler_metadata.json), group-local otherwise, as the
    Kineto parser reports a peer without a member list."""
    wanted = {n for n, c in zip(names, collectives, strict=True) if c in schema.P2P_COLLECTIVES}
    if not wanted or not tasks.num_rows:
        return [None] * len(names)
    mine = tasks.filter(pc.is_in(tasks.column("op_name"), pa.array(sorted(wanted), type=pa.string())))
    ends: dict[str, list[tuple[bool, int, int]]] = {}
    for op, src, dst, size in zip(
        *(mine.column(k).to_pylist() for k in ("op_name", "src_rank", "dst_rank", "bytes")), strict=True
    ):
        if src is not None and dst is not None:
            ends.setdefault(op, []).append((bool(size), src, dst))
    out: list[int | None] = []
    for name, coll, gid in zip(names, collectives, groups, strict=True):
        group = members.get(gid) if gid is not None else None
        me = group.ranks.index(rank) if group is not None and rank in group.ranks else None
        out.append(_peer(ends.get(name, []) if coll in schema.P2P_COLLECTIVES else [], coll, me, group))
    return out


def _peer(
    ends: list[tuple[bool, int, int]], collective: str, me: int | None, group: Group | None
) -> int | None:
    if not ends:
        return None
    transfers = [e for e in ends if e[0]] or ends
    if me is not None:
        others = [d if s == me else s for _, s, d in transfers if me in (s, d) and s != d]
    else:
        others = [s if collective == "recv" else d for _, s, d in transfers]
    if not others:
        return None
    local = max(set(others), key=others.count)
    return global_rank(group, local) if group is not None else local
