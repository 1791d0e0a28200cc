"""The canonical tables every parser fills (documented for users in docs/schema.md).

A distributed training job is four Arrow tables:

* ``events``: one row per interval on a rank's timeline (GPU/NPU kernels, memory copies, host operators,
  runtime calls, annotations, collectives), times in integer nanoseconds on the job's aligned clock.
* ``ranks``: one row per rank: where it ran, its parallel coordinates, the clock offset applied to it.
* ``steps``: one row per (rank, profiler step): the host span of the step and the device span of the work
  launched in it.
* ``groups``: one row per communication group (process group / HCCL group): its id and member ranks.

Columns are narrow integers and dictionary-encoded strings so that an event costs under 64 bytes in memory
(HTA's DataFrame: about 200).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SCHEMA_VERSION = 1

# Event kinds: what the interval is, independent of the source format.
COMPUTE = "compute"  # a kernel doing math on the device
COMMUNICATION = "communication"  # a collective or p2p transfer on the device
MEMORY = "memory"  # memcpy / memset on the device
SYNC = "sync"  # the device waiting on an event or stream (cudaStreamWaitEvent, Event Sync, ...)
HOST = "host"  # host-side operator, runtime/driver call, Python function
ANNOTATION = "annotation"  # user ranges (ProfilerStep#N, record_function), on host or device
KINDS: tuple[str, ...] = (COMPUTE, COMMUNICATION, MEMORY, SYNC, HOST, ANNOTATION)
DEVICE_KINDS: tuple[str, ...] = (COMPUTE, COMMUNICATION, MEMORY, SYNC)

# Collective vocabulary (the same for NCCL, RCCL, HCCL, gloo).
COLLECTIVES: tuple[str, ...] = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "barrier",
    "send",
    "recv",
    "send_recv",
    "other",
)
P2P_COLLECTIVES = frozenset({"send", "recv", "send_recv"})

DICT8 = pa.dictionary(pa.int8(), pa.string())
DICT16 = pa.dictionary(pa.int16(), pa.string())
DICT32 = pa.dictionary(pa.int32(), pa.string())

EVENTS = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),
        pa.field(
            "device", pa.int8(), nullable=False
        ),  # device index on its host (0..127); -1 for host events
        pa.field("track", pa.int32(), nullable=False),  # stream id on the device, thread id on the host
        pa.field("kind", DICT8, nullable=False),
        pa.field("category", DICT8, nullable=False),  # the source's own category (kernel, cpu_op, ...)
        pa.field("name", DICT32, nullable=False),
        pa.field("start_ns", pa.int64(), nullable=False),
        pa.field("dur_ns", pa.int64(), nullable=False),
        pa.field("step", pa.int32(), nullable=False),  # profiler step the work was launched in, -1 if none
        pa.field("correlation", pa.int32(), nullable=False),  # launch <-> device link, -1 if none
        pa.field("external_id", pa.int32(), nullable=False),  # device work <-> host operator, -1 if none
        # Communication (null for other events).
        pa.field("collective", DICT8),
        pa.field("group", DICT16),  # process group id as the job names it ("0", "hccl_world_group", ...)
        pa.field("group_ranks", DICT16),  # the group's global ranks, "0,1,2,3"
        pa.field("peer", pa.int32()),  # the other rank of a send/recv
        pa.field("bytes", pa.int64()),  # payload of this rank's part of the collective / copy
        pa.field("seq", pa.int16()),  # order per (group, step) on this rank; send/recv: per (peer, direction)
    ],
    metadata={"paradiag.schema_version": str(SCHEMA_VERSION), "paradiag.table": "events"},
)

RANKS = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("host", pa.string()),
        pa.field("device", pa.int16()),
        pa.field("device_type", DICT8, nullable=False),  # gpu, npu or cpu (a rank with no device work)
        pa.field("world_size", pa.int32()),
        pa.field("dp", pa.int16()),
        pa.field("tp", pa.int16()),
        pa.field("pp", pa.int16()),
        pa.field("ep", pa.int16()),
        pa.field("clock_offset_ns", pa.int64(), nullable=False),  # added to the rank's own timestamps
        pa.field(
            "clock_uncertainty_ns", pa.int64()
        ),  # residual spread of the estimate, null if not estimated
        pa.field("format", DICT8, nullable=False),  # kineto, ascend_text, ascend_db, msprof, simulator ...
        pa.field("source", pa.string(), nullable=False),  # file or folder, relative to the job folder
        pa.field("num_events", pa.int64(), nullable=False),
    ],
    metadata={"paradiag.schema_version": str(SCHEMA_VERSION), "paradiag.table": "ranks"},
)

STEPS = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("step", pa.int32(), nullable=False),
        pa.field("start_ns", pa.int64(), nullable=False),  # host span of the step
        pa.field("end_ns", pa.int64(), nullable=False),
        pa.field("device_start_ns", pa.int64()),  # first device event of work launched in the step
        pa.field("device_end_ns", pa.int64()),  # last device event end of that work
    ],
    metadata={"paradiag.schema_version": str(SCHEMA_VERSION), "paradiag.table": "steps"},
)

GROUPS = pa.schema(
    [
        pa.field("group", pa.string(), nullable=False),
        pa.field("description", pa.string()),  # pg_desc ("default_pg", "undefined", ...) or HCCL group name
        pa.field("backend", pa.string()),
        pa.field("ranks", pa.list_(pa.int32()), nullable=False),
    ],
    metadata={"paradiag.schema_version": str(SCHEMA_VERSION), "paradiag.table": "groups"},
)

TABLES: dict[str, pa.Schema] = {"events": EVENTS, "ranks": RANKS, "steps": STEPS, "groups": GROUPS}


def _dictionary(values: Sequence[str] | np.ndarray | pa.Array, index_type: pa.DataType) -> pa.DictionaryArray:
    arr = values if isinstance(values, pa.Array) else pa.array(values, type=pa.string())
    encoded = arr if isinstance(arr, pa.DictionaryArray) else arr.dictionary_encode()
    return pa.DictionaryArray.from_arrays(encoded.indices.cast(index_type), encoded.dictionary)


def column(field: pa.Field, values: Any) -> pa.Array:
    """Build one column of a canonical table from a Python or numpy sequence."""
    if pa.types.is_dictionary(field.type):
        return _dictionary(values, field.type.index_type)
    if isinstance(values, pa.Array):
        return values.cast(field.type)
    if isinstance(values, np.ndarray) and values.dtype.kind in "iuf" and not pa.types.is_list(field.type):
        return pa.array(values.astype(field.type.to_pandas_dtype(), copy=False))
    return pa.array(values, type=field.type)


def build(schema: pa.Schema, columns: Mapping[str, Any], length: int | None = None) -> pa.Table:
    """Assemble a table of ``schema`` from column values; absent nullable columns become all-null."""
    if length is None:
        length = next((len(v) for v in columns.values()), 0)
    arrays = []
    for field in schema:
        if field.name in columns and columns[field.name] is not None:
            arrays.append(column(field, columns[field.name]))
        elif field.nullable:
            arrays.append(pa.nulls(length, type=field.type))
        else:
            raise ValueError(
                f"column {field.name!r} of table {schema.metadata[b'paradiag.table'].decode()} is required"
            )
    return pa.Table.from_arrays(arrays, schema=schema)


def in_values(column: pa.Array | pa.ChunkedArray, values: Any) -> np.ndarray:
    """Boolean mask of the rows of a dictionary (or string) column whose value is in ``values``, computed on
    the dictionary codes: no Python string per row."""
    values = set(values)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if not pa.types.is_dictionary(column.type):
        return np.asarray(
            pc.is_in(column, pa.array(sorted(values), type=column.type))
            .fill_null(False)
            .to_numpy(zero_copy_only=False)
        )
    wanted = [i for i, v in enumerate(column.dictionary.to_pylist()) if v in values]
    codes = column.indices.to_numpy(zero_copy_only=False)
    return (
        np.isin(codes, np.array(wanted, dtype=codes.dtype)) if wanted else np.zeros(len(column), dtype=bool)
    )


def dictionary_array(
    codes: np.ndarray, dictionary: Sequence[str], index_type: pa.DataType, mask: np.ndarray | None = None
) -> pa.DictionaryArray:
    """A dictionary column from integer codes into ``dictionary`` (rows where ``mask`` is True are null)."""
    indices = pa.array(codes.astype(index_type.to_pandas_dtype(), copy=False), mask=mask)
    return pa.DictionaryArray.from_arrays(indices, pa.array(list(dictionary), type=pa.string()))


def empty(schema: pa.Schema) -> pa.Table:
    """A table of ``schema`` with no rows."""
    return schema.empty_table()


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Cast ``table`` to ``schema`` (column order, types, dictionary index widths), checking required columns."""
    return build(
        schema, {name: table.column(name).combine_chunks() for name in table.column_names}, table.num_rows
    )


def write_arrow_file(table: pa.Table, path: Path) -> None:
    """``table`` as an Arrow IPC file: the small per-rank tables the map hands the reduce, which opens thousands of
    them (an IPC file opens in 0.1-0.2 ms of CPU, a tiny Parquet file in about 0.8)."""
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def read_arrow_file(path: Path) -> pa.Table:
    """A table :func:`write_arrow_file` wrote, read whole into memory (no file stays open or mapped)."""
    return pa.ipc.open_file(pa.py_buffer(path.read_bytes())).read_all()
