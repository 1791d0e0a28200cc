"""The Ascend Chrome-trace timeline (torch_npu ``trace_view.json``, CANN ``msprof_*.json``), streamed into columns.

The file is one JSON array. It is read a slice of text at a time (:class:`~paradiag.parsers.json_stream.ArrayStream`),
each slice decoded into typed msgspec Structs that name only the fields paradiag keeps, turned into Arrow columns
and dropped: memory holds the columns and one slice, no Python object per event outlives its slice.

``ts`` is a *string* of epoch microseconds with three decimals ("1736408883704643.212"): a float64 would lose the
last digits, so the string column is converted to integer ns in bulk (Arrow: split at '.', cast, scale).
The process metadata (which pid is ``Python``, ``CANN``, ``Ascend Hardware``, ``HCCL``) sits in the middle of the
file, so every event keeps its pid/tid and is classified once the whole file is read (:mod:`ascend_timeline`).
The args only HCCL events carry (data type, count, plane-task ranks, sizes) are kept sparsely, for the rows that
can be HCCL events.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any, ClassVar, Union

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from paradiag.parsers import ascend_common as common
from paradiag.parsers.base import TraceError
from paradiag.parsers.json_stream import ArrayStream, LimitError, check_names, open_text, skipped_phases
from paradiag.parsers.kineto_decode import int_column, text_column

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
    stream: Value = msgspec.field(default=None, name="stream id")
    src_rank: Value = msgspec.field(default=None, name="src rank")
    dst_rank: Value = msgspec.field(default=None, name="dst rank")
    transport: str | None = msgspec.field(default=None, name="transport type")
    size: Value = msgspec.field(default=None, name="size(Byte)")
    link_type: str | None = msgspec.field(default=None, name="link type")


class Complete(msgspec.Struct, gc=False, tag="X", tag_field="ph"):
    """A complete (``X``) event. The decoder picks the Struct by ``ph``: each kind decodes only what it needs,
    and the counters (``C``, often half the file) decode to empty objects."""

    name: str = ""
    cat: str | None = None
    pid: Value = None
    tid: Value = None
    ts: Value = None
    dur: Value = None
    args: Args = Args()


class FlowStart(msgspec.Struct, gc=False, tag="s", tag_field="ph"):
    cat: str | None = None
    pid: Value = None
    tid: Value = None
    ts: Value = None
    id: Value = None
    start: ClassVar[bool] = True


class FlowEnd(FlowStart, tag="f"):
    start: ClassVar[bool] = False


class Metadata(msgspec.Struct, gc=False, tag="M", tag_field="ph"):
    name: str = ""
    pid: Value = None
    tid: Value = None
    args: Args = Args()


# Every other Chrome-trace phase: decoded to an empty object. An unknown phase (or none) fails validation and
# the slice is read with the loose decoder, which keeps ``ph`` as a field.
_SKIPPED = skipped_phases("BEiICbnetPONDVvRc()")
Event = Union[Complete, FlowStart, FlowEnd, Metadata, *_SKIPPED]  # type: ignore[valid-type]


class LooseArgs(msgspec.Struct, gc=False, frozen=True):
    """A slice whose values have unexpected types still loads: the columns convert what they can."""

    name: Any = None
    labels: Any = None
    level: Any = None
    connection_id: Any = None
    task_type: Any = msgspec.field(default=None, name="Task Type")
    data_type: Any = None
    count: Any = None
    stream: Any = msgspec.field(default=None, name="stream id")
    src_rank: Any = msgspec.field(default=None, name="src rank")
    dst_rank: Any = msgspec.field(default=None, name="dst rank")
    transport: Any = msgspec.field(default=None, name="transport type")
    size: Any = msgspec.field(default=None, name="size(Byte)")
    link_type: Any = msgspec.field(default=None, name="link type")


class LooseEvent(msgspec.Struct, gc=False):
    ph: Any = ""
    name: Any = ""
    cat: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    args: LooseArgs = LooseArgs()


DECODER: msgspec.json.Decoder[Any] = msgspec.json.Decoder(list[Event])
LOOSE_DECODER = msgspec.json.Decoder(list[LooseEvent])
_NPU_LABEL = re.compile(r"^NPU\s*(\d+)$")
_US_TEXT = r"^\s*(?P<sign>-?)(?P<whole>\d+)(?:\.(?P<frac>\d*))?\s*$"
RARE_INT = ("count", "stream", "src_rank", "dst_rank", "size")
RARE_TEXT = ("data_type", "transport", "link_type")
_get = {k: attrgetter(k) for k in ("pid", "tid", "ts", "dur", "name", "cat", "id", "args")}
_get_arg = {k: attrgetter(k) for k in ("connection_id", "level", "task_type", *RARE_INT, *RARE_TEXT)}


def ts_ns(value: Any) -> int | None:
    """One ``ts`` (string "1736408883704643.212", or a number) in integer ns, exactly."""
    if isinstance(value, str):
        whole, _, frac = value.strip().partition(".")
        try:
            sign = -1 if whole.startswith("-") else 1
            return int(whole) * 1000 + sign * (int((frac + "000")[:3]) if frac else 0)
        except ValueError:
            return None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value * 1000
    return common.scaled(value, 1000) if isinstance(value, float) else None


def dur_ns(value: Any) -> int | None:
    """One ``dur`` (µs, a number or numeric text) in integer ns; None for anything else, infinite or beyond int64."""
    return common.scaled(value, 1000)


def _int64(value: int | None) -> int | None:
    return value if value is not None and -(2**63) <= value < 2**63 else None


def us_text_to_ns(text: pa.Array) -> pa.Array:
    """Decimal microseconds as text ("1736408883704643.212") -> exact int64 ns; anything else -> null.
    Vectorized: when every value has exactly three decimals (what torch_npu writes) the '.' is dropped and the
    digits cast; otherwise the whole and fractional digits are cut apart by a regex kernel and cast."""
    three_decimals = pc.equal(pc.find_substring(text, "."), pc.subtract(pc.utf8_length(text), 4))
    if pc.all(three_decimals).as_py() is not False:
        try:
            return pc.cast(pc.replace_substring(text, ".", "", max_replacements=1), pa.int64())
        except (pa.ArrowInvalid, OverflowError):  # spaces, signs in odd places, too many digits
            pass
    parts = pc.extract_regex(text, _US_TEXT)
    whole = pc.struct_field(parts, "whole")
    frac = pc.utf8_slice_codeunits(
        pc.binary_join_element_wise(pc.struct_field(parts, "frac"), "000", ""), 0, 3
    )
    try:
        ns = pc.add_checked(pc.multiply_checked(pc.cast(whole, pa.int64()), 1000), pc.cast(frac, pa.int64()))
    except (pa.ArrowInvalid, OverflowError):  # more digits than int64 ns hold
        return pa.array([_int64(ts_ns(v)) for v in text.to_pylist()], type=pa.int64())
    negative = pc.equal(pc.struct_field(parts, "sign"), "-")
    return pc.if_else(negative, pc.negate(ns), ns)


def ts_column(values: list[Any]) -> pa.Array:
    """``ts`` values of a slice in int64 ns (null when missing or not a time)."""
    try:
        text = pa.array(values, type=pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pa.array([_int64(ts_ns(v)) for v in values], type=pa.int64())
    return us_text_to_ns(text)


def dur_column(values: list[Any]) -> pa.Array:
    """``dur`` values (float µs) in int64 ns, rounded as Python's round() does (half to even)."""
    try:
        us = pa.array(values, type=pa.float64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pa.array([_int64(dur_ns(v)) for v in values], type=pa.int64())
    ns = pc.round(pc.multiply(us, 1000.0), ndigits=0, round_mode="half_to_even")
    finite = pc.and_(pc.is_finite(ns), pc.less(pc.abs(ns), 9e18))
    return pc.cast(pc.if_else(finite, ns, pa.scalar(None, pa.float64())), pa.int64())


def optional_text(values: list[Any]) -> pa.Array:
    """Strings with nulls kept; a value of another type becomes null."""
    try:
        return pa.array(values, type=pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pa.array([v if isinstance(v, str) else None for v in values], type=pa.string())


@dataclass
class Dictionary:
    """The distinct strings of a text column, shared by all slices: the column itself is int32 codes (-1 = null),
    4 bytes an event instead of a string each."""

    values: list[str] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)

    def code(self, value: str) -> int:
        found = self.index.get(value)
        if found is None:
            found = self.index[value] = len(self.values)
            self.values.append(value)
        return found

    def encode(self, text: pa.Array) -> np.ndarray:
        """Codes of a slice's strings: Arrow finds the slice's distinct values, Python maps only those."""
        local = text.dictionary_encode()
        mapping = np.array([self.code(v) for v in local.dictionary.to_pylist()] + [-1], dtype=np.int32)
        return mapping[local.indices.fill_null(-1).to_numpy(zero_copy_only=False)]


@dataclass
class Text:
    """A text column as codes into a dictionary (-1 = null); row selection and per-value functions stay codes."""

    codes: np.ndarray
    values: list[str]

    def take(self, rows: np.ndarray) -> Text:
        return Text(self.codes[rows], self.values)

    def map(self, fn: Any) -> Text:
        """``fn`` applied once per distinct value (None maps to null)."""
        mapped = [fn(v) for v in self.values]
        dictionary = Dictionary()
        table = np.array([dictionary.code(v) if v is not None else -1 for v in mapped] + [-1], dtype=np.int32)
        return Text(table[self.codes], dictionary.values)

    def fill(self, default: str) -> Text:
        values = [*self.values, default]
        return Text(np.where(self.codes < 0, len(self.values), self.codes).astype(np.int32), values)

    def arrow(self) -> pa.DictionaryArray:
        indices = pa.array(self.codes, type=pa.int32(), mask=self.codes < 0)
        return pa.DictionaryArray.from_arrays(indices, pa.array(self.values, type=pa.string()))

    def tolist(self) -> list[str | None]:
        return [self.values[c] if c >= 0 else None for c in self.codes.tolist()]


@dataclass
class Layout:
    """Which pid is which process, and the name of each thread (from the ``M`` metadata events)."""

    process: dict[int, str] = field(default_factory=dict)
    threads: dict[tuple[int, int], str] = field(default_factory=dict)
    device: int | None = None

    def update(self, meta: Iterable[Any]) -> None:
        for e in meta:
            pid, tid, args = _as_int(e.pid), _as_int(e.tid), e.args
            if pid is None:
                continue
            if e.name == "process_name" and isinstance(args.name, str) and args.name:
                self.process[pid] = args.name
            elif e.name == "thread_name" and isinstance(args.name, str) and args.name and tid is not None:
                self.threads[(pid, tid)] = args.name
            elif e.name == "process_labels" and isinstance(args.labels, str):
                match = _NPU_LABEL.match(args.labels.strip())
                if match:
                    self.device = int(match.group(1))

    def pids(self, *names: str) -> np.ndarray:
        return np.array([pid for pid, n in self.process.items() if n in names], dtype=np.int64)


def _id_text(value: Any) -> str | None:
    """A flow id as text: ids are only matched, and some exceed int64."""
    return value if isinstance(value, str) or value is None else str(value)


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


@dataclass
class TraceColumns:
    """The timeline's columns, accumulated slice by slice: ``x`` (complete events), ``rare`` (HCCL args of the
    rows that may be HCCL events, keyed by row) and ``flows`` (``s``/``f`` arrows)."""

    layout: Layout = field(default_factory=Layout)
    x: dict[str, list[pa.Array]] = field(default_factory=dict)
    text: dict[str, Dictionary] = field(default_factory=dict)  # name, cat, level, task_type: codes in x
    rare: list[pa.RecordBatch] = field(default_factory=list)
    flows: dict[str, list[pa.Array]] = field(default_factory=dict)
    n: int = 0
    warnings: list[str] = field(default_factory=list)
    shown: str = ""  # the file being read, for errors

    def add(self, events: list[Any]) -> None:
        if events and type(events[0]) is LooseEvent:  # a slice read leniently: its events carry ``ph``
            self.layout.update(e for e in events if e.ph == "M")
            complete = [e for e in events if e.ph == "X"]
            flows = [e for e in events if e.ph == "s" or e.ph == "f"]
            starts = [e.ph == "s" for e in flows]
        else:
            self.layout.update(e for e in events if type(e) is Metadata)
            complete = [e for e in events if type(e) is Complete]
            flows = [e for e in events if type(e) is FlowStart or type(e) is FlowEnd]
            starts = [e.start for e in flows]
        if complete:
            self._add_complete(complete)
        if flows:
            self._add_flows(flows, starts)

    def _put(self, parts: dict[str, list[pa.Array]], key: str, array: pa.Array) -> None:
        parts.setdefault(key, []).append(array)

    def _put_text(self, key: str, text: pa.Array) -> None:
        codes = self.text.setdefault(key, Dictionary()).encode(text)
        self._put(self.x, key, pa.array(codes, type=pa.int32()))

    def strings(self, key: str) -> Text:
        """A text column of the complete events, as codes into its dictionary."""
        codes = self.column(key).to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
        return Text(codes, self.text.setdefault(key, Dictionary()).values)

    def _add_complete(self, complete: list[Any]) -> None:
        x = self.x
        pid = int_column(list(map(_get["pid"], complete)))
        cat = optional_text(list(map(_get["cat"], complete)))
        self._put(x, "pid", pid)
        self._put(x, "tid", int_column(list(map(_get["tid"], complete))))
        self._put(x, "ts", ts_column(list(map(_get["ts"], complete))))
        self._put(x, "dur", dur_column(list(map(_get["dur"], complete))))
        names = text_column(list(map(_get["name"], complete)))
        check_names(names, self.shown)
        self._put_text("name", names)
        self._put_text("cat", cat)
        args = list(map(_get["args"], complete))
        self._put(x, "connection", int_column(list(map(_get_arg["connection_id"], args))))
        self._put_text("level", optional_text(list(map(_get_arg["level"], args))))
        self._put_text("task_type", optional_text(list(map(_get_arg["task_type"], args))))
        self._add_rare(args, pid, cat)
        self.n += len(complete)

    def _add_rare(self, args: list[Any], pid: pa.Array, cat: pa.Array) -> None:
        """HCCL args of the rows that may be HCCL events: in a known HCCL process, or in a process not named yet
        and without a category (the Python layer has one; device and HCCL events have none)."""
        pids = pid.fill_null(-1).to_numpy(zero_copy_only=False)
        known = self.layout.pids(*set(self.layout.process.values()))
        maybe = np.isin(pids, self.layout.pids("HCCL")) | (
            ~np.isin(pids, known) & pc.is_null(cat).to_numpy(zero_copy_only=False)
        )
        rows = np.flatnonzero(maybe)
        if not len(rows):
            return
        sub = [args[i] for i in rows.tolist()]
        columns = {"row": pa.array(rows + self.n, type=pa.int64())}
        for key in RARE_INT:
            columns[key] = int_column(list(map(_get_arg[key], sub)))
        for key in RARE_TEXT:
            columns[key] = optional_text(list(map(_get_arg[key], sub)))
        batch = pa.RecordBatch.from_pydict(columns)
        present = pc.is_valid(batch.column("count"))
        for key in ("data_type", "src_rank", "dst_rank", "transport", "size", "link_type", "stream"):
            present = pc.or_(present, pc.is_valid(batch.column(key)))
        self.rare.append(batch.filter(present))

    def _add_flows(self, flows: list[Any], starts: list[bool]) -> None:
        f = self.flows
        self._put(f, "start", pa.array(starts, type=pa.bool_()))
        self._put(f, "cat", optional_text(list(map(_get["cat"], flows))))
        self._put(f, "id", pa.array([_id_text(e.id) for e in flows], type=pa.string()))
        self._put(f, "pid", int_column(list(map(_get["pid"], flows))))
        self._put(f, "tid", int_column(list(map(_get["tid"], flows))))
        self._put(f, "ts", ts_column(list(map(_get["ts"], flows))))

    def column(self, key: str, kind: str = "x") -> pa.Array:
        """One column, its slices concatenated (once: the parts are replaced by the whole)."""
        table = self.x if kind == "x" else self.flows
        parts = table.get(key, [])
        if len(parts) > 1:
            table[key] = parts = [pa.concat_arrays(parts)]
        return parts[0] if parts else pa.array([], type=pa.int64())

    def rare_table(self) -> pa.Table:
        """The HCCL args, every column present even when no row has any (a timeline cut before its HCCL events)."""
        if not self.rare:
            empty = {"row": pa.array([], type=pa.int64())} | {
                k: pa.array([], type=pa.int64()) for k in RARE_INT
            }
            return pa.table(empty | {k: pa.array([], type=pa.string()) for k in RARE_TEXT})
        return pa.Table.from_batches(self.rare)


def read_trace(path: Path, shown: Path, columns: TraceColumns | None = None) -> TraceColumns:
    """Stream one timeline file into ``columns`` (new ones by default); TraceError names the file."""
    columns = TraceColumns() if columns is None else columns
    columns.shown = str(shown)
    warnings: list[str] = []
    try:
        with open_text(path, shown) as reader:
            for events in ArrayStream(reader, shown, None, DECODER, LOOSE_DECODER, warnings):
                columns.add(events)
                del events
        columns.warnings.extend(f"{shown}: {w}" for w in warnings)
    except OSError as exc:
        raise TraceError(shown, f"cannot read the file ({exc})") from exc
    except TraceError as exc:
        if "not a JSON array" in exc.problem:
            raise TraceError(shown, "not an Ascend trace_view: not a JSON array") from exc
        if "empty" in exc.problem or "gzip" in exc.problem or isinstance(exc, LimitError):
            raise
        raise TraceError(shown, f"truncated or invalid JSON ({exc.problem})") from exc
    return columns
