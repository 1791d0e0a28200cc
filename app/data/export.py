"""The table behind each view of the job page, for its "CSV" download: the rows the view draws, for the
selection it shows (its view store), in plain units (ms, µs, bytes) with a header row."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from paradiag.app.data import overview as overview_data
from paradiag.app.data.comm import matrix
from paradiag.app.data.common import clock_window, diagnosis, origin_ns, read_events, step_span
from paradiag.app.data.detail import detail_data
from paradiag.app.data.flow import flow_view
from paradiag.app.data.marey import marey_data
from paradiag.app.data.overview import focus, opening_step
from paradiag.app.data.timeline import DEVICE_KINDS, lane_labels, stream_names
from paradiag.app.data.timeline_fold import LIMITS
from paradiag.app.selection import Selection
from paradiag.job import Job

Table = tuple[list[str], list[list[Any]]]
# A timeline export holds at most this many events (a whole step of many ranks can hold millions): the first ones in
# time, and a last row saying how many more there were.
MAX_EVENTS = 200_000


def _step(job: Job, sel: Selection) -> int | None:
    return sel.step if sel.step is not None else opening_step(job)


def overview_table(job: Job, sel: Selection) -> Table:
    """Per rank and step: the step time and where it went (the heatmap's and the step chart's figures)."""
    table = diagnosis(job).rank_steps
    columns = [c for c in table.column_names if c in ("rank", "step") or c.endswith("_ns")]
    data = table.select(columns).to_pydict()
    header = [c[:-3] + "_ms" if c.endswith("_ns") else c for c in columns]
    rows = [
        [
            round(v / 1e6, 6) if c.endswith("_ns") and v is not None else v
            for c, v in zip(columns, row, strict=True)
        ]
        for row in zip(*(data[c] for c in columns), strict=True)
    ]
    return header, rows


def timeline_table(job: Job, sel: Selection) -> Table:
    """The device events of the ranks drawn one by one in the window shown (else the step): rank, lane (as the
    timeline names it), kind, name, start (ms since the job's first step) and duration (µs)."""
    step = _step(job, sel)
    ranks = overview_data.shown_ranks(job, sel.ranks, step, LIMITS)
    lo, hi = clock_window(job, sel.window) or step_span(job, step if step is not None else 0, ranks)
    events = read_events(
        job,
        ranks=ranks,
        start_ns=lo,
        end_ns=hi,
        columns=["rank", "track", "device", "kind", "name", "start_ns", "dur_ns"],
    )
    events = events.filter(
        pc.and_(
            pc.greater_equal(events.column("device"), 0),
            pc.is_in(events.column("kind").cast(pa.string()), pa.array(DEVICE_KINDS)),
        )
    )
    names = stream_names(events)
    labels: dict[int, str] = {}
    for rank in ranks:
        labels.update(lane_labels(rank, sorted(k for k in names if k // 1_000_000_000 == rank), names))
    events = events.sort_by([("start_ns", "ascending")])
    more = max(0, events.num_rows - MAX_EVENTS)
    part = events.slice(0, MAX_EVENTS).to_pydict()
    t0 = origin_ns(job)
    rows = [
        [
            r,
            labels.get(r * 1_000_000_000 + t, f"r{r}"),
            str(k),
            str(n),
            round((s - t0) / 1e6, 6),
            round(d / 1e3, 3),
        ]
        for r, t, k, n, s, d in zip(
            part["rank"],
            part["track"],
            part["kind"],
            part["name"],
            part["start_ns"],
            part["dur_ns"],
            strict=True,
        )
    ]
    if more:
        rows.append([None, f"... {more} more events (zoom in to export them)", None, None, None, None])
    return ["rank", "lane", "kind", "name", "start_ms", "dur_us"], rows


def marey_table(job: Job, sel: Selection) -> Table:
    """Per stage, row and band of Marey's graph: the band's operator and category, start and end (ms since the
    job's first step), its spread over the row's devices, and its slowest device."""
    step = _step(job, sel)
    if step is None:
        return ["stage"], []
    data = marey_data(job, step, clock_window(job, sel.window))
    rows: list[list[Any]] = []
    for st in data["stages"]:
        for i, (label, cat) in enumerate(zip(st["label"], st["category"], strict=True)):
            for j, row in enumerate(st["rows"]):
                rows.append(
                    [
                        st["stage"],
                        row["label"],
                        label,
                        cat,
                        *(round(float(st[k][i][j]), 6) for k in ("start", "end", "lo", "hi")),
                        int(st["slow_rank"][i][j]),
                        round(float(st["slow_ms"][i][j]), 6),
                    ]
                )
    return [
        "stage",
        "row",
        "operator",
        "category",
        "start_ms",
        "end_ms",
        "earliest_start_ms",
        "latest_end_ms",
        "slowest_rank",
        "slowest_ms",
    ], rows


def detail_table(job: Job, sel: Selection) -> Table:
    """The detail's top operators of the rank against the median of its stage peers (ms in the step), and whether
    each stands out from the peers' (listed first)."""
    step = _step(job, sel)
    rank = (sel.ranks or focus(job)["ranks"] or list(job.rank_ids))[0]
    if step is None:
        return ["rank"], []
    data = detail_data(job, rank, step, sel.op)
    return ["rank", "step", "operator", "rank_ms", "peer_median_ms", "stands_out"], [
        [
            rank,
            step,
            o["name"],
            round(o["rank_ms"], 6),
            None if o["peer_ms"] is None else round(o["peer_ms"], 6),
            o["standout"],
        ]
        for o in data["operators"]
    ]


def comm_table(job: Job, sel: Selection) -> Table:
    """Every pair of ranks that communicated, with what the matrix colours: bytes, time, bandwidth, slowness."""
    data = matrix(job)
    cells, slow = data["cells"], data["slowness"]
    keys = sorted({k for c in cells for k in c if k not in ("src", "dst")})
    return ["src", "dst", *keys, "slowness"], [
        [c["src"], c["dst"], *(c.get(k) for k in keys), s] for c, s in zip(cells, slow, strict=True)
    ]


def flow_table(job: Job, sel: Selection) -> Table:
    """The execution flow's nodes, every repeated block open: stage, position, label, kind, median time,
    imbalance over the stage's devices and its slowest rank."""
    step = _step(job, sel)
    if step is None:
        return ["stage"], []
    data = flow_view(job, step, expand_all=True)
    return ["stage", "order", "label", "kind", "time_ms", "imbalance", "slowest_rank"], [
        [
            st["stage"],
            i,
            n["label"],
            n["kind"],
            round(n["time_ms"], 6),
            round(n["imbalance"], 4),
            n.get("slowest_rank"),
        ]
        for st in data["stages"]
        for i, n in enumerate(st["nodes"])
    ]


# view name -> (the store it reads, its table)
TABLES: dict[str, tuple[str, Callable[[Job, Selection], Table]]] = {
    "overview": ("mark", overview_table),
    "timeline": ("timeline", timeline_table),
    "marey": ("marey", marey_table),
    "detail": ("detail", detail_table),
    "comm": ("comm", comm_table),
    "flow": ("flow", flow_table),
}


def to_csv(table: Table) -> str:
    header, rows = table
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()
