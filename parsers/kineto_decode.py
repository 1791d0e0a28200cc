"""Decoding a Kineto trace into columns, in chunks, with typed msgspec Structs.

The file's ``traceEvents`` are streamed a slice of text at a time (:mod:`paradiag.parsers.json_stream`); each
slice is decoded into Structs that name only the fields paradiag keeps, turned into Arrow columns, and dropped.
Memory therefore holds the columns plus one slice, never the whole text, and no dict is built per event.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter, is_not
from pathlib import Path
from typing import Any, ClassVar, Union

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from paradiag import schema
from paradiag.parsers.base import MAX_RANK, TraceError, normalize_collective, parse_rank_list, ranks_key
from paradiag.parsers.json_stream import BLOCK, check_names, open_text, skipped_phases

_NULL = msgspec.Raw(b"null")


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
    pg_name: str | None = msgspec.field(default=None, name="Process Group Name")
    pg_ranks: str | None = msgspec.field(default=None, name="Process Group Ranks")
    rank: int | None = msgspec.field(default=None, name="Rank")
    # Shapes and scalar inputs (record_shapes): kept undecoded, read only for the few communication operators.
    input_dims: msgspec.Raw = msgspec.field(default=_NULL, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=_NULL, name="Input type")
    concrete: msgspec.Raw = msgspec.field(default=_NULL, name="Concrete Inputs")


class _Fields(msgspec.Struct, gc=False):
    """The fields paradiag reads of an event."""

    name: str | None = None
    cat: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: int | float | None = None
    dur: int | float | None = None
    args: Args = Args()


class Complete(_Fields, tag_field="ph", tag="X"):
    """A complete event (``"ph": "X"``), the only phase paradiag keeps."""

    ph: ClassVar[str] = "X"


# The other phases of the Chrome trace format decode to empty objects (flow events are a third of a Kineto trace).
# A slice with a phase not named here is decoded by Event instead.
_OTHER_PHASES = skipped_phases("BEbeiInsTtfpSFPONDMRCcVv()")


class Event(_Fields):
    """An event of any phase, or of none."""

    ph: str = ""


# Loose variants: a chunk whose values have unexpected types (a string stream id, a float correlation) still
# loads; values that do not convert become nulls.
class LooseArgs(msgspec.Struct, gc=False, frozen=True):
    external_id: Any = msgspec.field(default=None, name="External id")
    correlation: Any = None
    device: Any = None
    stream: Any = None
    collective: Any = msgspec.field(default=None, name="Collective name")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    dtype: Any = None
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    rank: Any = msgspec.field(default=None, name="Rank")
    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    input_type: Any = msgspec.field(default=None, name="Input type")
    concrete: Any = msgspec.field(default=None, name="Concrete Inputs")


class LooseEvent(msgspec.Struct, gc=False):
    ph: Any = ""
    name: Any = None
    cat: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: LooseArgs = LooseArgs()


class Outer(msgspec.Struct, gc=False):
    """The top level: events stay raw JSON slices, the small metadata is decoded as plain values."""

    traceEvents: list[msgspec.Raw] | None = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None
    host_name: Any = None


_OUTER = msgspec.json.Decoder(Outer)
_ANY_PHASE: Any = Union.__getitem__(
    (Complete, *_OTHER_PHASES)
)  # a Union built at run time (the phases above)
EVENTS_DECODERS = (msgspec.json.Decoder(list[_ANY_PHASE]), msgspec.json.Decoder(list[Event]))
LOOSE_EVENTS_DECODER = msgspec.json.Decoder(list[LooseEvent])

DEVICE_CATEGORIES = {
    "kernel": schema.COMPUTE,
    "Kernel": schema.COMPUTE,
    "gpu_memcpy": schema.MEMORY,
    "Memcpy": schema.MEMORY,
    "gpu_memset": schema.MEMORY,
    "Memset": schema.MEMORY,
    "cuda_sync": schema.SYNC,
    "gpu_user_annotation": schema.ANNOTATION,
}
HOST_CATEGORIES = {
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
SKIPPED_CATEGORIES = frozenset({"Trace"})  # the profiler's own whole-window span
_STRINGS = pa.dictionary(pa.int32(), pa.string())
_RECORD_PARAM_COMMS = pa.array(["record_param_comms"])
_OPERATOR_CATEGORIES = pa.array(["cpu_op", "Operator"])
COMM_KERNEL = re.compile(r"^(nccl|rccl)[A-Za-z]*Kernel|^ncclDevKernel|^mscclKernel")
DTYPE_BYTES = {  # dtype names and the C++ type names "Input type" gives (lower case)
    **dict.fromkeys(("float", "float32", "int", "int32", "unsigned int", "c10::complex<c10::half>"), 4),
    **dict.fromkeys(
        (
            "double",
            "float64",
            "long",
            "int64",
            "long int",
            "long long",
            "unsigned long",
            "c10::complex<float>",
        ),
        8,
    ),
    **dict.fromkeys(
        (
            "half",
            "float16",
            "bfloat16",
            "c10::bfloat16",
            "c10::half",
            "short",
            "int16",
            "short int",
            "unsigned short",
        ),
        2,
    ),
    **dict.fromkeys(
        (
            "byte",
            "char",
            "bool",
            "int8",
            "uint8",
            "unsigned char",
            "signed char",
            "float8_e4m3fn",
            "float8_e5m2",
            "c10::float8_e4m3fn",
            "c10::float8_e5m2",
        ),
        1,
    ),
    "c10::complex<double>": 16,
}


def read_bytes(path: Path, shown: Path | str | None = None) -> bytes:
    """The file's JSON text, gunzipped when the file is gzip, within ``PARADIAG_MAX_FILE_MB``; errors name
    ``shown`` (default: the path)."""
    with open_text(path, path if shown is None else shown) as reader:
        return b"".join(iter(lambda: reader.read(BLOCK), b""))


def decode_outer(data: bytes, shown: Path | str) -> Outer:
    """The document's small metadata (distributedInfo, baseTimeNanoseconds, ...), the events array emptied."""
    try:
        outer = _OUTER.decode(data)
    except RecursionError as exc:
        raise TraceError(shown, "values nested too deeply outside 'traceEvents'") from exc
    except msgspec.ValidationError as exc:
        raise TraceError(shown, f"not a PyTorch profiler trace ({exc})") from exc
    except msgspec.DecodeError as exc:
        raise TraceError(shown, f"invalid JSON ({exc})") from exc
    return outer


get_args = attrgetter("args")
_get = {name: attrgetter(name) for name in ("pid", "tid", "ts", "dur", "name", "cat")}
_get_arg = {
    name: attrgetter(name)
    for name in ("device", "stream", "correlation", "external_id", "collective", "input_dims", "input_type")
}


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def int_or_none(value: Any) -> int | None:
    """An integer from an int, a float or a numeric string; None for anything else and for values outside
    int64 (no column holds them: 1e300 or 2**70 is a broken value, not a big one)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float):
        value = int(value) if value == value and abs(value) < 2.0**63 else None
    elif isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            return None
    if isinstance(value, int) and INT64_MIN <= value <= INT64_MAX:
        return value
    return None


def str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else (None if value is None else str(value))


def int_column(values: list[Any]) -> pa.Array:
    """Integers (or nulls) as int64; values of another type (a string id, a float) are converted one by one."""
    try:
        return pa.array(values, type=pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        return pa.array([int_or_none(v) for v in values], type=pa.int64())


def num_column(values: list[Any]) -> pa.Array:
    """Numbers (or nulls) as float64; anything else becomes null."""
    try:
        return pa.array(values, type=pa.float64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        return pa.array([_float_or_none(v) for v in values], type=pa.float64())


def _float_or_none(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value)
    except OverflowError:  # an integer beyond float range
        return None


def text_column(values: list[Any]) -> pa.Array:
    """Strings; anything that is not a string becomes ''."""
    try:
        return pa.array(values, type=pa.string()).fill_null("")
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pa.array([v if isinstance(v, str) else "" for v in values], type=pa.string())


def dictionary_column(values: list[Any]) -> pa.DictionaryArray:
    """Strings, dictionary-encoded; anything that is not a string becomes ''."""
    try:
        column = pa.array(values, type=_STRINGS)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return text_column(values).dictionary_encode()
    return column if column.null_count == 0 else text_column(values).dictionary_encode()


@dataclass
class CommMeta:
    collective: str
    group: str | None
    group_ranks: str | None
    peer: int | None
    nbytes: int | None


def comm_meta(args: Any) -> CommMeta | None:
    """Collective metadata from ``record_param_comms``-style args (on the host call or copied onto the kernel)."""
    coll = normalize_collective(str_or_none(args.collective))
    if coll is None:
        return None
    members = parse_rank_list(str_or_none(args.pg_ranks))
    elements = max(int_or_none(args.in_nelems) or 0, int_or_none(args.out_nelems) or 0)
    dtype = str_or_none(args.dtype)
    nbytes = elements * DTYPE_BYTES.get(dtype.lower(), 4) if elements > 0 and dtype else None
    if nbytes is not None and nbytes > INT64_MAX:
        nbytes = None
    peer = None
    if coll in schema.P2P_COLLECTIVES:
        local = int_or_none(args.rank)  # send/recv record the peer's index inside the group
        if local is not None:
            peer = members[local] if members and 0 <= local < len(members) else local
        if peer is not None and not 0 <= peer <= MAX_RANK:
            peer = None
    return CommMeta(coll, str_or_none(args.pg_name), ranks_key(members), peer, nbytes)


COMM_OPERATOR = re.compile(r"^(c10d::|gloo:)")
NCCL_OPERATOR = re.compile(r"^nccl:")


def _decoded(value: Any) -> Any:
    """A Raw JSON value decoded (None when it is not valid JSON); other values as they are (the loose decoder's)."""
    if isinstance(value, msgspec.Raw):
        try:
            return msgspec.json.decode(value)
        except (msgspec.DecodeError, RecursionError):
            return None
    return value


# Operators that only view, allocate or read out a tensor: no arithmetic on their inputs' data, not sized.
NO_WORK = frozenset(
    "aten::" + n
    for n in [
        "as_strided",
        "select",
        "slice",
        "view",
        "_unsafe_view",
        "reshape",
        "_reshape_alias",
        "t",
        "transpose",
        "permute",
        "expand",
        "expand_as",
        "unsqueeze",
        "squeeze",
        "alias",
        "detach",
        "lift_fresh",
        "resolve_conj",
        "resolve_neg",
        "split",
        "split_with_sizes",
        "chunk",
        "narrow",
        "unbind",
        "unflatten",
        "flatten",
        "empty",
        "empty_strided",
        "empty_like",
        "new_empty",
        "new_empty_strided",
        "item",
        "_local_scalar_dense",
        "size",
        "stride",
        "numel",
        "dim",
        "is_same_size",
        "result_type",
        "set_",
        "resize_",
        "_to_copy",
        "to",
    ]
)


def sizes_work(name: str | None) -> bool:
    """Whether an operator name is one whose inputs' size tells the work it does: a dispatcher operator
    (``namespace::op``) that is not a view, an allocation or a read-out (NO_WORK)."""
    if not name:
        return False
    return (
        "::" in name and not name.startswith(("autograd::", "torch::", "profiler::")) and name not in NO_WORK
    )


def numel(dims: Any, lists: Callable[[list[int]], int] = max) -> int:
    """Elements of a shape ``[a, b]``; of a tensor list ``[[a, b], [c]]``, ``lists`` of its shapes' (the largest,
    or ``sum``: all of them). 0 for a scalar (``[]``) or anything else."""
    if not isinstance(dims, list) or not dims:
        return 0
    if all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        n = 1
        for d in dims:
            n *= max(d, 0)
        return n
    parts = [numel(d, lists) for d in dims]
    return int(lists(parts)) if parts else 0


def _itemsize(op: OperatorInputs, i: int) -> int:
    """The bytes of one element of input ``i`` (its ``Input type``; 4 for an untyped tensor or tensor list, 0 for
    a scalar's type)."""
    dtype = op.types[i] if i < len(op.types) and isinstance(op.types[i], str) else ""
    return DTYPE_BYTES.get(
        dtype.lower(), 4 if dtype in ("TensorList", "Tensor", "GenericList") or not dtype else 0
    )


def tensor_bytes(op: OperatorInputs | None) -> int | None:
    """The largest tensor (or tensor list, by its largest shape) among an operator's inputs, in bytes."""
    if op is None:
        return None
    best = max((numel(dims) * _itemsize(op, i) for i, dims in enumerate(op.dims)), default=0)
    return best if 0 < best <= INT64_MAX else None


def operand_bytes(op: OperatorInputs) -> int | None:
    """The bytes of an operator's tensor inputs (tensors and tensor lists; scalars and None count nothing), from
    ``Input Dims`` and ``Input type``: the size of the data it works on, which grows with the batch, the sequence,
    the layer's width. None where no input is a tensor or the size is out of range."""
    total = sum(numel(dims, sum) * _itemsize(op, i) for i, dims in enumerate(op.dims))
    return total if 0 < total <= INT64_MAX else None


@dataclass
class OperatorInputs:
    """What ``record_shapes`` says of an operator's inputs: their shapes, types and scalar values."""

    dims: list[Any]
    types: list[Any]
    concrete: list[Any]

    @classmethod
    def of(cls, args: Any) -> OperatorInputs:
        values = [_decoded(v) for v in (args.input_dims, args.input_type, args.concrete)]
        return cls(*(v if isinstance(v, list) else [] for v in values))


@dataclass
class Columns:
    """Columns accumulated chunk by chunk, plus the collective metadata of the few events whose args name one."""

    shown: str = ""  # the file, for errors
    parts: dict[str, list[pa.Array]] = field(default_factory=dict)
    n: int = 0
    # row -> (its collective metadata, its External id, whether the collective is named by a string)
    collective_args: dict[int, tuple[CommMeta | None, int | None, bool]] = field(default_factory=dict)
    # row -> the shapes and scalar inputs of a communication operator (``c10d::*``, ``gloo:*``)
    comm_inputs: dict[int, OperatorInputs] = field(default_factory=dict)
    # row -> the recorded inputs of ProcessGroupNCCL's ``nccl:*`` annotations
    nccl_inputs: dict[int, OperatorInputs] = field(default_factory=dict)
    # a host operator's Input Dims and Input type (raw JSON text) -> the bytes of its tensor inputs (-1: none)
    _operand_sizes: dict[Any, int] = field(default_factory=dict)

    def _put(self, name: str, array: pa.Array) -> None:
        self.parts.setdefault(name, []).append(array)

    def add(self, events: list[Any]) -> None:
        complete = [e for e in events if e.ph == "X"]
        # Names and categories are dictionary-encoded as they are converted (a hash per row, in C): the chunks
        # hold codes instead of repeated strings, and the tests on a name run once per distinct name
        # (Columns.communication).
        cats = dictionary_column(list(map(_get["cat"], complete)))
        if not SKIPPED_CATEGORIES.isdisjoint(
            cats.dictionary.to_pylist()
        ):  # one event a file: checked per chunk
            complete = [e for e in complete if not (isinstance(e.cat, str) and e.cat in SKIPPED_CATEGORIES)]
            cats = dictionary_column(list(map(_get["cat"], complete)))
        if not complete:
            return
        n = len(complete)
        self._put("category", cats)
        names = dictionary_column(list(map(_get["name"], complete)))
        self._put("name", names)
        for key in ("ts", "dur"):
            self._put(key, num_column(list(map(_get[key], complete))))
        for key in ("pid", "tid"):
            self._put(key, int_column(list(map(_get[key], complete))))
        args = list(map(get_args, complete))
        for key in ("device", "stream", "correlation", "external_id"):
            self._put(key, int_column(list(map(_get_arg[key], args))))
        self._put("operand_bytes", self._operand_bytes(cats, names, args))
        has_collective = np.fromiter(
            map(is_not, map(_get_arg["collective"], args), repeat(None)), dtype=bool, count=n
        )
        for i in np.flatnonzero(has_collective).tolist():
            a = args[i]
            self.collective_args[self.n + i] = (
                comm_meta(a),
                int_or_none(a.external_id),
                isinstance(a.collective, str),
            )
        for i in np.flatnonzero(
            _by_code(names, pc.match_substring_regex(names.dictionary, COMM_OPERATOR.pattern))
        ).tolist():
            self.comm_inputs[self.n + i] = OperatorInputs.of(args[i])
        for i in np.flatnonzero(
            _by_code(names, pc.match_substring_regex(names.dictionary, NCCL_OPERATOR.pattern))
        ).tolist():
            self.nccl_inputs[self.n + i] = OperatorInputs.of(args[i])
        self.n += n

    def _operand_bytes(
        self, cats: pa.DictionaryArray, names: pa.DictionaryArray, args: list[Any]
    ) -> pa.Array:
        """Per row, the bytes of a host operator's tensor inputs (``record_shapes``: :func:`operand_bytes`), null
        elsewhere and for operators that do no arithmetic (:func:`sizes_work`: views, allocations, wrappers). A trace
        repeats a few shapes many times: each distinct text is sized once, and the keys are built by ``map``, in C
        (a GPU rank's 75k operators, 41k of them sized: ~15 ms of a 0.25 s parse)."""
        rows = np.flatnonzero(
            _by_code(cats, pc.is_in(cats.dictionary, _OPERATOR_CATEGORIES))
            & _by_code(names, pa.array([sizes_work(w) for w in names.dictionary.to_pylist()]))
        )
        out = np.zeros(len(args), np.int64)
        if not len(rows):
            return pa.array(out, mask=np.ones(len(args), dtype=bool))
        ops = list(map(args.__getitem__, rows.tolist()))
        dims = list(map(_get_arg["input_dims"], ops))
        types = list(map(_get_arg["input_type"], ops))
        if isinstance(ops[0], Args):  # a chunk is decoded by one decoder
            keys: list[Any] = list(zip(map(bytes, dims), map(bytes, types), strict=True))
        else:  # the loose decoder's values
            keys = [msgspec.json.encode([d, t]) for d, t in zip(dims, types, strict=True)]
        sizes = self._operand_sizes
        missing = set(keys).difference(sizes)
        if missing:
            first = dict(zip(keys, ops, strict=True))
            for key in missing:
                size = operand_bytes(OperatorInputs.of(first[key]))
                sizes[key] = -1 if size is None else size
        got = np.fromiter(map(sizes.__getitem__, keys), dtype=np.int64, count=len(keys))
        out[rows] = got
        mask = np.ones(len(args), dtype=bool)
        mask[rows] = got < 0
        return pa.array(out, mask=mask)

    def take(self, name: str) -> pa.Array:
        """The whole column, handed over: its chunks are dropped here, so that they and the whole column are not
        both held. A dictionary column's chunks are given one dictionary."""
        parts = self.parts.pop(name, [])
        if not parts:
            return pa.array([], type=pa.int64())
        if pa.types.is_dictionary(parts[0].type):
            return pa.chunked_array(parts).unify_dictionaries().combine_chunks()
        return pa.concat_arrays(parts)

    def take_strings(self, name: str, what: str) -> pa.DictionaryArray:
        """A dictionary column of strings, handed over, its values checked against the string limit."""
        column = self.take(name)
        check_names(column.dictionary, self.shown, what)
        return column

    def communication(
        self, names: pa.DictionaryArray, on_device: np.ndarray, external_id: np.ndarray
    ) -> Communication:
        """Which rows are communication and what their args say, tested once per distinct name of the file."""
        is_comm_name = _by_code(names, pc.match_substring_regex(names.dictionary, COMM_KERNEL.pattern))
        is_param = _by_code(names, pc.is_in(names.dictionary, _RECORD_PARAM_COMMS))
        found = Communication()
        for row, (
            meta,
            ext,
            _,
        ) in self.collective_args.items():  # in row order: the last call of an External id wins
            if meta is not None and is_param[row] and not on_device[row]:
                found.meta[row] = meta
                if ext is not None:
                    found.host_meta[ext] = meta
        named = np.zeros(self.n, dtype=bool)
        named[[row for row, (_, _, is_text) in self.collective_args.items() if is_text]] = True
        for row in np.flatnonzero(on_device & (is_comm_name | named)).tolist():
            found.comm_rows.append(row)
            meta = self.collective_args[row][0] if named[row] else None
            if meta is not None:
                # PyTorch copies the collective args onto the kernel but not the rank fields: a send/recv's peer
                # is only on its record_param_comms (the kernel's External id).
                found.meta[row] = _completed(meta, found.host_meta.get(int(external_id[row])))
            else:
                found.pending.append((row, int(external_id[row])))
        return found


def _completed(meta: CommMeta, host: CommMeta | None) -> CommMeta:
    """A kernel's own collective metadata, what it lacks taken from its record_param_comms call (same collective)."""
    if host is None or host.collective != meta.collective:
        return meta
    return CommMeta(
        meta.collective,
        meta.group or host.group,
        meta.group_ranks or host.group_ranks,
        meta.peer if meta.peer is not None else host.peer,
        meta.nbytes if meta.nbytes is not None else host.nbytes,
    )


@dataclass
class Communication:
    """The communication rows of a file and the collective metadata known so far."""

    meta: dict[int, CommMeta] = field(default_factory=dict)  # row -> collective metadata
    comm_rows: list[int] = field(default_factory=list)  # device rows that are communication kernels
    pending: list[tuple[int, int]] = field(
        default_factory=list
    )  # (kernel row, External id) to fill from host
    host_meta: dict[int, CommMeta] = field(default_factory=dict)  # External id -> record_param_comms metadata


def _by_code(array: pa.DictionaryArray, per_value: pa.Array) -> np.ndarray:
    """A boolean per row from a boolean per dictionary value."""
    values = per_value.fill_null(False).to_numpy(zero_copy_only=False)
    return values[array.indices.to_numpy(zero_copy_only=False)]
