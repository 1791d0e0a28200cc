"""What every parser returns, and the helpers they share.

A parser reads one *source* (a Kineto trace file, an Ascend ``*_ascend_pt`` folder, ...) holding the timeline of
one rank and returns a :class:`ParsedRank`: the rank's canonical ``events`` and ``steps`` tables on the rank's own
clock, what it knows of the rank (rank id, host, world size, parallel layout) and of its communication groups.
Clock alignment across ranks, rank de-duplication and caching happen later, in :mod:`paradiag.ingest`.
"""

from __future__ import annotations

import contextlib
import ctypes
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from paradiag import schema


def release_memory() -> None:
    """Hand the memory freed since the last call back to the system (glibc keeps freed heap pages otherwise): a
    parse frees a few times the size of its table, which would still count while the table is sorted and written."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class TraceError(Exception):
    """A source that cannot be read; the message names the file and says what is wrong."""

    def __init__(self, source: str | Path, problem: str) -> None:
        super().__init__(f"{source}: {problem}")
        self.source = str(source)
        self.problem = problem


@dataclass
class Group:
    """A communication group (process group, HCCL group) as one rank saw it."""

    group: str
    ranks: list[int]
    description: str | None = None
    backend: str | None = None
    size: int | None = None  # number of members when the trace says it but does not list them


@dataclass
class ParsedRank:
    """One rank's timeline in canonical form, times on the rank's own clock."""

    source: str
    format: str
    events: pa.Table
    steps: pa.Table
    rank: int | None = None
    rank_from: str = "metadata"  # metadata, file name, assigned
    device_type: str = "gpu"
    host: str | None = None
    device: int | None = None
    world_size: int | None = None
    parallel: dict[str, int] = field(default_factory=dict)  # dp/tp/pp/ep coordinates when the source says
    groups: list[Group] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    extra: dict[str, pa.Table] = field(default_factory=dict)  # format-specific tables (e.g. link traffic)
    run_id: str | None = None  # identifies the profiling run, to warn when one folder mixes two runs


MAX_RANK = 2**31 - 1  # ranks are int32 in every table

_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def rank_from_name(path: str | Path) -> int | None:
    """The rank a file or folder name states (``rank-3.json``, ``worker_rank7``), if any."""
    match = _RANK_IN_NAME.search(Path(path).name)
    return int(match.group(1)) if match and int(match.group(1)) <= MAX_RANK else None


_COLLECTIVE_ALIASES = {
    "allreduce": "all_reduce",
    "all_reduce": "all_reduce",
    "allreduce_coalesced": "all_reduce",
    "allreduce_sparse": "all_reduce",
    "hcomallreduce": "all_reduce",
    "allgather": "all_gather",
    "all_gather": "all_gather",
    "_allgather_base": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "allgather_coalesced": "all_gather",
    "hcomallgather": "all_gather",
    "reducescatter": "reduce_scatter",
    "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "hcomreducescatter": "reduce_scatter",
    "alltoall": "all_to_all",
    "all_to_all": "all_to_all",
    "alltoall_base": "all_to_all",
    "alltoallv": "all_to_all",
    "all2all": "all_to_all",
    "hcomalltoall": "all_to_all",
    "hcomalltoallv": "all_to_all",
    "broadcast": "broadcast",
    "hcombroadcast": "broadcast",
    "reduce": "reduce",
    "hcomreduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
    "barrier": "barrier",
    "send": "send",
    "hcomsend": "send",
    "recv": "recv",
    "receive": "recv",
    "hcomreceive": "recv",
    "hcomrecv": "recv",
    "sendrecv": "send_recv",
    "send_recv": "send_recv",
    "batchsendrecv": "send_recv",
    "hcombatchsendrecv": "send_recv",
}

# Kernel-name fragments, longest first so that AllReduce does not match Reduce.
_COLLECTIVE_IN_NAME = (
    ("reducescatter", "reduce_scatter"),
    ("allreduce", "all_reduce"),
    ("allgather", "all_gather"),
    ("alltoall", "all_to_all"),
    ("sendrecv", "send_recv"),
    ("broadcast", "broadcast"),
    ("barrier", "barrier"),
    ("reduce", "reduce"),
    ("gather", "gather"),
    ("scatter", "scatter"),
    ("receive", "recv"),
    ("recv", "recv"),
    ("send", "send"),
)


def normalize_collective(name: str | None) -> str | None:
    """Map a collective name as producers spell it (``allreduce``, ``_allgather_base``, ``hcom_allReduce_``)
    to paradiag's vocabulary; None when the name is not a collective."""
    if not name:
        return None
    key = name.strip().lower().replace("-", "_").rstrip("_")
    if key in _COLLECTIVE_ALIASES:
        return _COLLECTIVE_ALIASES[key]
    squashed = key.replace("_", "")
    if squashed in _COLLECTIVE_ALIASES:
        return _COLLECTIVE_ALIASES[squashed]
    return None


def collective_from_kernel_name(name: str) -> str:
    """The collective a communication kernel name implies (``ncclKernel_AllReduce_RING_LL_Sum_float``,
    ``ncclDevKernel_SendRecv``, ``hcom_allReduce__123_0_1``); ``other`` when it does not say."""
    squashed = name.lower().replace("_", "")
    for fragment, collective in _COLLECTIVE_IN_NAME:
        if fragment in squashed:
            return collective
    return "other"


def parse_rank_list(text: str | list[int] | None) -> list[int] | None:
    """``"[0, 1, 2]"`` (how Kineto writes group ranks) or a list -> list of ints."""
    if text is None:
        return None
    ranks: list[int] | None
    if isinstance(text, list):
        ranks = [int(r) for r in text if isinstance(r, int | float | str) and str(r).lstrip("-").isdigit()]
    else:
        ranks = [int(d) for d in re.findall(r"-?\d+", text)] or None
    if ranks is not None and not all(0 <= r <= MAX_RANK for r in ranks):
        return None  # a rank beyond int32 or negative: the list is broken, not a real group
    return ranks


def ranks_key(ranks: list[int] | None) -> str | None:
    """The canonical string of a rank list stored in ``events.group_ranks``."""
    return None if ranks is None else ",".join(str(r) for r in ranks)


MAX_NS = 2**62  # ~146 years: any valid time or duration (and their sum) stays inside int64


def us_to_ns(values: pa.Array | list[Any]) -> np.ndarray:
    """Microsecond timestamps (integers or floats with a ns fraction) to int64 nanoseconds without losing the
    integer part to float rounding (epoch microseconds do not fit a float64 once multiplied by 1000).
    Values whose nanoseconds would reach :data:`MAX_NS` (or NaN) come out as -1, which callers treat as invalid."""
    arr = values if isinstance(values, pa.Array) else pa.array(values, type=pa.float64(), from_pandas=True)
    if pa.types.is_integer(arr.type):
        ints = arr.to_numpy(zero_copy_only=False).astype(np.int64)
        return np.where(np.abs(ints) < MAX_NS // 1000, ints * 1000, -1)
    f = np.asarray(arr.cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)
    in_range = np.abs(f) < MAX_NS / 1000  # False for NaN too
    f = np.where(in_range, f, 0.0)
    whole = np.floor(f)
    ns = whole.astype(np.int64) * 1000 + np.rint((f - whole) * 1000.0).astype(np.int64)
    return np.where(in_range, ns, -1)


def step_of(
    times_ns: np.ndarray, step_starts: np.ndarray, step_ends: np.ndarray, step_ids: np.ndarray
) -> np.ndarray:
    """For each time, the id of the step whose [start, end) contains it, else -1 (steps sorted by start)."""
    if len(step_ids) == 0:
        return np.full(len(times_ns), -1, dtype=np.int32)
    idx = np.searchsorted(step_starts, times_ns, side="right") - 1
    valid = idx >= 0
    safe = np.where(valid, idx, 0)
    inside = valid & (times_ns < step_ends[safe])
    return np.where(inside, step_ids[safe], -1).astype(np.int32)


def sequence_numbers(events: pa.Table) -> pa.Array:
    """The ``seq`` column: each device-side communication event's order among the rank's events of the same
    group within the same step; for send/recv, among the sends to (receives from) the same peer, so that the
    k-th send from a to b is the k-th receive at b from a (work outside any step counts as one more step, -1);
    null for other events."""
    n = events.num_rows
    is_comm = schema.in_values(events.column("kind"), [schema.COMMUNICATION])
    device = events.column("device").to_numpy()
    step = events.column("step").to_numpy()
    mask = is_comm & (device >= 0)
    seq = np.full(n, -1, dtype=np.int64)
    idx = np.flatnonzero(mask)
    if len(idx):
        group = events.column("group").combine_chunks().cast(pa.string()).take(pa.array(idx)).to_pylist()
        peer = events.column("peer").combine_chunks().take(pa.array(idx)).to_pylist()
        coll = events.column("collective").combine_chunks().cast(pa.string()).take(pa.array(idx)).to_pylist()
        starts = events.column("start_ns").to_numpy()[idx]
        order = np.lexsort((starts, step[idx]))
        counters: dict[tuple[Any, ...], int] = {}
        for j in order:
            p2p = coll[j] in schema.P2P_COLLECTIVES
            key = (group[j], peer[j] if p2p else None, coll[j] if p2p else None, int(step[idx[j]]))
            counters[key] = counters.get(key, -1) + 1
            seq[idx[j]] = counters[key]
    return pa.array(np.minimum(seq, 2**15 - 1), type=pa.int16(), mask=seq < 0)


# How frameworks name their process groups (pg_desc, HCCL group names), by role. DeviceMesh: ``mesh_<dim>``
# (``mesh_dp``, ``mesh_dp_shard``, ``mesh_dp_replicate``, torchtitan's flattened ``mesh_dp_shard_cp``);
# Megatron: ``TENSOR_MODEL_PARALLEL_GROUP``, ``CONTEXT_PARALLEL_GROUP``, ...; DeepSpeed: ``ep_size_4``; Ascend:
# ``tp``, ``dp``. Expert first: Megatron's EXPERT_DATA_PARALLEL_GROUP is an expert group, not a data one.
_ROLE_PHRASES = (
    ("ep", ("expert",)),
    ("tp", ("tensor_model", "tensor_parallel")),
    ("cp", ("context_parallel", "sequence_parallel")),
    ("pp", ("pipeline",)),
    ("dp", ("data_parallel",)),
)
_ROLE_TOKENS = {
    **dict.fromkeys(("dp", "ddp", "fsdp", "hsdp", "zero", "replicate", "shard", "data", "batch"), "dp"),
    **dict.fromkeys(("tp", "tensor", "mp"), "tp"),
    **dict.fromkeys(("pp", "pipe", "pipeline", "stage"), "pp"),
    **dict.fromkeys(("ep", "expert", "moe"), "ep"),
    **dict.fromkeys(("cp", "sp", "context", "seq", "ulysses", "ring"), "cp"),
}
_WORLD_NAMES = frozenset({"default_pg", "default_group", "hccl_world_group", "world", "global"})


def group_role(description: str | None) -> str | None:
    """dp, tp, pp, ep, cp or world from a process group's name; None when the name says nothing. The first
    word decides a short name (``mesh_dp_shard_cp`` is FSDP's group: dp), a phrase a long one."""
    text = (description or "").strip().lower()
    if text in _WORLD_NAMES:
        return "world"
    for role, phrases in _ROLE_PHRASES:
        if any(p in text for p in phrases):
            return role
    tokens = [
        t for t in re.split(r"[^a-z]+", text) if t and t not in ("mesh", "group", "pg", "process", "size")
    ]
    return _ROLE_TOKENS.get(tokens[0]) if tokens else None
