"""PyTorch profiler (Kineto) Chrome-trace JSON (``*.json``, ``*.json.gz``) -> canonical tables.

Decoding is typed (msgspec Structs naming only the fields paradiag keeps), so a 50 MB trace decodes at
hundreds of MB/s without building a dict per event; columns are then built in bulk by pyarrow/numpy.
Format notes: ``../shared/formats/kineto.md``.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections import Counter
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from paradiag import schema
from paradiag.parsers.base import (
    Group,
    ParsedRank,
    TraceError,
    collective_from_kernel_name,
    normalize_collective,
    parse_rank_list,
    rank_from_name,
    ranks_key,
    sequence_numbers,
    step_of,
    us_to_ns,
)

FORMAT = "kineto"

Num = int | float


class Args(msgspec.Struct, gc=False, frozen=True):
    """The event args paradiag keeps; everything else in ``args`` is skipped by the decoder."""

    external_id: int | None = msgspec.field(default=None, name="External id")
    correlation: int | None = None
    device: int | None = None
    stream: int | None = None
    collective: str | None = msgspec.field(default=None, name="Collective name")
    in_nelems: int | None = msgspec.field(default=None, name="In msg nelems")
    out_nelems: int | None = msgspec.field(default=None, name="Out msg nelems")
    dtype: str | None = None
    group_size: int | None = msgspec.field(default=None, name="Group size")
    pg_name: str | None = msgspec.field(default=None, name="Process Group Name")
    pg_desc: str | None = msgspec.field(default=None, name="Process Group Description")
    pg_ranks: str | None = msgspec.field(default=None, name="Process Group Ranks")
    rank: int | None = msgspec.field(default=None, name="Rank")
    bytes: int | None = None
    name: str | None = None  # metadata events: process / thread name
    labels: str | None = None


NO_ARGS = Args()


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    name: str | None = None
    cat: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: Num | None = None
    dur: Num | None = None
    args: Args = NO_ARGS


class PgConfig(msgspec.Struct, gc=False):
    pg_name: str | int = ""
    pg_desc: str | None = None
    backend_config: str | None = None
    ranks: list[int] | str | None = None


class DistributedInfo(msgspec.Struct, gc=False):
    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None
    pg_config: list[PgConfig] = []


class Trace(msgspec.Struct, gc=False):
    traceEvents: list[Event] | None = None
    distributedInfo: DistributedInfo | None = None
    baseTimeNanoseconds: int | None = None
    host_name: str | None = None
    deviceProperties: list[Any] | None = None


# Loose variants: a trace whose args have unexpected types (a string stream id, a float correlation) still
# loads; values that do not convert become nulls.
class LooseArgs(msgspec.Struct, gc=False):
    external_id: Any = msgspec.field(default=None, name="External id")
    correlation: Any = None
    device: Any = None
    stream: Any = None
    collective: Any = msgspec.field(default=None, name="Collective name")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    dtype: Any = None
    group_size: Any = msgspec.field(default=None, name="Group size")
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    pg_desc: Any = msgspec.field(default=None, name="Process Group Description")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    rank: Any = msgspec.field(default=None, name="Rank")
    bytes: Any = None
    name: Any = None
    labels: Any = None


class LooseEvent(msgspec.Struct, gc=False):
    ph: Any = ""
    name: Any = None
    cat: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: LooseArgs | None = None


class LooseTrace(msgspec.Struct, gc=False):
    traceEvents: list[LooseEvent] | None = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None
    host_name: Any = None
    deviceProperties: Any = None


_DECODER = msgspec.json.Decoder(Trace)
_LOOSE_DECODER = msgspec.json.Decoder(LooseTrace)

# Source category -> canonical kind. Current and legacy (tb_plugin era) names.
_DEVICE_CATEGORIES = {
    "kernel": schema.COMPUTE,
    "Kernel": schema.COMPUTE,
    "gpu_memcpy": schema.MEMORY,
    "Memcpy": schema.MEMORY,
    "gpu_memset": schema.MEMORY,
    "Memset": schema.MEMORY,
    "cuda_sync": schema.SYNC,
    "gpu_user_annotation": schema.ANNOTATION,
}
_HOST_CATEGORIES = {
    "cpu_op": schema.HOST,
    "Operator": schema.HOST,
    "cuda_runtime": schema.HOST,
    "Runtime": schema.HOST,
    "cuda_driver": schema.HOST,
    "python_function": schema.HOST,
    "overhead": schema.HOST,
    "mtia_runtime": schema.HOST,
    "user_annotation": schema.ANNOTATION,
}
_LAUNCH_CATEGORIES = frozenset({"cuda_runtime", "Runtime", "cuda_driver"})
_SKIPPED_CATEGORIES = frozenset({"Trace"})  # the profiler's own whole-window span
_COMM_KERNEL = re.compile(r"^(nccl|rccl)[A-Za-z]*Kernel|^ncclDevKernel|^mscclKernel")
_STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
_TB_FILE_NAME = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)\.\d+\.pt\.trace\.json(\.gz)?$")
_DTYPE_BYTES = {
    "float": 4,
    "float32": 4,
    "int": 4,
    "int32": 4,
    "double": 8,
    "float64": 8,
    "long": 8,
    "int64": 8,
    "half": 2,
    "float16": 2,
    "bfloat16": 2,
    "c10::bfloat16": 2,
    "c10::half": 2,
    "short": 2,
    "int16": 2,
    "byte": 1,
    "char": 1,
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "unsigned char": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}
EPOCH_US_THRESHOLD = 1e14  # timestamps below this (about 1973 in epoch microseconds) are relative


def detect(path: Path) -> bool:
    """Whether ``path`` looks like a Kineto trace file (by name; the content is checked when parsed)."""
    name = path.name
    return path.is_file() and (name.endswith((".json", ".json.gz")))


def read_bytes(path: Path) -> bytes:
    """The file's JSON text, gunzipped (with ISA-L when available) when the file is gzip."""
    with open(path, "rb") as f:
        raw = f.read()
    if not raw:
        raise TraceError(path, "the file is empty")
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        from isal import igzip

        return igzip.decompress(raw)
    except ImportError:  # pragma: no cover - isal is a dependency; plain gzip still works
        pass
    except (EOFError, OSError, zlib.error) as exc:
        raise TraceError(path, f"truncated or corrupt gzip data ({exc})") from exc
    try:
        return gzip.decompress(raw)
    except (EOFError, OSError, zlib.error) as exc:
        raise TraceError(path, f"truncated or corrupt gzip data ({exc})") from exc


def decode(path: Path, data: bytes) -> tuple[Trace | LooseTrace, list[str]]:
    """Decode the trace; fall back to the loose decoder when a field has an unexpected type."""
    warnings: list[str] = []
    try:
        return _DECODER.decode(data), warnings
    except msgspec.ValidationError as exc:
        warnings.append(f"unexpected value types ({exc}); read leniently")
    except msgspec.DecodeError as exc:
        raise TraceError(path, f"invalid JSON ({exc})") from exc
    try:
        return _LOOSE_DECODER.decode(data), warnings
    except msgspec.ValidationError as exc:
        raise TraceError(path, f"not a PyTorch profiler trace ({exc})") from exc
    except msgspec.DecodeError as exc:  # pragma: no cover - the strict decoder saw the same text
        raise TraceError(path, f"invalid JSON ({exc})") from exc


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return int(value)
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


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else (None if value is None else str(value))


def _int_column(values: list[Any]) -> pa.Array:
    """Integers (or nulls) as int64; values of another type (a string id, a float) are converted one by one."""
    try:
        return pa.array(values, type=pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        return pa.array([_int_or_none(v) for v in values], type=pa.int64())


def _num_column(values: list[Any]) -> pa.Array:
    """Numbers (or nulls) as float64; anything else becomes null."""
    try:
        return pa.array(values, type=pa.float64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pa.array(
            [v if isinstance(v, int | float) and not isinstance(v, bool) else None for v in values], type=pa.float64()
        )


def parse(path: Path, root: Path | None = None) -> ParsedRank:
    """Parse one Kineto trace file into one rank's canonical tables (times on the rank's own clock)."""
    shown = path.relative_to(root) if root is not None and path.is_relative_to(root) else path
    data = read_bytes(path)
    trace, warnings = decode(shown, data)
    del data
    strict = isinstance(trace, Trace)
    raw_events = trace.traceEvents
    if not isinstance(raw_events, list):
        raise TraceError(shown, "not a PyTorch profiler trace: no 'traceEvents' list")
    if strict:
        events: list[Any] = raw_events
    else:
        events = raw_events
        for e in events:
            if e.args is None:
                e.args = LooseArgs()

    complete = [e for e in events if e.ph == "X" and e.cat not in _SKIPPED_CATEGORIES]
    if not complete:
        raise TraceError(shown, "the trace holds no complete ('X') events")
    table, dropped = _events_table(complete, trace)
    if dropped:
        warnings.append(f"{dropped} events with a missing or negative timestamp or duration were skipped")
    if table.num_rows == 0:
        raise TraceError(shown, "no event has a valid timestamp and duration")

    info = trace.distributedInfo
    rank = _int_or_none(getattr(info, "rank", None)) if info is not None else None
    rank_from = "metadata"
    if rank is None:
        rank = rank_from_name(path)
        rank_from = "file name" if rank is not None else "assigned"
        if rank is None:
            warnings.append("no distributedInfo.rank and no rank in the file name: rank assigned by file order")
        else:
            warnings.append(f"no distributedInfo.rank: rank {rank} taken from the file name")

    table, steps = _attribute_steps(table)
    groups = _groups(info, table)
    device_rows = pc.greater_equal(table.column("device"), 0)
    device_values = pc.filter(table.column("device"), device_rows).to_numpy()
    device = int(Counter(device_values.tolist()).most_common(1)[0][0]) if len(device_values) else None
    tb_name = _TB_FILE_NAME.match(path.name)
    host = _str_or_none(trace.host_name) or (tb_name.group("host") if tb_name else None)
    return ParsedRank(
        source=str(shown),
        format=FORMAT,
        events=table,
        steps=steps,
        rank=rank,
        rank_from=rank_from,
        device_type="gpu" if device is not None else "cpu",
        host=host,
        device=device,
        world_size=_int_or_none(getattr(info, "world_size", None)) if info is not None else None,
        groups=groups,
        warnings=warnings,
    )


def _events_table(complete: list[Any], trace: Trace | LooseTrace) -> tuple[pa.Table, int]:
    """Columns of the X events (comm metadata included), invalid-time events removed."""
    cats = _text(list(map(_get_cat, complete))).dictionary_encode()
    cat_names: list[str] = cats.dictionary.to_pylist()
    cat_codes = cats.indices.to_numpy(zero_copy_only=False)
    on_device_cat = np.array([c in _DEVICE_CATEGORIES for c in cat_names], dtype=bool)
    kind_of_cat = np.array(
        [_DEVICE_CATEGORIES.get(c) or _HOST_CATEGORIES.get(c) or schema.HOST for c in cat_names], dtype=object
    )
    on_device = on_device_cat[cat_codes] if len(cat_names) else np.zeros(len(complete), dtype=bool)

    names_arr = _text(list(map(_get_name, complete))).dictionary_encode()
    names: list[str] = names_arr.dictionary.to_pylist()
    name_codes = names_arr.indices.to_numpy(zero_copy_only=False)
    ts_arr = _num_column(list(map(_get_ts, complete)))
    ts_valid = pc.is_valid(ts_arr).to_numpy(zero_copy_only=False)
    ts = us_to_ns(ts_arr.fill_null(0))
    dur_arr = _num_column(list(map(_get_dur, complete)))
    dur_valid = pc.is_valid(dur_arr).to_numpy(zero_copy_only=False)
    dur = us_to_ns(dur_arr.fill_null(0))
    base = _int_or_none(trace.baseTimeNanoseconds)
    if base and len(ts) and ts_valid.any() and np.max(ts[ts_valid]) < EPOCH_US_THRESHOLD * 1000:
        ts = ts + base

    args = list(map(_get_args, complete))
    pid = list(map(_get_pid, complete))
    tid = list(map(_get_tid, complete))
    device_arg = _int_column(list(map(_get_device, args))).to_numpy(zero_copy_only=False)
    pid_int = _int_column(pid).to_numpy(zero_copy_only=False)
    tid_int = _int_column(tid).to_numpy(zero_copy_only=False)
    stream_arg = _int_column(list(map(_get_stream, args))).to_numpy(zero_copy_only=False)
    device = np.where(on_device, np.where(np.isnan(device_arg), pid_int, device_arg), -1)
    device = np.clip(np.nan_to_num(device, nan=0), -1, 127).astype(np.int64)
    track = np.where(on_device & ~np.isnan(stream_arg), stream_arg, tid_int)
    track = np.nan_to_num(track, nan=-1).astype(np.int64)

    kinds = kind_of_cat[cat_codes] if len(cat_names) else np.array([], dtype=object)
    comm = _communication(complete, names, name_codes, on_device, kinds, track)
    kinds = comm.pop("kind")

    valid = ts_valid & dur_valid & (ts >= 0) & (dur >= 0)
    dropped = int((~valid).sum())
    columns: dict[str, Any] = {
        "rank": np.full(len(complete), -1, dtype=np.int32),
        "device": device,
        "track": np.clip(track, -(2**31), 2**31 - 1),
        "kind": kinds.tolist(),
        "category": pa.DictionaryArray.from_arrays(cats.indices, cats.dictionary),
        "name": names_arr,
        "start_ns": ts,
        "dur_ns": dur,
        "step": np.full(len(complete), -1, dtype=np.int32),
        "correlation": _int_column(list(map(_get_correlation, args))).fill_null(-1),
        "external_id": _int_column(list(map(_get_external_id, args))).fill_null(-1),
        **comm,
    }
    columns["correlation"] = _clip32(columns["correlation"])
    columns["external_id"] = _clip32(columns["external_id"])
    table = schema.build(schema.EVENTS, columns, len(complete))
    if dropped:
        table = table.filter(pa.array(valid))
    return table, dropped


_get_args = attrgetter("args")
_get_pid = attrgetter("pid")
_get_tid = attrgetter("tid")
_get_ts = attrgetter("ts")
_get_dur = attrgetter("dur")
_get_name = attrgetter("name")
_get_cat = attrgetter("cat")
_get_device = attrgetter("device")
_get_stream = attrgetter("stream")
_get_correlation = attrgetter("correlation")
_get_external_id = attrgetter("external_id")


def _text(values: list[Any]) -> pa.Array:
    """Strings as a pyarrow string array; anything that is not a string becomes ''."""
    try:
        return pa.array(values, type=pa.string()).fill_null("")
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pa.array([v if isinstance(v, str) else "" for v in values], type=pa.string())


def _clip32(arr: pa.Array) -> np.ndarray:
    values = arr.to_numpy(zero_copy_only=False)
    return np.where((values > 2**31 - 1) | (values < -(2**31)), -1, values).astype(np.int32)


def _communication(
    complete: list[Any],
    names: list[str],
    name_codes: np.ndarray,
    on_device: np.ndarray,
    kinds: np.ndarray,
    track: np.ndarray,
) -> dict[str, Any]:
    """Collective, group, peer and bytes for device collectives and for the host ``record_param_comms`` calls.

    Metadata comes from the event's own args (newer PyTorch copies it onto NCCL kernels), else from the
    ``record_param_comms`` call with the same External id, else from the kernel name alone; without a process
    group the kernel's stream stands in for the group (NCCL runs one communicator per stream)."""
    n = len(complete)
    collective: list[str | None] = [None] * n
    group: list[str | None] = [None] * n
    group_ranks: list[str | None] = [None] * n
    peer: list[int | None] = [None] * n
    nbytes: list[int | None] = [None] * n
    kinds = kinds.copy()

    host_meta: dict[int, int] = {}
    param_code = names.index("record_param_comms") if "record_param_comms" in names else -1
    for i in np.flatnonzero((name_codes == param_code) & ~on_device).tolist():
        args = complete[i].args
        ext = _int_or_none(args.external_id)
        if ext is not None:
            host_meta[ext] = i
        _fill_comm(i, args, collective, group, group_ranks, peer, nbytes)

    comm_name = np.array([bool(_COMM_KERNEL.match(v)) for v in names], dtype=bool)
    with_collective_arg = np.array([a.collective is not None for a in map(_get_args, complete)], dtype=bool)
    comm_kernel = np.flatnonzero(on_device & (comm_name[name_codes] | with_collective_arg))
    for i in comm_kernel.tolist():
        kinds[i] = schema.COMMUNICATION
        args = complete[i].args
        if not args.collective:
            ext = _int_or_none(args.external_id)
            source = host_meta.get(ext) if ext is not None else None
            if source is not None:
                args = complete[source].args
        _fill_comm(i, args, collective, group, group_ranks, peer, nbytes)
        if collective[i] is None:
            collective[i] = collective_from_kernel_name(names[name_codes[i]])
        if group[i] is None:
            group[i] = f"stream:{track[i]}"
    return {
        "kind": kinds,
        "collective": collective,
        "group": group,
        "group_ranks": group_ranks,
        "peer": peer,
        "bytes": nbytes,
    }


def _fill_comm(
    i: int,
    args: Any,
    collective: list[str | None],
    group: list[str | None],
    group_ranks: list[str | None],
    peer: list[int | None],
    nbytes: list[int | None],
) -> None:
    coll = normalize_collective(_str_or_none(args.collective))
    if coll is None:
        return
    collective[i] = coll
    pg = _str_or_none(args.pg_name)
    group[i] = pg
    members = parse_rank_list(_str_or_none(args.pg_ranks))
    group_ranks[i] = ranks_key(members)
    elements = max(_int_or_none(args.in_nelems) or 0, _int_or_none(args.out_nelems) or 0)
    dtype = _str_or_none(args.dtype)
    if elements and dtype:
        nbytes[i] = elements * _DTYPE_BYTES.get(dtype.lower(), 4)
    if coll in schema.P2P_COLLECTIVES:
        local = _int_or_none(args.rank)
        if local is not None:
            peer[i] = members[local] if members and 0 <= local < len(members) else local


def _attribute_steps(table: pa.Table) -> tuple[pa.Table, pa.Table]:
    """Fill ``step`` (host work by time inside ProfilerStep#N, device work through its launch) and ``seq``;
    return the events and the steps table. Every step is kept, the last one included."""
    names = table.column("name").combine_chunks()
    kind = table.column("kind").combine_chunks().cast(pa.string()).to_numpy(zero_copy_only=False)
    device = table.column("device").to_numpy()
    start = table.column("start_ns").to_numpy()
    end = start + table.column("dur_ns").to_numpy()
    name_values = names.dictionary.to_pylist()
    step_code = {code: int(m.group(1)) for code, v in enumerate(name_values) if (m := _STEP_NAME.match(v or ""))}
    codes = names.indices.to_numpy(zero_copy_only=False)
    is_step = np.isin(codes, np.fromiter(step_code, dtype=np.int64)) & (device < 0) if step_code else np.zeros(len(codes), bool)
    step_rows = np.flatnonzero(is_step)
    step_ids = np.array([step_code[int(c)] for c in codes[step_rows]], dtype=np.int64)
    order = np.argsort(start[step_rows], kind="stable")
    step_rows, step_ids = step_rows[order], step_ids[order]
    s_start, s_end = start[step_rows], end[step_rows]

    step = step_of(start, s_start, s_end, step_ids)
    # Device work belongs to the step its launch came from (kernels often run after the CPU step ended).
    category = table.column("category").combine_chunks().cast(pa.string()).to_numpy(zero_copy_only=False)
    correlation = table.column("correlation").to_numpy()
    launches = np.flatnonzero(np.isin(category, list(_LAUNCH_CATEGORIES)) & (correlation >= 0))
    on_device = device >= 0
    if len(launches):
        launch_corr = correlation[launches]
        order = np.argsort(launch_corr, kind="stable")
        launch_corr, launch_step = launch_corr[order], step[launches][order]
        dev_rows = np.flatnonzero(on_device & (correlation >= 0))
        pos = np.searchsorted(launch_corr, correlation[dev_rows])
        found = (pos < len(launch_corr)) & (launch_corr[np.minimum(pos, len(launch_corr) - 1)] == correlation[dev_rows])
        step[dev_rows[found]] = launch_step[pos[found]]
    step[step_rows] = step_ids
    table = table.set_column(table.schema.get_field_index("step"), "step", pa.array(step.astype(np.int32)))
    table = table.set_column(table.schema.get_field_index("seq"), "seq", sequence_numbers(table))

    device_work = on_device & np.isin(kind, schema.DEVICE_KINDS)
    rows: dict[str, list[Any]] = {k: [] for k in ("rank", "step", "start_ns", "end_ns", "device_start_ns", "device_end_ns")}
    for row, sid in zip(step_rows, step_ids, strict=True):
        mine = device_work & (step == sid)
        rows["rank"].append(-1)
        rows["step"].append(int(sid))
        rows["start_ns"].append(int(start[row]))
        rows["end_ns"].append(int(end[row]))
        rows["device_start_ns"].append(int(start[mine].min()) if mine.any() else None)
        rows["device_end_ns"].append(int(end[mine].max()) if mine.any() else None)
    return table, schema.build(schema.STEPS, rows, len(step_rows))


def _groups(info: Any, table: pa.Table) -> list[Group]:
    """Process groups from ``distributedInfo.pg_config``, completed by the groups named on events."""
    found: dict[str, Group] = {}
    for pg in getattr(info, "pg_config", None) or []:
        name = _str_or_none(getattr(pg, "pg_name", None))
        members = parse_rank_list(getattr(pg, "ranks", None))
        if name is None or members is None:
            continue
        found[name] = Group(name, members, _str_or_none(getattr(pg, "pg_desc", None)), _str_or_none(getattr(pg, "backend_config", None)))
    pairs = table.select(["group", "group_ranks"]).drop_null().group_by(["group", "group_ranks"]).aggregate([])
    for name, members in zip(pairs.column("group").to_pylist(), pairs.column("group_ranks").to_pylist(), strict=True):
        if name not in found:
            parsed = parse_rank_list(members)
            if parsed is not None:
                found[name] = Group(name, parsed)
    return list(found.values())
