"""The Gantt timeline's data for a set of ranks (and folds of alike ranks) and a time window, at screen resolution.

Up to ``max_primitives`` intervals are returned one by one; beyond that, each (row, kind) is reduced to the union
of its intervals rounded out to whole pixel columns, so the drawing never exceeds rows x kinds x pixels.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from paradiag.app.data import collectives, timeline_fold
from paradiag.app.data.common import DEVICE_KINDS, origin_ns, read_events
from paradiag.app.data.shapes import (
    Bars,
    CollectiveLink,
    FoldEntry,
    Intervals,
    MergedIntervals,
    TimelineData,
    TimelineRow,
    Waits,
)
from paradiag.app.figures.common import short_name
from paradiag.job import Job

COLUMNS = ["rank", "device", "track", "kind", "name", "start_ns", "dur_ns", "collective", "peer", "bytes"]
MAX_LINKS = 3000
STREAM_LABEL = {"compute": "compute", "communication": "comm", "memory": "copy", "sync": "sync"}
STREAM_ORDER = ("compute", "comm", "copy", "sync")
HOVER_NAME = 36  # characters of an interval's name on hover: the payload grows with every interval drawn


def timeline_data(
    job: Job,
    ranks: Sequence[int | FoldEntry],
    window: tuple[int, int],
    pixels: int = 1600,
    max_primitives: int = 50_000,
    instance: int | None = None,
    step: int | None = None,
    path: bool = False,
) -> TimelineData:
    """Rows, top to bottom as ``ranks`` lists them: a rank (one row per stream) or a fold of alike ranks
    (``timeline_fold.fold_plan``: one row per lane; needs ``step``). Intervals per kind (ms since the job
    origin), the folds' instances with their spread (``folded``), collective links and waits, the members of
    the selected collective ``instance`` (``selected``) and, with ``path``, the step's critical path."""
    lo, hi = window
    singles = list(
        dict.fromkeys(r for r in ranks if isinstance(r, int))
    )  # in the caller's order: the rank of interest first
    wanted = [f for f in ranks if isinstance(f, dict)]
    folds = (
        list(zip(wanted, timeline_fold.fold_times(job, step, wanted), strict=True))
        if step is not None
        else []
    )
    events = read_events(job, ranks=singles, start_ns=lo, end_ns=hi, columns=COLUMNS)
    kind = events.column("kind").cast(pa.string())
    events = events.filter(
        pc.and_(pc.greater_equal(events.column("device"), 0), pc.is_in(kind, pa.array(DEVICE_KINDS)))
    )
    rows, row_of, lanes = _rows(events, ranks, {f["key"]: timeline_fold.lanes_of(t) for f, t in folds})
    times = {f["key"]: t for f, t in folds}
    for row in rows:
        if (
            row["rank"] is None
        ):  # operator instances its ranks all run (none: nothing to draw), over how many ranks
            row["instances"], row["read"] = len(times[row["fold"]]["category"]), times[row["fold"]]["read"]
    t0 = origin_ns(job)
    aggregated = events.num_rows > max_primitives
    folded = timeline_fold.folded_intervals([(t, lanes[f["key"]]) for f, t in folds], window, pixels, t0)
    kinds: dict[str, Intervals] | dict[str, MergedIntervals] = (
        _aggregate(events, row_of, lo, hi, pixels, t0) if aggregated else _individual(events, row_of, t0)
    )
    links, waits = _links_and_waits(job, singles, row_of, (lo, hi, pixels), t0, exact=not aggregated)
    return {
        "rows": rows,
        "origin_ns": t0,
        "window_ms": [(lo - t0) / 1e6, (hi - t0) / 1e6],
        "aggregated": aggregated,
        "num_events": events.num_rows,
        "folded": folded,
        "kinds": kinds,
        "links": links,
        "waits": waits,
        "selected": _instance_members(job, instance, row_of, t0) if instance is not None else None,
        "path": (
            timeline_fold.path_segments(
                job, step, window, _placer(rows, row_of, lanes, [f for f, _ in folds]), t0
            )
            if path and step is not None
            else None
        ),
    }


def _placer(
    rows: list[TimelineRow],
    row_of: dict[int, int],
    lanes: dict[str, dict[str, int]],
    folds: list[FoldEntry],
) -> Callable[[int, int, str], int | None]:
    """(rank, track, fold lane) -> the row a critical-path segment is drawn on: the rank's stream (its first row
    for host time), else that lane (or the first) of the fold holding the rank; None where the rank is not drawn."""
    first: dict[int, int] = {}
    for i, row in enumerate(rows):
        if row["rank"] is not None:
            first.setdefault(row["rank"], i)
    fold_of = {r: f["key"] for f in folds for r in f["ranks"]}

    def place(rank: int, track: int, lane: str) -> int | None:
        if rank in first:
            return row_of.get(rank * 1_000_000_000 + track, first[rank])
        mine = lanes.get(fold_of.get(rank, ""), {})
        return mine.get(lane, next(iter(mine.values()), None))

    return place


def _instance_members(job: Job, instance: int, row_of: dict[int, int], t0: int) -> Bars:
    """The drawn members (ranks in view) of one collective instance: their intervals, start to end."""
    table = collectives.instances(job)
    part = table.filter(pc.equal(table.column("instance"), instance))
    known = pc.is_in(
        pc.add(
            pc.multiply(part.column("rank").cast(pa.int64()), 1_000_000_000),
            part.column("track").cast(pa.int64()),
        ),
        value_set=pa.array(list(row_of), pa.int64()),
    )
    part = part.filter(known)
    start = part.column("start_ns").to_numpy()
    end = start + part.column("dur_ns").to_numpy()
    return {
        "x0": ((start - t0) / 1e6).round(4).tolist(),
        "x1": ((end - t0) / 1e6).round(4).tolist(),
        "row": _row_index(part, row_of).tolist() if part.num_rows else [],
    }


def _row_keys(events: pa.Table) -> np.ndarray:
    return (
        events.column("rank").to_numpy().astype(np.int64) * 1_000_000_000 + events.column("track").to_numpy()
    )


def _rows(
    events: pa.Table, entries: Sequence[int | FoldEntry], lanes: dict[str, list[str]]
) -> tuple[list[TimelineRow], dict[int, int], dict[str, dict[str, int]]]:
    """One row per (rank, stream), named by what the stream mostly runs (the traces name no streams), and one per
    lane of a fold (labelled with its member count). Returns the rows, (rank, track) key -> row, and per fold
    its lane -> row."""
    names = stream_names(events)
    by_rank: dict[int, list[int]] = {}
    for k in sorted(names):
        by_rank.setdefault(k // 1_000_000_000, []).append(k % 1_000_000_000)
    rows: list[TimelineRow] = []
    row_of: dict[int, int] = {}
    fold_rows: dict[str, dict[str, int]] = {}
    for entry in entries:
        if isinstance(entry, dict):
            fold_rows[entry["key"]] = {
                lane: len(rows) + i for i, lane in enumerate(lanes.get(entry["key"], []))
            }
            rows += [
                {
                    "rank": None,
                    "fold": entry["key"],
                    "members": len(entry["ranks"]),
                    "lane": lane,
                    "label": f"{entry['key']} ×{len(entry['ranks'])} {lane}",
                }
                for lane in lanes.get(entry["key"], [])
            ]
            continue
        tracks = [(STREAM_ORDER.index(names[entry * 1_000_000_000 + t]), t) for t in by_rank.pop(entry, [])]
        for key, label in lane_labels(
            entry, [entry * 1_000_000_000 + t for _, t in sorted(tracks)], names
        ).items():
            row_of[key] = len(rows)
            rows.append({"rank": entry, "track": key % 1_000_000_000, "label": label})
    return rows, row_of, fold_rows


def lane_labels(rank: int, keys: list[int], names: dict[int, str]) -> dict[int, str]:
    """A rank's lanes (row keys, in order) named by what they run, not by the trace's thread or stream id (a
    number the user cannot act on): "r3 compute"; "r3 compute 2" for its second lane of that kind."""
    count: dict[str, int] = {}
    for key in keys:
        count[names[key]] = count.get(names[key], 0) + 1
    seen: dict[str, int] = {}
    out = {}
    for key in keys:
        name = names[key]
        seen[name] = seen.get(name, 0) + 1
        out[key] = f"r{rank} {name}" + (f" {seen[name]}" if count[name] > 1 else "")
    return out


def stream_names(events: pa.Table) -> dict[int, str]:
    """Row key -> the kind most of the stream's device time goes to (compute, comm, copy or sync)."""
    if not events.num_rows:
        return {}
    keys = _row_keys(events)
    kinds = np.asarray(events.column("kind").cast(pa.string()).to_numpy(zero_copy_only=False))
    dur = events.column("dur_ns").to_numpy()
    out: dict[int, str] = {}
    best: dict[int, float] = {}
    for kind, label in STREAM_LABEL.items():
        mine = kinds == kind
        if not mine.any():
            continue
        uniq, inverse = np.unique(keys[mine], return_inverse=True)
        total = np.bincount(inverse, weights=dur[mine])
        for k, t in zip(uniq.tolist(), total.tolist(), strict=True):
            if t > best.get(k, -1.0):
                best[k], out[k] = t, label
    return out


def _row_index(events: pa.Table, row_of: dict[int, int]) -> np.ndarray:
    known = np.array(sorted(row_of), dtype=np.int64)
    index = np.array([row_of[k] for k in known.tolist()], dtype=np.int64)
    return index[np.searchsorted(known, _row_keys(events))]


def _by_kind(events: pa.Table) -> Iterator[tuple[str, pa.Table]]:
    """(kind, its events) for each device kind present."""
    kinds = events.column("kind").cast(pa.string())
    for kind in DEVICE_KINDS:
        part = events.filter(pc.equal(kinds, kind))
        if part.num_rows:
            yield kind, part


def _individual(events: pa.Table, row_of: dict[int, int], t0: int) -> dict[str, Intervals]:
    out: dict[str, Intervals] = {}
    for kind, part in _by_kind(events):
        start = part.column("start_ns").to_numpy()
        dur = part.column("dur_ns").to_numpy()
        out[kind] = {
            "x0": ((start - t0) / 1e6).round(4).tolist(),
            "x1": ((start + dur - t0) / 1e6).round(4).tolist(),
            "row": _row_index(part, row_of).tolist(),
            "hover": _hover(part),
            "dur_us": (dur / 1e3).round(1).tolist(),
        }
    return out


def _hover(part: pa.Table) -> list[str]:
    """One line per interval: its short name and, for communication, collective, MB (10^6 bytes, as in the findings
    and the GB/s of bandwidths) and peer (the duration travels apart as numbers, ``dur_us``)."""
    names = part.column("name").cast(pa.string()).to_pylist()
    colls = part.column("collective").cast(pa.string()).to_pylist()
    nbytes = part.column("bytes").to_pylist()
    peers = part.column("peer").to_pylist()
    short: dict[str, str] = {}
    out = []
    for name, coll, b, peer in zip(names, colls, nbytes, peers, strict=True):
        text = short.get(name) or short.setdefault(name, short_name(name, HOVER_NAME))
        if coll:
            text += (
                f" · {coll}"
                + (f" · {b / 1e6:.2f} MB" if b else "")
                + (f" · peer {peer}" if peer is not None else "")
            )
        out.append(text)
    return out


def _aggregate(
    events: pa.Table, row_of: dict[int, int], lo: int, hi: int, pixels: int, t0: int
) -> dict[str, MergedIntervals]:
    out: dict[str, MergedIntervals] = {}
    for kind, part in _by_kind(events):
        start = part.column("start_ns").to_numpy()
        out[kind] = _per_pixel(
            _row_index(part, row_of), start, start + part.column("dur_ns").to_numpy(), (lo, hi, pixels), t0
        )
    return out


def _per_pixel(
    row: np.ndarray, start: np.ndarray, end: np.ndarray, screen: tuple[int, int, int], t0: int
) -> MergedIntervals:
    """Intervals [start, end) (ns) on ``row`` as the union per row of the pixel columns they touch, with the
    count of intervals in each merged run."""
    if not len(row):
        return {"x0": [], "x1": [], "row": [], "count": []}
    lo, hi, pixels = screen
    width = max(1, (hi - lo) // max(pixels, 1))
    b0 = (start - lo) // width
    b1 = -((lo - end) // width)  # ceil
    r, s, e, n = _merge_bins(row, b0, np.maximum(b1, b0 + 1))
    return {
        "x0": ((lo + s * width - t0) / 1e6).round(4).tolist(),
        "x1": ((lo + e * width - t0) / 1e6).round(4).tolist(),
        "row": r.tolist(),
        "count": n.tolist(),
    }


def _merge_bins(row: np.ndarray, b0: np.ndarray, b1: np.ndarray) -> tuple[np.ndarray, ...]:
    """Union of [b0, b1) per row; returns (row, start, end, count) of the merged runs."""
    order = np.lexsort((b0, row))
    row, b0, b1 = row[order], b0[order], b1[order]
    reach = _running_max_per_row(row, b1)
    new_run = np.r_[True, (row[1:] != row[:-1]) | (b0[1:] > reach[:-1])]
    run = np.cumsum(new_run) - 1
    starts = b0[new_run]
    ends = np.zeros(run[-1] + 1, dtype=np.int64)
    np.maximum.at(ends, run, b1)
    counts = np.bincount(run)
    return row[new_run], starts, ends, counts


def _running_max_per_row(row: np.ndarray, values: np.ndarray) -> np.ndarray:
    out = values.copy()
    boundaries = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
    for a, b in zip(boundaries, np.r_[boundaries[1:], len(row)], strict=True):
        out[a:b] = np.maximum.accumulate(values[a:b])
    return out


def _links_and_waits(
    job: Job, ranks: list[int], row_of: dict[int, int], screen: tuple[int, int, int], t0: int, exact: bool
) -> tuple[list[CollectiveLink], Waits | MergedIntervals]:
    """Each collective instance in view as a polyline through its members' start points (its slant is the
    arrival skew), and each member's wait (start to the last arrival) as a segment. When the intervals are
    merged to screen resolution (``exact`` false), so are the waits, and no links are drawn: both grow with the
    window, and a zoomed-out view of a long job would carry tens of thousands of them."""
    lo, hi, _ = screen
    table = collectives.instances(job)
    if table.num_rows == 0:
        return [], {"x0": [], "x1": [], "row": [], "wait_us": []}
    start = table.column("start_ns")
    keep = pc.and_(
        pc.is_in(table.column("rank"), value_set=pa.array(ranks, pa.int32())),
        pc.and_(pc.less(start, hi), pc.greater(pc.add(start, table.column("dur_ns")), lo)),
    )
    part = table.filter(keep)
    rows = _row_index(part, row_of) if part.num_rows else np.array([], dtype=np.int64)
    inst = part.column("instance").to_numpy()
    begin = part.column("start_ns").to_numpy()
    wait = part.column("wait_ns").to_numpy()
    waited = wait > 0
    if not exact:
        return [], _per_pixel(rows[waited], begin[waited], begin[waited] + wait[waited], screen, t0)
    st = (begin - t0) / 1e6
    waits: Waits = {
        "x0": st[waited].round(4).tolist(),
        "x1": (st[waited] + wait[waited] / 1e6).round(4).tolist(),
        "row": rows[waited].tolist(),
        "wait_us": (wait[waited] / 1e3).round(1).tolist(),
    }
    links: list[CollectiveLink] = []
    if len(np.unique(inst)) <= MAX_LINKS:
        order = np.lexsort((rows, inst))
        for i in np.split(order, np.flatnonzero(np.diff(inst[order])) + 1):
            if len(i) > 1:
                links.append({"x": st[i].round(4).tolist(), "row": rows[i].tolist()})
    return links, waits
