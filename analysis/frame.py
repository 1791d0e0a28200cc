"""The device events of a job as numpy columns, read once and shared by every analysis.

String columns become integer codes into one job-wide list (per-rank Parquet parts carry their own dictionaries,
so the codes are unified here); the analyses then group and sort integers only.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from paradiag import schema

if TYPE_CHECKING:
    from paradiag.job import Job

NUMERIC = (
    "rank",
    "track",
    "kind",
    "name",
    "op",
    "launch",
    "start",
    "end",
    "step",
    "collective",
    "group",
    "peer",
    "bytes",
    "seq",
    "call",
    "work",
)
VOCABULARY_OF = {
    "kind": "kinds",
    "name": "names",
    "op": "names",
    "collective": "collectives",
    "group": "groups",
}
VOCABULARIES = ("kinds", "names", "collectives", "groups")
COLUMNS = (
    "rank",
    "device",
    "track",
    "kind",
    "category",
    "name",
    "start_ns",
    "dur_ns",
    "step",
    "correlation",
    "external_id",
    "collective",
    "group",
    "peer",
    "bytes",
    "seq",
)
HOST_OPERATOR_CATEGORIES = ("cpu_op", "Operator")


@dataclass
class Frame:
    """Device events (compute, communication, memory, sync), one numpy array per column, sorted by rank and start.

    ``kind``, ``name``, ``collective`` and ``group`` are codes into ``kinds``, ``names``, ``collectives`` and
    ``groups`` (-1 where the event has none); ``track`` is the event's row in the timeline (stream); ``op`` is the code (in ``names``) of the host operator that launched
    the kernel (Kineto ``External id``), -1 if unknown; ``launch`` the start of the host call that launched it (its
    correlation id's runtime event), -1 if unknown; ``peer``, ``bytes`` and ``seq`` are -1 where absent. ``call``
    is the event's External id (-1 if none): on host lanes (a CPU rank, ``parsers.kineto_host``) the operator call
    a self-time piece belongs to, so that the pieces of one call are counted as one; ``work`` there the kind of
    work of that call, a checksum of its caller's name (the parser gives a host-lane piece its caller's External
    id as correlation): calls of one name and caller do the same kind of work; -1 elsewhere."""

    rank: np.ndarray
    track: np.ndarray
    kind: np.ndarray
    name: np.ndarray
    op: np.ndarray
    launch: np.ndarray
    start: np.ndarray
    end: np.ndarray
    step: np.ndarray
    collective: np.ndarray
    group: np.ndarray
    peer: np.ndarray
    bytes: np.ndarray
    seq: np.ndarray
    kinds: list[str]
    names: list[str]
    collectives: list[str]
    groups: list[str]
    call: np.ndarray = None  # type: ignore[assignment]
    work: np.ndarray = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.call is None:
            self.call = np.full(len(self.rank), -1, np.int64)
        if self.work is None:
            self.work = np.full(len(self.rank), -1, np.int32)

    def __len__(self) -> int:
        return len(self.rank)

    def code(self, vocabulary: str, value: str) -> int:
        """The code of ``value`` in one of the string lists, -1 when the job never uses it."""
        values: list[str] = getattr(self, vocabulary)
        return values.index(value) if value in values else -1

    def codes(self, vocabulary: str, values: tuple[str, ...] | list[str]) -> list[int]:
        """The codes of those of ``values`` the job uses."""
        return [c for c in (self.code(vocabulary, v) for v in values) if c >= 0]

    def take(self, mask: np.ndarray | slice) -> Frame:
        """The rows where ``mask`` holds (the string lists are shared, not copied)."""
        arrays = {k: getattr(self, k)[mask] for k in NUMERIC}
        return Frame(
            **arrays, kinds=self.kinds, names=self.names, collectives=self.collectives, groups=self.groups
        )

    def keep(self, rows: np.ndarray) -> None:
        """Keep only ``rows`` (indices, in that order), in place and one array at a time: a frame of millions of
        events is never held twice, as ``take`` would hold it while its result is built. Dropped arrays stay empty."""
        n = len(self)
        for k in NUMERIC:
            values = getattr(self, k)
            setattr(self, k, values[rows] if len(values) == n else values)

    def drop(self, *names: str) -> None:
        """Empty the arrays ``names``: what a consumer of the frame (``whatif.build_graph``) no longer reads, freed
        before it is done with the rest."""
        for k in names:
            setattr(self, k, np.empty(0, getattr(self, k).dtype))

    def by_rank(self) -> dict[int, Frame]:
        """One frame per rank (slices: rows are sorted by rank, so nothing is copied)."""
        ranks, firsts = np.unique(self.rank, return_index=True)
        bounds = np.append(firsts, len(self.rank))
        return {int(r): self.take(slice(int(bounds[i]), int(bounds[i + 1]))) for i, r in enumerate(ranks)}

    def of_kind(self, kind: str) -> Frame:
        return self.take(self.kind == self.code("kinds", kind))


def _codes(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list[str]]:
    """Integer codes (-1 for null) and the distinct strings of a string or dictionary column. A dictionary
    column keeps its codes (no string per row is built); duplicate dictionary entries (one per Parquet row group)
    are folded onto one code."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not pa.types.is_dictionary(arr.type):
        arr = pc.dictionary_encode(arr)
    words = [str(v) for v in arr.dictionary.to_pylist()]
    distinct, remap = (
        np.unique(np.array(words, dtype=object), return_inverse=True)
        if words
        else (np.array([]), np.array([], np.int64))
    )
    indices = arr.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    codes = np.append(remap, -1).astype(np.int32)[indices]  # -1 (null) indexes the trailing -1
    return codes, [str(w) for w in distinct]


def _ints(column: pa.ChunkedArray, dtype: type = np.int64) -> np.ndarray:
    return np.asarray(column.fill_null(-1).to_numpy(), dtype=dtype)


def _callers(
    events: pa.Table, name: np.ndarray, names: list[str], kind: np.ndarray, kinds: list[str], rows: np.ndarray
) -> np.ndarray:
    """For the events at ``rows``, where they are host-lane operator pieces (a host operator's category on a
    device row), a checksum of the name of the operator that called them (their correlation is its External id);
    -1 elsewhere and at the top."""
    category, categories = _codes(events.column("category"))
    on_lane = np.isin(category[rows], [i for i, c in enumerate(categories) if c in HOST_OPERATOR_CATEGORIES])
    if not on_lane.any():
        return np.full(len(rows), -1, np.int32)
    caller = _host_operator(events, name, kind, kinds, rows, _ints(events.column("correlation")))
    sums = np.array([zlib.crc32(n.encode()) & 0x7FFFFFFF for n in names] + [-1], np.int64)
    return np.where(on_lane, sums[caller], -1).astype(np.int32)


def _host_operator(
    events: pa.Table,
    name: np.ndarray,
    kind: np.ndarray,
    kinds: list[str],
    rows: np.ndarray,
    key: np.ndarray | None = None,
) -> np.ndarray:
    """For the events at ``rows``, the name code of the host operator with the same external id (-1 when none):
    the ATen op that launched a kernel (``key``, by row, instead of the rows' own external ids, where given).
    Meaningful within one rank (external ids are per process). Looked up for ``rows`` only (the device events,
    about a tenth of a Kineto rank), not for every event."""
    external = _ints(events.column("external_id"))
    category, categories = _codes(events.column("category"))
    is_op = np.isin(category, [i for i, c in enumerate(categories) if c in HOST_OPERATOR_CATEGORIES])
    is_op &= (kind == (kinds.index(schema.HOST) if schema.HOST in kinds else -2)) & (external >= 0)
    ids, first = np.unique(external[is_op], return_index=True)
    op_name = name[is_op][first]
    wanted = (external if key is None else key)[rows]
    pos = np.clip(np.searchsorted(ids, wanted), 0, max(len(ids) - 1, 0))
    found = (len(ids) > 0) & (wanted >= 0) & (ids[pos] == wanted) if len(ids) else np.zeros(len(wanted), bool)
    return np.where(found, op_name[pos] if len(ids) else -1, -1).astype(np.int32)


def _launches(events: pa.Table, kind: np.ndarray, kinds: list[str], rows: np.ndarray) -> np.ndarray:
    """For the events at ``rows``, the start of the host event with the same correlation id (the runtime call
    that launched it; the last one, should ids repeat), -1 when none. Meaningful within one rank (correlation ids
    are per process)."""
    correlation = _ints(events.column("correlation"))
    start = _ints(events.column("start_ns"))
    host = np.flatnonzero(
        (kind == (kinds.index(schema.HOST) if schema.HOST in kinds else -2)) & (correlation >= 0)
    )
    host = host[np.argsort(correlation[host], kind="stable")]
    if not len(host):
        return np.full(len(rows), -1, np.int64)
    wanted = correlation[rows]
    pos = np.searchsorted(correlation[host], wanted, side="right") - 1
    row = host[np.maximum(pos, 0)]
    found = (pos >= 0) & (wanted >= 0) & (correlation[row] == wanted)
    return np.where(found, start[row], -1)


def device_frame(events: pa.Table) -> Frame:
    """The device events of ``events`` (one rank, or ranks whose external ids do not collide) as a
    :class:`Frame`. Of the communication columns (``group``, ``peer``, ``bytes``, ``seq``), those ``events``
    lacks are -1."""
    kind, kinds = _codes(events.column("kind"))
    name, names = _codes(events.column("name"))
    device_kinds = [i for i, k in enumerate(kinds) if k in schema.DEVICE_KINDS]
    keep = np.isin(kind, device_kinds) & (_ints(events.column("device"), np.int32) >= 0)
    collective, collectives = _codes(events.column("collective"))
    group, groups = (
        _codes(events.column("group"))
        if "group" in events.column_names
        else (np.full(len(kind), -1, np.int32), [])
    )
    start = _ints(events.column("start_ns"))
    rank = _ints(events.column("rank"), np.int32)
    order = np.lexsort((start[keep], rank[keep]))
    idx = np.flatnonzero(keep)[order]
    op = (
        _host_operator(events, name, kind, kinds, idx)
        if "external_id" in events.column_names
        else np.full(len(idx), -1, np.int32)
    )
    launch = (
        _launches(events, kind, kinds, idx)
        if "correlation" in events.column_names
        else np.full(len(idx), -1, np.int64)
    )

    def ints(column: str, dtype: type) -> np.ndarray:
        return (
            _ints(events.column(column), dtype)[idx]
            if column in events.column_names
            else np.full(len(idx), -1, dtype)
        )

    return Frame(
        rank=rank[idx],
        track=ints("track", np.int32),
        kind=kind[idx],
        name=name[idx],
        op=op,
        launch=launch,
        start=start[idx],
        end=start[idx] + ints("dur_ns", np.int64),
        step=ints("step", np.int32),
        collective=collective[idx],
        group=group[idx],
        peer=ints("peer", np.int32),
        bytes=ints("bytes", np.int64),
        seq=ints("seq", np.int32),
        call=ints("external_id", np.int64),
        work=_callers(events, name, names, kind, kinds, idx)
        if "correlation" in events.column_names
        else np.full(len(idx), -1, np.int32),
        kinds=kinds,
        names=names,
        collectives=collectives,
        groups=groups,
    )


def frame_table(frame: Frame, columns: tuple[str, ...]) -> pa.Table:
    """``columns`` (names of :class:`Frame` arrays) of ``frame`` as an Arrow table. A string code becomes a
    dictionary column over the frame's whole list, used or not: :func:`table_frame` then gives the same codes, and
    frames of several ranks merge (:func:`concat`) onto the codes that merging those ranks' events gives."""
    out: dict[str, pa.Array] = {}
    for name in columns:
        values = getattr(frame, name)
        if name in VOCABULARY_OF:
            words = pa.array(getattr(frame, VOCABULARY_OF[name]), pa.string())
            out[name] = pa.DictionaryArray.from_arrays(pa.array(values, pa.int32(), mask=values < 0), words)
        else:
            out[name] = pa.array(values)
    return pa.table(out)


def table_frame(table: pa.Table) -> Frame:
    """A :func:`frame_table` (a ``rank`` column added) back as a :class:`Frame`; arrays it lacks are -1, lists it
    lacks empty. ``name`` and ``op`` share one list: a table holds at most one of them."""
    n = table.num_rows
    arrays: dict[str, Any] = {
        k: np.full(n, -1, np.int64 if k in ("launch", "start", "end", "bytes", "call") else np.int32)
        for k in NUMERIC
    }
    lists: dict[str, Any] = {v: [] for v in VOCABULARIES}
    for name in table.column_names:
        if name in VOCABULARY_OF:
            arrays[name], lists[VOCABULARY_OF[name]] = _codes(table.column(name))
        elif name in arrays:
            arrays[name] = np.asarray(table.column(name).to_numpy(), dtype=arrays[name].dtype)
    return Frame(**arrays, **lists)


def save_frame(frame: Frame, path: Path) -> None:
    """``frame`` as an Arrow IPC file, its arrays as columns and its string lists in the schema's metadata, for
    another process to read back with :func:`load_frame` (the ingest's map hands its frames to the reduce so)."""
    schema.write_arrow_file(
        pa.table(
            {k: getattr(frame, k) for k in NUMERIC},
            metadata={v: json.dumps(getattr(frame, v)) for v in VOCABULARIES},
        ),
        path,
    )


def load_frame(path: Path) -> Frame:
    """A frame :func:`save_frame` wrote: the same arrays (writable copies: the reduce fills some in) and lists."""
    table = schema.read_arrow_file(path)
    meta = table.schema.metadata or {}
    arrays: dict[str, Any] = {k: np.array(table.column(k).to_numpy()) for k in NUMERIC}
    arrays.update({v: json.loads(meta[v.encode()]) for v in VOCABULARIES})
    return Frame(**arrays)


def job_frame(job: Job, events_by_rank: Mapping[int, pa.Table] | None = None) -> Frame:
    """The device events of every rank of ``job``, read rank by rank (a rank's Parquet part carries its own
    dictionaries) and merged on one vocabulary; ``events_by_rank`` reuses tables already read."""
    tables = events_by_rank or {r: job.events(ranks=[r], columns=COLUMNS) for r in job.rank_ids}
    return concat([device_frame(tables[r]) for r in job.rank_ids if r in tables])


def concat(frames: list[Frame]) -> Frame:
    """Frames of different ranks as one, their string codes mapped onto shared lists. The frames are emptied on
    the way, each array dropped once it is merged, so that a job's events are not held twice (the parts and the
    whole): pass copies to keep using them."""
    vocab: dict[str, dict[str, int]] = {v: {} for v in VOCABULARIES}
    remaps: list[dict[str, np.ndarray]] = []
    for f in frames:  # the shared lists in order of first use, frame by frame
        mine = {}
        for v in dict.fromkeys(VOCABULARY_OF.values()):
            seen = vocab[v]
            mine[v] = np.array([seen.setdefault(w, len(seen)) for w in getattr(f, v)] + [-1], dtype=np.int32)
        remaps.append(mine)
    merged: dict[str, Any] = {}
    for k in NUMERIC:
        parts = []
        for f, remap in zip(frames, remaps, strict=True):
            values = getattr(f, k)
            parts.append(
                remap[VOCABULARY_OF[k]][values] if k in VOCABULARY_OF else values
            )  # -1 (absent) indexes the trailing -1
            setattr(f, k, np.empty(0, values.dtype))  # not a view: that would keep the array
        merged[k] = np.concatenate(parts) if parts else np.empty(0, np.int64)
        del parts
    merged.update({v: list(vocab[v]) for v in VOCABULARIES})
    return Frame(**merged)


def group_bounds(*keys: np.ndarray, within: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Sort rows by ``keys`` (the last key is the primary one, as in ``np.lexsort``; ``within`` orders rows
    inside a run) and return the order and the start index of each run of equal keys."""
    order = np.lexsort(keys if within is None else (within, *keys))
    if len(order) == 0:
        return order, np.empty(0, dtype=np.int64)
    changed = np.zeros(len(order), dtype=bool)
    changed[0] = True
    for key in keys:
        k = key[order]
        changed[1:] |= k[1:] != k[:-1]
    return order, np.flatnonzero(changed)


MAD_TO_SIGMA = 1.4826  # a normal distribution's standard deviation per median absolute deviation
# Robust deviations from the peers' median beyond which a rank or device stands out: a row of its own when alike
# ranks fold (heatmap, timeline) and an anomaly mark in Marey's graph.
OUTLIER_DEVIATIONS = 3.5


def robust_spread(values: np.ndarray) -> float:
    """1.4826 x MAD: the standard deviation the values would have without their outliers (0 when empty)."""
    values = np.asarray(values, dtype=np.float64)
    return MAD_TO_SIGMA * float(np.median(np.abs(values - np.median(values)))) if len(values) else 0.0


def weighted_median(values: Any, weights: Any) -> float | None:
    """The value at which half the total weight is reached, smallest value first (None without values): a median
    where each value counts as much as its weight (a pass by the compute it holds, an operator by its time)."""
    values, weights = np.asarray(values, dtype=np.float64), np.asarray(weights, dtype=np.float64)
    if not len(values):
        return None
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    at = int(np.searchsorted(cumulative, cumulative[-1] / 2))
    return float(values[order][min(at, len(values) - 1)])


def find_rows(keys: np.ndarray, query: np.ndarray) -> np.ndarray:
    """For each row of ``query`` (m x k integers), the index of the equal row of ``keys`` (n x k, rows distinct),
    -1 where there is none: a join on several integer columns by one sort, without a Python tuple per row."""
    out = np.full(len(query), -1, np.int64)
    if not len(keys) or not len(query):
        return out
    both = np.concatenate([keys, query])
    is_key = np.arange(len(both)) < len(keys)
    order = np.lexsort((~is_key, *both.T[::-1]))  # equal rows together, a key before the queries equal to it
    last_key = np.maximum.accumulate(
        np.where(is_key[order], np.arange(len(order)), -1)
    )  # at or before each place
    at = np.flatnonzero(~is_key[order] & (last_key >= 0))
    key, asked = order[last_key[at]], order[at]
    same = (both[key] == both[asked]).all(axis=1)
    out[asked[same] - len(keys)] = key[same]
    return out


def robust_z(values: np.ndarray, floor_ratio: float = 0.01) -> np.ndarray:
    """(x - median) / robust spread. The spread is floored at ``floor_ratio`` x |median| so that identical peers
    (a MAD of zero) do not turn a 0.1 % difference into a huge score."""
    med = float(np.median(values))
    spread = max(robust_spread(values), floor_ratio * abs(med), 1e-9)
    return (values - med) / spread
