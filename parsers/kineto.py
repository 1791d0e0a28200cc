"""PyTorch profiler (Kineto) Chrome-trace JSON (``*.json``, ``*.json.gz``) -> canonical tables.

Decoding is typed and chunked (:mod:`paradiag.parsers.kineto_decode`): no dict is built per event and memory
stays near the size of the JSON text. Format notes: ``../shared/formats/kineto.md``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from paradiag import schema
from paradiag.parsers import kineto_nccl
from paradiag.parsers.base import (
    MAX_NS,
    MAX_RANK,
    Group,
    ParsedRank,
    TraceError,
    collective_from_kernel_name,
    parse_rank_list,
    rank_from_name,
    sequence_numbers,
    step_of,
    us_to_ns,
)
from paradiag.parsers.json_stream import ArrayStream, open_text
from paradiag.parsers.kineto_decode import (
    DEVICE_CATEGORIES,
    EVENTS_DECODERS,
    HOST_CATEGORIES,
    LOOSE_EVENTS_DECODER,
    Columns,
    CommMeta,
    Communication,
    decode_outer,
    int_or_none,
    read_bytes,
    str_or_none,
)
from paradiag.parsers.kineto_host import host_lanes

__all__ = ["FORMAT", "detect", "parse", "read_bytes"]

FORMAT = "kineto"

_LAUNCH_CATEGORIES = frozenset({"cuda_runtime", "Runtime", "cuda_driver"})
_STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
_TB_FILE_NAME = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)\.\d+\.pt\.trace\.json(\.gz)?$")
MAX_STEP = 2**31 - 1  # steps are int32
EPOCH_US_THRESHOLD = 1e14  # timestamps below this (about 1973 in epoch microseconds) are relative


def detect(path: Path) -> bool:
    """Whether ``path`` looks like a Kineto trace file (by name; the content is checked when parsed)."""
    return path.is_file() and path.name.endswith((".json", ".json.gz"))


def parse(path: Path, root: Path | None = None) -> ParsedRank:
    """Parse one Kineto trace file into one rank's canonical tables (times on the rank's own clock)."""
    shown = path.relative_to(root) if root is not None and path.is_relative_to(root) else path
    warnings: list[str] = []
    columns = Columns(str(shown))
    with open_text(path, shown) as reader:
        stream = ArrayStream(reader, shown, b"traceEvents", EVENTS_DECODERS, LOOSE_EVENTS_DECODER, warnings)
        try:
            for events in stream:
                columns.add(events)
                del events
        except TraceError as exc:
            if "no 'traceEvents' list" in exc.problem or "not a JSON" in exc.problem:
                _check_json(stream.buf, shown)
                raise TraceError(shown, "not a PyTorch profiler trace: no 'traceEvents' list") from exc
            raise
    outer = decode_outer(stream.rest, shown)
    if columns.n == 0:
        raise TraceError(shown, "the trace holds no complete ('X') events")
    info = outer.distributedInfo if isinstance(outer.distributedInfo, dict) else {}
    rank, rank_from = _rank(info, path, warnings)
    table, dropped, kept = _events_table(
        columns, _base_ns(outer.baseTimeNanoseconds, warnings), _config_groups(info), rank
    )
    comm_inputs = _kept_rows(columns.comm_inputs, kept)
    del columns
    if dropped:
        warnings.append(
            f"{dropped} events with a missing, negative or out-of-range timestamp or duration were skipped"
        )
    if table.num_rows == 0:
        raise TraceError(shown, "no event has a valid timestamp and duration")
    groups = _groups(info, table)
    device_values = table.column("device").to_numpy()
    device_values = device_values[device_values >= 0]
    device = int(np.bincount(device_values).argmax()) if len(device_values) else None  # the most common
    step_from = None
    if device is None and (
        comm_inputs or info.get("backend") or (int_or_none(info.get("world_size")) or 1) > 1
    ):
        # A rank of a distributed job without device activity: its threads are its device.
        lanes, lane_step_from = host_lanes(table, comm_inputs, groups, rank)
        if lanes.num_rows:
            step_from = np.concatenate([np.full(table.num_rows, -1, np.int64), lane_step_from])
            table = pa.concat_tables([table, lanes])
            groups = _groups(info, table)
    table, steps = _attribute_steps(table, warnings, step_from)
    tb_name = _TB_FILE_NAME.match(path.name)
    return ParsedRank(
        source=str(shown),
        format=FORMAT,
        events=table,
        steps=steps,
        rank=rank,
        rank_from=rank_from,
        device_type="gpu" if device is not None else "cpu",
        host=str_or_none(outer.host_name) or (tb_name.group("host") if tb_name else None),
        device=device,
        world_size=_counted(info, "world_size", 1, warnings),
        groups=groups,
        warnings=warnings,
    )


def _check_json(text: bytearray, shown: Path | str) -> None:
    """Name the real problem of a file without a trace array: invalid JSON, or valid JSON of another kind."""
    try:
        msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise TraceError(shown, f"invalid JSON ({exc})") from exc
    except RecursionError as exc:
        raise TraceError(shown, "values nested too deeply") from exc


def _base_ns(value: Any, warnings: list[str]) -> int | None:
    base = int_or_none(value)
    if value is not None and (base is None or not 0 <= base < MAX_NS):
        warnings.append(f"baseTimeNanoseconds {str(value)[:40]} is not a valid time; ignored")
        return None
    return base


def _counted(info: dict[str, Any], key: str, least: int, warnings: list[str]) -> int | None:
    """``distributedInfo[key]`` when it is a whole number from ``least`` to 2**31-1; a warning otherwise."""
    value = info.get(key)
    number = int_or_none(value)
    if value is not None and (number is None or not least <= number <= MAX_RANK):
        warnings.append(
            f"distributedInfo.{key} {str(value)[:40]} is not a valid {key.replace('_', ' ')}; ignored"
        )
        return None
    return number


def _rank(info: dict[str, Any], path: Path, warnings: list[str]) -> tuple[int | None, str]:
    rank = _counted(info, "rank", 0, warnings)
    if rank is not None:
        return rank, "metadata"
    rank = rank_from_name(path)
    if rank is None:
        warnings.append("no distributedInfo.rank and no rank in the file name: rank assigned by file order")
        return None, "assigned"
    warnings.append(f"no distributedInfo.rank: rank {rank} taken from the file name")
    return rank, "file name"


def _events_table(
    columns: Columns, base_ns: int | None, groups: list[Group], rank: int | None
) -> tuple[pa.Table, int, np.ndarray]:
    """The events table from the accumulated columns, events with an invalid time removed; how many were, and
    the rows kept (``groups``, ``rank``: the rank's process groups and rank, which name the groups of NCCL work
    that no record_param_comms describes)."""
    n = columns.n
    names = columns.take_strings("name", "event name")
    cats = columns.take_strings("category", "event category")
    cat_names: list[str] = cats.dictionary.to_pylist()
    cat_codes = cats.indices.to_numpy(zero_copy_only=False)
    on_device = np.array([c in DEVICE_CATEGORIES for c in cat_names], dtype=bool)[cat_codes]
    external_id = columns.take("external_id").fill_null(-1).to_numpy(zero_copy_only=False)
    comm = columns.communication(names, on_device, external_id)
    kind_of_cat = [
        schema.KINDS.index(DEVICE_CATEGORIES.get(c) or HOST_CATEGORIES.get(c) or schema.HOST)
        for c in cat_names
    ]
    kind_codes = np.array(kind_of_cat, dtype=np.int8)[cat_codes]
    kind_codes[comm.comm_rows] = schema.KINDS.index(schema.COMMUNICATION)

    ts_arr, dur_arr = columns.take("ts"), columns.take("dur")
    valid = pc.and_(pc.is_valid(ts_arr), pc.is_valid(dur_arr)).to_numpy(zero_copy_only=False)
    ts = us_to_ns(ts_arr.fill_null(0))
    dur = us_to_ns(dur_arr.fill_null(0))
    valid &= (ts >= 0) & (dur >= 0)  # negative, or out of range (us_to_ns)
    if base_ns and valid.any() and np.max(ts[valid]) < EPOCH_US_THRESHOLD * 1000:
        ts = np.where(valid, ts + base_ns, -1)
    valid &= ts < MAX_NS

    device_arg = columns.take("device").to_numpy(zero_copy_only=False)
    stream_arg = columns.take("stream").to_numpy(zero_copy_only=False)
    pid = columns.take("pid").to_numpy(zero_copy_only=False)
    tid = columns.take("tid").to_numpy(zero_copy_only=False)
    device = np.where(on_device, np.where(np.isnan(device_arg), pid, device_arg), -1)
    device = np.clip(np.nan_to_num(device, nan=0), -1, 127).astype(np.int64)
    track = np.where(on_device & ~np.isnan(stream_arg), stream_arg, tid)
    track = np.clip(np.nan_to_num(track, nan=-1), -(2**31), 2**31 - 1).astype(np.int64)
    correlation = columns.take("correlation").fill_null(-1).to_numpy(zero_copy_only=False)
    comm_columns = _comm_columns(
        comm,
        n,
        names,
        track,
        _described_elsewhere(
            columns,
            comm,
            names,
            on_device,
            correlation,
            external_id,
            ts,
            dur,
            tid,
            track,
            device,
            groups,
            rank,
        ),
    )
    # A row that is no collective's: its operator's input bytes (a host operator's, a kernel's launching one's).
    comm_columns["bytes"] = pc.coalesce(
        comm_columns["bytes"],
        _launched_sizes(
            columns.take("operand_bytes"),
            on_device & (kind_codes == schema.KINDS.index(schema.COMPUTE)),
            on_device,
            external_id,
            correlation,
        ),
    )
    table = schema.build(
        schema.EVENTS,
        {
            "rank": np.full(n, -1, dtype=np.int32),
            "device": device,
            "track": track,
            "kind": schema.dictionary_array(kind_codes, schema.KINDS, pa.int8()),
            "category": cats,
            "name": names,
            "start_ns": ts,
            "dur_ns": dur,
            "step": np.full(n, -1, dtype=np.int32),
            "correlation": _clip32(correlation),
            "external_id": _clip32(external_id),
            **comm_columns,
        },
        n,
    )
    dropped = int((~valid).sum())
    return (table.filter(pa.array(valid)) if dropped else table), dropped, np.flatnonzero(valid)


def _lookup(keys: np.ndarray, values: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each of ``wanted``, whether ``keys`` holds it and the value beside it (the first, where several)."""
    if not len(keys):
        return np.zeros(len(wanted), dtype=bool), np.zeros(len(wanted), values.dtype)
    order = np.argsort(keys, kind="stable")
    keys, values = keys[order], values[order]
    at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    return keys[at] == wanted, values[at]


def _launched_sizes(
    sizes: pa.Array,
    kernels: np.ndarray,
    on_device: np.ndarray,
    external_id: np.ndarray,
    correlation: np.ndarray,
) -> pa.Array:
    """``sizes`` (a host operator's input bytes per row) given to the device kernels (``kernels`` by row) that the
    operator launched: a kernel works on its operator's tensors. The operator is the one whose External id the
    kernel's launch (the host runtime call of the same correlation id) carries, else the kernel's own External id
    (older traces give the kernel its correlation id there)."""
    values = sizes.fill_null(-1).to_numpy(zero_copy_only=False)
    has = (values >= 0) & (external_id >= 0) & ~on_device
    want = np.flatnonzero(kernels & (external_id >= 0))
    if not has.any() or not len(want):
        return sizes
    op = external_id[want]
    launch = ~on_device & (correlation >= 0) & (external_id >= 0)
    found, via_launch = _lookup(correlation[launch], external_id[launch], correlation[want])
    op = np.where(found & (correlation[want] >= 0), via_launch, op)
    hit, size = _lookup(external_id[has], values[has], op)
    values = values.copy()
    values[want[hit]] = size[hit]
    return pa.array(values, mask=values < 0)


def _kept_rows(by_row: dict[int, Any], kept: np.ndarray) -> dict[int, Any]:
    """``by_row`` re-keyed by the rows' positions once the invalid rows are removed (``kept``: the kept rows)."""
    out = {}
    for row, value in by_row.items():
        at = int(np.searchsorted(kept, row))
        if at < len(kept) and kept[at] == row:
            out[at] = value
    return out


def _clip32(values: np.ndarray) -> np.ndarray:
    return np.where((values > 2**31 - 1) | (values < -(2**31)), -1, values).astype(np.int32)


def _described_elsewhere(
    columns: Columns,
    comm: Communication,
    names: pa.DictionaryArray,
    on_device: np.ndarray,
    correlation: np.ndarray,
    external_id: np.ndarray,
    ts: np.ndarray,
    dur: np.ndarray,
    tid: np.ndarray,
    track: np.ndarray,
    device: np.ndarray,
    groups: list[Group],
    rank: int | None,
) -> dict[int, CommMeta]:
    """Communication kernels without a record_param_comms call: what their c10d operator, nccl annotation and
    stream say of them (:mod:`paradiag.parsers.kineto_nccl`)."""
    pending = [row for row, ext in comm.pending if ext not in comm.host_meta]
    if not pending:
        return {}
    rows = kineto_nccl.Rows(
        words=[w or "" for w in names.dictionary.to_pylist()],
        codes=names.indices.to_numpy(zero_copy_only=False),
        on_device=on_device,
        correlation=correlation,
        external_id=external_id,
        ts=ts,
        dur=dur,
        tid=tid,
        track=track,
        device=device,
    )
    return kineto_nccl.infer(rows, pending, {**columns.comm_inputs, **columns.nccl_inputs}, groups, rank)


def _comm_columns(
    comm: Communication,
    n: int,
    names: pa.DictionaryArray,
    track: np.ndarray,
    enclosing: dict[int, CommMeta],
) -> dict[str, Any]:
    """Collective, group, ranks, peer and bytes: from the event's own args, else from the record_param_comms call
    with the same External id, else from the host collective operator it was launched in (``enclosing``), else
    from the kernel name; without a process group the kernel's stream stands in for the group (NCCL runs one
    communicator per stream). Built sparsely: most rows are not collectives."""
    meta = dict(comm.meta)
    for row, ext in comm.pending:
        if ext in comm.host_meta:
            meta[row] = comm.host_meta[ext]
        elif row in enclosing:
            meta[row] = enclosing[row]
    name_values = names.dictionary.to_pylist()
    codes = names.indices.to_numpy(zero_copy_only=False)
    rows = sorted(set(meta) | set(comm.comm_rows))
    fallback_collective = {r: collective_from_kernel_name(name_values[codes[r]]) for r in comm.comm_rows}
    values: dict[str, list[Any]] = {k: [] for k in ("collective", "group", "group_ranks", "peer", "bytes")}
    for r in rows:
        m = meta.get(r)
        values["collective"].append(m.collective if m else fallback_collective[r])
        values["group"].append(
            (m.group if m else None) or (f"stream:{track[r]}" if r in fallback_collective else None)
        )
        values["group_ranks"].append(m.group_ranks if m else None)
        values["peer"].append(m.peer if m else None)
        values["bytes"].append(m.nbytes if m else None)
    index = np.array(rows, dtype=np.int64)
    out: dict[str, Any] = {}
    for key, field_type in (("collective", pa.int8()), ("group", pa.int16()), ("group_ranks", pa.int16())):
        out[key] = _sparse_dictionary(n, index, values[key], field_type)
    for key in ("peer", "bytes"):
        dense = np.zeros(n, dtype=np.int64)
        present = np.ones(n, dtype=bool)  # True = null
        known = [i for i, v in enumerate(values[key]) if v is not None]
        dense[index[known]] = [values[key][i] for i in known]
        present[index[known]] = False
        out[key] = pa.array(dense, mask=present)
    return out


def _sparse_dictionary(
    n: int, rows: np.ndarray, values: list[str | None], index_type: pa.DataType
) -> pa.DictionaryArray:
    """A dictionary column that is null except at ``rows``."""
    dictionary = sorted({v for v in values if v is not None})
    code_of = {v: i for i, v in enumerate(dictionary)}
    codes = np.zeros(n, dtype=np.int64)
    null = np.ones(n, dtype=bool)
    for r, v in zip(rows.tolist(), values, strict=True):
        if v is not None:
            codes[r] = code_of[v]
            null[r] = False
    return schema.dictionary_array(codes, dictionary, index_type, mask=null)


def _step_names(name_values: list[str | None], warnings: list[str]) -> dict[int, int]:
    """name code -> step id of the ``ProfilerStep#N`` names; N beyond int32 is a plain annotation (warned)."""
    steps = {}
    for code, value in enumerate(name_values):
        match = _STEP_NAME.match(value or "")
        if match is None or value is None:
            continue
        if int(match.group(1)) > MAX_STEP:
            warnings.append(f"{value[:60]}: step number out of range; read as a plain annotation")
            continue
        steps[code] = int(match.group(1))
    return steps


def _attribute_steps(
    table: pa.Table, warnings: list[str], step_from: np.ndarray | None = None
) -> tuple[pa.Table, pa.Table]:
    """Fill ``step`` (host work by time inside ProfilerStep#N, device work through its launch, a row whose
    ``step_from`` names another row through that row: a host lane's collective through its enqueue) and ``seq``;
    return the events and the steps table. Every step is kept, the last one included."""
    names = table.column("name").combine_chunks()
    device = table.column("device").to_numpy()
    start = table.column("start_ns").to_numpy()
    end = start + table.column("dur_ns").to_numpy()
    name_values = names.dictionary.to_pylist()
    step_code = _step_names(name_values, warnings)
    codes = names.indices.to_numpy(zero_copy_only=False)
    is_step = (
        np.isin(codes, np.fromiter(step_code, dtype=np.int64)) & (device < 0)
        if step_code
        else np.zeros(len(codes), bool)
    )
    step_rows = np.flatnonzero(is_step)
    step_ids = np.array([step_code[int(c)] for c in codes[step_rows]], dtype=np.int64)
    order = np.argsort(start[step_rows], kind="stable")
    step_rows, step_ids = step_rows[order], step_ids[order]
    s_start, s_end = start[step_rows], end[step_rows]

    step = step_of(start, s_start, s_end, step_ids)
    # Device work belongs to the step its launch came from (kernels often run after the CPU step ended).
    correlation = table.column("correlation").to_numpy()
    launches = np.flatnonzero(
        schema.in_values(table.column("category"), _LAUNCH_CATEGORIES) & (correlation >= 0)
    )
    on_device = device >= 0
    if len(launches):
        launch_corr = correlation[launches]
        order = np.argsort(launch_corr, kind="stable")
        launch_corr, launch_step = launch_corr[order], step[launches][order]
        dev_rows = np.flatnonzero(on_device & (correlation >= 0))
        pos = np.searchsorted(launch_corr, correlation[dev_rows])
        found = (pos < len(launch_corr)) & (
            launch_corr[np.minimum(pos, len(launch_corr) - 1)] == correlation[dev_rows]
        )
        step[dev_rows[found]] = launch_step[pos[found]]
    if step_from is not None:
        linked = np.flatnonzero(step_from >= 0)
        step[linked] = step[step_from[linked]]
    step[step_rows] = step_ids
    table = table.set_column(table.schema.get_field_index("step"), "step", pa.array(step.astype(np.int32)))
    table = table.set_column(table.schema.get_field_index("seq"), "seq", sequence_numbers(table))

    device_work = np.flatnonzero(
        on_device & schema.in_values(table.column("kind"), schema.DEVICE_KINDS) & (step >= 0)
    )
    spans = _device_spans(step[device_work], start[device_work], end[device_work])
    rows = {
        "rank": [-1] * len(step_rows),
        "step": step_ids.tolist(),
        "start_ns": start[step_rows].tolist(),
        "end_ns": end[step_rows].tolist(),
        "device_start_ns": [spans.get(int(sid), (None, None))[0] for sid in step_ids],
        "device_end_ns": [spans.get(int(sid), (None, None))[1] for sid in step_ids],
    }
    return table, schema.build(schema.STEPS, rows, len(step_rows))


def _device_spans(step: np.ndarray, start: np.ndarray, end: np.ndarray) -> dict[int, tuple[int, int]]:
    """step -> (first start, last end) of its device work."""
    if len(step) == 0:
        return {}
    order = np.argsort(step, kind="stable")
    ids, first = np.unique(step[order], return_index=True)
    lo = np.minimum.reduceat(start[order], first)
    hi = np.maximum.reduceat(end[order], first)
    return {int(i): (int(a), int(b)) for i, a, b in zip(ids, lo, hi, strict=True)}


def _groups(info: dict[str, Any], table: pa.Table) -> list[Group]:
    """Process groups from ``distributedInfo.pg_config``, completed by the groups named on events."""
    found = {g.group: g for g in _config_groups(info)}
    pairs = (
        table.select(["group", "group_ranks"]).drop_null().group_by(["group", "group_ranks"]).aggregate([])
    )
    for name, members in zip(
        pairs.column("group").to_pylist(), pairs.column("group_ranks").to_pylist(), strict=True
    ):
        if name not in found:
            parsed = parse_rank_list(members)
            if parsed is not None:
                found[name] = Group(name, parsed)
    return list(found.values())


def _config_groups(info: dict[str, Any]) -> list[Group]:
    """The process groups ``distributedInfo.pg_config`` lists (the rank's own, in PyTorch 2.x)."""
    found: dict[str, Group] = {}
    configs = info.get("pg_config")
    for pg in configs if isinstance(configs, list) else []:
        if not isinstance(pg, dict):
            continue
        name = str_or_none(pg.get("pg_name"))
        ranks = pg.get("ranks")
        members = parse_rank_list(ranks if isinstance(ranks, list | str) else None)
        if name is None or members is None:
            continue
        found[name] = Group(
            name, members, str_or_none(pg.get("pg_desc")), str_or_none(pg.get("backend_config"))
        )
    return list(found.values())
