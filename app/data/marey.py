"""Marey's graph data for one step: stages as stations, each operator instance a band across the rows of its
stage, send/recv pairs linking stages, bubbles and waits.

The model is the analysis layer's (``paradiag.analysis.marey``): operator instances common to every device of a
stage, devices folded into rows (alike devices one row with their spread, a mesh group that runs late one row,
anomalous devices and the findings' culprits single). This module reads the step's events (of a large stage, only
the devices that can differ: ``read_ranks``), memoizes the model per job content, and shapes it for the figure: a
stage or one of its mesh groups can be expanded, and neighbouring bands merge for the visible window so the drawing
stays legible and its size bounded at any zoom.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from paradiag.analysis import comm
from paradiag.analysis import marey as model
from paradiag.analysis.frame import find_rows
from paradiag.app import palette, store
from paradiag.app.data.common import diagnosis, origin_ns, read_events
from paradiag.app.data.mesh import mesh_of
from paradiag.app.data.overview import focus_of
from paradiag.app.data.shapes import (
    ExpandOption,
    FocusMarks,
    MareyBands,
    MareyData,
    MareyRow,
    MareyStage,
    P2PPair,
    PathPiece,
)
from paradiag.job import Job

COLUMNS = ["rank", "device", "kind", "name", "start_ns", "dur_ns", "step", "collective"]
BUBBLE_FRAC = 0.01
MAX_BARS = 600  # bands x rows drawn per stage (each bar carries its hover) ...
TOTAL_BARS = 1500  # ... and over all stages ...
MIN_BANDS = 24  # ... but at least this many bands a stage
SMALL_JOB = 16  # ranks up to which every device has a row from the start
READ_ALL = 16  # devices of a stage read whole; a larger stage reads those that can differ (``read_ranks``)
ALL = "devices"  # the expand value that opens every stage to its devices ...
MAX_ALL = 64  # ... offered up to this many ranks (beyond, a stage or a group opens at a time)
EXPAND_KEY = r"devices|stage:\d{1,9}|group:\d{1,9}:\d{1,9}"  # every expand value ``marey_data`` reads
MAX_PATH = 600  # critical-path pieces drawn (each with its hover); beyond, neighbours on one rank merge


def step_bands(job: Job, step: int) -> dict[str, Any]:
    """Per stage: the ranks read (``ranks``, see :func:`read_ranks`) and all its ranks (``all_ranks``), and per
    band (rows) x rank read (columns) start/end in ns, plus name, category and pipeline pass. Each stage is
    memoised on its own: opening one stage reads only its own devices."""
    return {"step": step, "stages": [stage_bands(job, step, s) for s in mesh_of(job).stages]}


def stage_bands(job: Job, step: int, stage: int, extra: tuple[int, ...] = ()) -> dict[str, Any]:
    """One stage's bands over :func:`read_ranks` and the ranks ``extra`` (an opened group's devices)."""
    ranks = read_ranks(job, step, stage, extra)
    return store.memo("marey-stage", job, [step, stage, ranks], lambda: _stage_bands(job, step, stage, ranks))


def read_ranks(job: Job, step: int, stage: int, extra: tuple[int, ...] = ()) -> list[int]:
    """The devices of a stage whose events the views read: all of them up to READ_ALL; beyond, those that can
    differ from the rest (the top finding's ranks, those whose compute time in the step stands out in the
    Diagnosis, ``extra``) and one device per mesh group (a group running late shows on it). The others are
    drawn with their group's row, or the stage's: a cold step at 1024 ranks reads ~20 devices a stage, not 128."""
    return store.memo(
        "marey-read",
        job,
        [step, stage, sorted(extra), READ_ALL],
        lambda: _read_ranks(job, step, stage, extra),
    )


def _read_ranks(job: Job, step: int, stage: int, extra: tuple[int, ...]) -> list[int]:
    mesh = mesh_of(job)
    ranks = mesh.ranks_of_stage(stage)
    if len(ranks) <= READ_ALL:
        return ranks
    mine = set(ranks)
    first_of_group: dict[int, int] = {}
    for r in ranks:
        first_of_group.setdefault(mesh.dp[r], r)
    named = set(top_culprits(job)) & mine
    named = named if len(named) <= READ_ALL else set()  # too many to read one by one: their rows are alike
    return sorted(
        set(first_of_group.values()) | named | _standing_out(job, step, ranks) | (set(extra) & mine)
    )


def _standing_out(job: Job, step: int, ranks: list[int]) -> set[int]:
    """Ranks whose compute time in ``step`` (the Diagnosis' ``rank_steps``) stands out from the stage's (as
    :func:`paradiag.analysis.marey.fold_rows` tells anomalous devices), at most READ_ALL, farthest first."""
    table = diagnosis(job).rank_steps
    rows = table.filter(
        pc.and_(
            pc.equal(table.column("step"), step), pc.is_in(table.column("rank"), pa.array(ranks, pa.int32()))
        )
    ).to_pydict()
    compute = np.asarray(rows["compute_ns"], dtype=np.float64)
    if not len(compute):
        return set()
    odd = np.flatnonzero(model.outliers(compute, model.FLOOR_FRAC * float(np.median(rows["step_ns"]))))
    far = odd[np.argsort(-np.abs(compute[odd] - np.median(compute)))][:READ_ALL]
    return {int(rows["rank"][i]) for i in far.tolist()}


def band_span(job: Job, step: int) -> tuple[int, int]:
    """The step's first band start and last band end over all stages."""
    lo, hi = store.memo("marey-span", job, step, lambda: _span(step_bands(job, step)))
    return int(lo), int(hi)


def _stage_bands(job: Job, step: int, stage: int, ranks: list[int]) -> dict[str, Any]:
    events = read_events(job, ranks=ranks, columns=COLUMNS)
    kind = events.column("kind").cast(pa.string())
    keep = pc.and_(
        pc.equal(events.column("step"), step),
        pc.and_(
            pc.greater_equal(events.column("device"), 0),
            pc.is_in(kind, pa.array(["compute", "communication", "memory"])),
        ),
    )
    events = events.filter(keep)
    names = pc.dictionary_encode(events.column("name").cast(pa.string())).combine_chunks()
    arrays = {
        "rank": events.column("rank").to_numpy(),
        "name": names.indices.to_numpy(zero_copy_only=False),
        "start": events.column("start_ns").to_numpy(),
        "end": _delivered(job, step, events),
    }
    out = _stage_table(
        arrays, names.dictionary.to_pylist(), events.select(["kind", "collective"]), ranks, stage
    )
    out["all_ranks"] = mesh_of(job).ranks_of_stage(stage)
    _label_passes(job, step, [out])
    return out


def _delivered(job: Job, step: int, events: pa.Table) -> np.ndarray:
    """The events' ends, a send's or receive's where its data went across as the analysis found it
    (``comm.DELIVERED``: on a CPU rank, not where its host waited on it late: drawn to the measured end, a ZBV job's
    sends, waited on at the step's end, covered every rank's compute). Only the sides that ended early are looked
    up (none on a GPU job)."""
    start = events.column("start_ns").to_numpy()
    end = start + events.column("dur_ns").to_numpy()
    p2p = diagnosis(job).p2p
    if comm.DELIVERED[0] not in p2p.column_names or not events.num_rows:
        return end
    pairs = p2p.filter(pc.equal(p2p.column("step"), step))
    keys, done = [], []
    for side, (rank, at, measured, delivered) in enumerate(
        (
            ("src", "send_start_ns", "send_end_ns", comm.DELIVERED[0]),
            ("dst", "recv_start_ns", "recv_end_ns", comm.DELIVERED[1]),
        )
    ):
        early = pairs.filter(pc.less(pairs.column(delivered), pairs.column(measured)))
        keys.append(
            np.stack(
                [early.column(rank).to_numpy(), early.column(at).to_numpy(), np.full(early.num_rows, side)],
                axis=1,
            )
        )
        done.append(early.column(delivered).to_numpy())
    known, ends = np.concatenate(keys).astype(np.int64), np.concatenate(done).astype(np.int64)
    if not len(known):
        return end
    known, first = np.unique(known, axis=0, return_index=True)
    side = pc.fill_null(events.column("collective").cast(pa.string()), "").to_numpy(zero_copy_only=False)
    direction = np.select([side == "send", side == "recv"], [0, 1], -1)
    found = find_rows(
        known, np.stack([events.column("rank").to_numpy(), start, direction], axis=1).astype(np.int64)
    )
    hit = (found >= 0) & (direction >= 0)
    end[hit] = np.minimum(end[hit], ends[first[found[hit]]])
    return end


def _label_passes(job: Job, step: int, stages: list[dict[str, Any]]) -> None:
    """Each band's pipeline pass (micro-batch and direction), from the analysis' passes of its stage's first
    device."""
    passes = diagnosis(job).passes
    for st in stages:
        times = st["start"][:, 0] if st["start"].size else np.zeros(0, dtype=np.int64)
        st["pass"] = (
            model.pass_labels(passes, st["ranks"][0], step, times)
            if st["ranks"] and passes.num_rows
            else [""] * len(times)
        )


def _stage_table(
    arrays: dict[str, np.ndarray], words: list[str], kinds: pa.Table, ranks: list[int], stage: int
) -> dict[str, Any]:
    column_of = np.full(int(max(ranks, default=0)) + 1, -1, dtype=np.int64)
    column_of[ranks] = np.arange(len(ranks))
    rank = arrays["rank"]
    mine = np.flatnonzero(
        (rank <= column_of.size - 1) & (column_of[np.minimum(rank, column_of.size - 1)] >= 0)
    )
    idx = model.instance_matrix(
        column_of[rank[mine]], arrays["name"][mine], arrays["start"][mine], len(ranks)
    )
    events = mine[idx]
    first = events[:, 0] if len(events) else np.zeros(0, dtype=np.int64)
    return {
        "stage": stage,
        "ranks": ranks,
        "names": [words[i] for i in arrays["name"][first].tolist()],
        "category": [
            palette.category_of(str(k), c)
            for k, c in zip(
                kinds.column("kind").take(first).to_pylist(),
                kinds.column("collective").take(first).to_pylist(),
                strict=True,
            )
        ],
        "start": arrays["start"][events],
        "end": arrays["end"][events],
    }


def marey_data(
    job: Job,
    step: int,
    window: tuple[int, int] | None,
    merge_frac: float = 0.005,
    expand: list[str] | None = None,
    keep: list[int] | None = None,
) -> MareyData:
    """Everything the Marey figure draws for a step (ms since the job origin), merged for the window. ``expand``:
    "devices" (every device a row), "stage:S" (stage S by mesh group), "group:S:G" (group G of stage S by
    device); ``keep``: ranks that stay single rows (default: the top finding's ranks). The whole step, the view
    every step opens with, is computed once per job."""
    opened = sorted(set(expand or []))
    kept = sorted(set(keep if keep is not None else top_culprits(job)))
    if window is None:
        return store.memo(
            "marey-step",
            job,
            [step, merge_frac, opened, kept, SMALL_JOB, READ_ALL],
            lambda: _marey_data(job, step, None, merge_frac, opened, kept),
        )
    return _marey_data(job, step, window, merge_frac, opened, kept)


def top_culprits(job: Job) -> list[int]:
    """The ranks that keep a row of their own (the analysis' focus: the findings' culprit ranks, a link's ranks;
    not a whole stage, which its rows draw already)."""
    return list(focus_of(job).single)


def focus_marks(job: Job) -> FocusMarks:
    """What the graph marks of the top finding: ``{"kind", "stage" (a whole stage's finding, else None), "ranks"
    (the ranks it names), "reasons" (rank -> why), "headline"}``."""
    f = focus_of(job)
    return {
        "kind": f.kind,
        "stage": f.stage if f.subject == "stage" else None,
        "ranks": list(f.ranks),
        "reasons": {int(r): t for r, t in f.reasons.items()},
        "headline": f.headline,
    }


def folded(job: Job, step: int, expand: list[str], keep: list[int]) -> dict[str, Any]:
    """Per stage, its rows (which devices each draws) and each row's band times, memoised per stage and the way
    it is opened."""
    mesh = mesh_of(job)
    lo, hi = band_span(job, step)
    every = (ALL in expand and len(mesh.ranks) <= MAX_ALL) or len(mesh.ranks) <= SMALL_JOB
    stages = []
    for s in mesh.stages:
        how = "devices" if every else "groups" if f"stage:{s}" in expand else ""
        opened = sorted(int(e.split(":")[2]) for e in expand if e.startswith(f"group:{s}:"))
        kept = [r for r in keep if mesh.stage.get(r) == s]
        stages.append(
            store.memo(
                "marey-rows",
                job,
                [step, s, how, opened, kept, READ_ALL],
                partial(_stage_rows, job, step, s, how, opened, kept, hi - lo),
            )
        )
    return {"step": step, "span": (lo, hi), "stages": stages}


def _stage_rows(
    job: Job, step: int, stage: int, how: str, opened: list[int], keep: list[int], step_ns: int
) -> dict[str, Any]:
    mesh = mesh_of(job)
    wanted = [r for r in mesh.ranks_of_stage(stage) if how == "devices" or mesh.dp[r] in opened]
    st = stage_bands(job, step, stage, tuple(wanted))
    ranks = st["ranks"]
    compute = np.array([c == "compute" for c in st["category"]], dtype=bool)
    groups = [mesh.dp[r] for r in ranks]
    rows = model.fold_rows(
        st["start"],
        st["end"],
        compute,
        [f"rank {r}" for r in ranks],
        groups,
        step_ns,
        how,
        frozenset(i for i, r in enumerate(ranks) if r in keep),
        frozenset(opened),
    )
    busy = model.device_scores(st["start"], st["end"], compute)[0] / 1e6
    times = [model.row_times(st["start"], st["end"], row.members) for row in rows]
    empty = np.zeros((len(st["names"]), 0), dtype=np.int64)
    unread = _unread_rows(
        rows, ranks, [r for r in st.get("all_ranks", ranks) if r not in set(ranks)], mesh.dp
    )
    return {
        "stage": stage,
        "rows": [_row(row, ranks, groups, stage, busy, more) for row, more in zip(rows, unread, strict=True)],
        "names": st["names"],
        "category": st["category"],
        "pass": st.get("pass") or [""] * len(st["names"]),
        **{
            k: np.column_stack([t[k] for t in times]) if times else empty
            for k in ("start", "end", "lo", "hi", "slow_ns")
        },
        "slow_rank": np.column_stack([np.asarray(ranks)[t["slow_col"]] for t in times]) if times else empty,
    }


def _unread_rows(
    rows: list[model.Row], ranks: list[int], unread: list[int], dp: dict[int, int]
) -> list[list[int]]:
    """Per row, the devices not read that it draws: a device goes with the row of its mesh group where its
    group has one, else with the stage's row (else the first row)."""
    out: list[list[int]] = [[] for _ in rows]
    group_row = {dp[ranks[row.members[0]]]: i for i, row in enumerate(rows) if row.kind == "group"}
    stage_row = next((i for i, row in enumerate(rows) if row.kind == "stage"), 0)
    for r in unread:
        if rows:
            out[group_row.get(dp[r], stage_row)].append(r)
    return out


def _row(
    row: model.Row, ranks: list[int], groups: list[int], stage: int, busy_ms: np.ndarray, unread: list[int]
) -> MareyRow:
    """A row as drawn: its label, ranks (those read first, then the others it stands for), anomalous ranks and
    why (busy compute time against the stage's median)."""
    members = [ranks[c] for c in row.members] + unread
    if row.kind == "stage":
        label = f"stage {stage}" + (f" · {len(members)} alike" if len(members) > 1 else "")
    elif row.kind == "group":
        label = f"s{stage} dp{groups[row.members[0]]} · {len(members)}"
    else:
        label = row.label
    median = float(np.median(busy_ms)) if len(busy_ms) else 0.0
    why = [
        f"rank {ranks[c]}: {busy_ms[c]:.2f} ms of compute vs {median:.2f} ms median in stage {stage}"
        for c in row.anomalous[:4]
    ]
    return {
        "kind": row.kind,
        "label": label,
        "ranks": members,
        "anomalous": [ranks[c] for c in row.anomalous],
        "why": why,
        "group": groups[row.members[0]],
    }


def _marey_data(
    job: Job, step: int, window: tuple[int, int] | None, merge_frac: float, expand: list[str], keep: list[int]
) -> MareyData:
    rows = folded(job, step, expand, keep)
    t0 = origin_ns(job)
    lo, hi = window or rows["span"]
    step_lo, step_hi = rows["span"]
    drawn = sum(len(st["rows"]) for st in rows["stages"])
    stages: list[MareyStage] = [
        {
            "stage": st["stage"],
            "rows": st["rows"],
            **_window(st, lo, hi, merge_frac, t0, drawn),
            "bubbles": _bubbles(st, lo, hi, t0, BUBBLE_FRAC * (step_hi - step_lo)),
        }
        for st in rows["stages"]
    ]
    heads = sorted({row["ranks"][0] for st in stages for row in st["rows"]})
    p2p = p2p_pairs(job, step, heads)  # one device per row (its first): the others' lines would overlap them
    return {
        "step": step,
        "window_ms": [(lo - t0) / 1e6, (hi - t0) / 1e6],
        "stages": stages,
        "p2p": p2p,
        "expandable": _expandable(job, rows),
        "focus": focus_marks(job),
    }


def _expandable(job: Job, rows: dict[str, Any]) -> list[ExpandOption]:
    """The expand options that change something: a stage with mesh groups of several devices, and its groups."""
    mesh = mesh_of(job)
    out: list[ExpandOption] = [{"label": " all devices", "value": ALL}] if len(mesh.ranks) <= MAX_ALL else []
    for st in rows["stages"]:
        ranks = mesh.ranks_of_stage(st["stage"])
        groups = sorted({mesh.dp[r] for r in ranks})
        if len(ranks) > 1:
            out.append({"label": f"stage {st['stage']}", "value": f"stage:{st['stage']}"})
        if len(groups) < len(ranks):
            out += [
                {"label": f"s{st['stage']} dp{g}", "value": f"group:{st['stage']}:{g}"}
                for g in groups
                if any(r["kind"] == "group" and r["group"] == g for r in st["rows"])
            ]
    return out


def _window(st: dict[str, Any], lo: int, hi: int, merge_frac: float, t0: int, drawn: int) -> MareyBands:
    """A stage's bands overlapping [lo, hi), merged: times in ms, per row; labels; the slowest device."""
    most = max(
        MIN_BANDS, min(model.MAX_BANDS, MAX_BARS // max(len(st["rows"]), 1), TOTAL_BARS // max(drawn, 1))
    )  # more rows, fewer bands
    visible, group = model.merge_bands(st["start"], st["end"], st["category"], lo, hi, merge_frac, most)
    if len(visible) == 0:
        return {
            "start": [],
            "end": [],
            "lo": [],
            "hi": [],
            "slow_rank": [],
            "slow_ms": [],
            "category": [],
            "shares": [],
            "label": [],
            "operator": [],
            "pass": [],
        }
    cats = [st["category"][i] for i in visible.tolist()]
    names = [st["names"][i] for i in visible.tolist()]
    passes = [st["pass"][i] for i in visible.tolist()]
    n = int(group[-1]) + 1
    first = np.r_[0, np.flatnonzero(np.diff(group)) + 1]
    count = np.bincount(group, minlength=n)
    dur = (st["end"][visible] - st["start"][visible]).sum(axis=1)
    category = model.dominant(cats, dur, group)
    mix = model.shares(cats, dur, group)
    slow_rank, slow_ns = _slowest(st["slow_rank"][visible], st["slow_ns"][visible], group, n)

    def ms(values: np.ndarray) -> list[list[float]]:
        return ((values - t0) / 1e6).round(5).tolist()

    return {
        "start": ms(model.merged(st["start"][visible], group, "min")),
        "end": ms(model.merged(st["end"][visible], group, "max")),
        "lo": ms(model.merged(st["lo"][visible], group, "min")),
        "hi": ms(model.merged(st["hi"][visible], group, "max")),
        "slow_rank": slow_rank.tolist(),
        "slow_ms": (slow_ns / 1e6).round(4).tolist(),
        "category": category,
        "shares": [[[c, f] for c, f in parts] for parts in mix],
        "label": [
            names[i] if c == 1 else f"{c} operators from {names[i][:50]}"
            for i, c in zip(first.tolist(), count.tolist(), strict=True)
        ],
        "pass": [passes[i] for i in first.tolist()],
        "operator": [names[i] for i in first.tolist()],
    }


def _slowest(rank: np.ndarray, ns: np.ndarray, group: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per merged band and row, the slowest device among the bands merged into it and its time."""
    out_rank = np.zeros((n, rank.shape[1]), dtype=np.int64)
    out_ns = np.zeros((n, rank.shape[1]), dtype=np.int64)
    for j in range(rank.shape[1]):
        order = np.lexsort((ns[:, j], group))
        last = order[np.r_[np.flatnonzero(np.diff(group[order])), len(order) - 1]]
        out_rank[:, j], out_ns[:, j] = rank[last, j], ns[last, j]
    return out_rank, out_ns


def p2p_pairs(job: Job, step: int, heads: list[int] | None = None) -> list[P2PPair]:
    """The step's send/recv pairs; with ``heads``, only those sent or received by one of these ranks."""
    chosen = sorted(set(heads)) if heads is not None else None
    return store.memo("marey-p2p", job, [step, chosen], lambda: _p2p(job, step, origin_ns(job), chosen))


def _span(bands: dict[str, Any]) -> tuple[int, int]:
    starts = [int(s["start"].min()) for s in bands["stages"] if s["start"].size]
    ends = [int(s["end"].max()) for s in bands["stages"] if s["end"].size]
    return (min(starts), max(ends)) if starts else (0, 1)


def _bubbles(st: dict[str, Any], lo: int, hi: int, t0: int, min_ns: float) -> list[list[list[float]]]:
    """Per row of the stage: [start, end] (ms) of its gaps with no compute longer than ``min_ns``."""
    compute = np.array([c == "compute" for c in st["category"]], dtype=bool)
    return [
        ((gaps - t0) / 1e6).round(5).tolist()
        for gaps in model.bubbles(st["start"], st["end"], compute, lo, hi, min_ns)
    ]


def _p2p(job: Job, step: int, t0: int, heads: list[int] | None) -> list[P2PPair]:
    """The step's send/recv pairs the analysis matched (``Diagnosis.p2p``): sender, receiver, send start,
    receive end (where its data came: ``comm.DELIVERED``), the receiver's wait (until the send started, at most the
    receive's length)."""
    table = diagnosis(job).p2p
    keep = pc.equal(table.column("step"), step)
    if heads is not None:
        chosen = pa.array(heads, pa.int32())
        keep = pc.and_(
            keep, pc.or_(pc.is_in(table.column("src"), chosen), pc.is_in(table.column("dst"), chosen))
        )
    pairs = table.filter(keep)
    ends = comm.DELIVERED[1] if comm.DELIVERED[1] in pairs.column_names else "recv_end_ns"  # data there
    col = {
        k: pairs.column(c).to_numpy().astype(np.int64)
        for k, c in (
            ("src", "src"),
            ("dst", "dst"),
            ("send_start_ns", "send_start_ns"),
            ("recv_start_ns", "recv_start_ns"),
            ("recv_end_ns", ends),
        )
    }
    wait = np.minimum(
        np.maximum(0, col["send_start_ns"] - col["recv_start_ns"]), col["recv_end_ns"] - col["recv_start_ns"]
    )
    return [
        {"src": src, "dst": dst, "send_ms": send, "recv_ms": recv, "recv_start_ms": begin, "wait_ms": w}
        for src, dst, send, recv, begin, w in zip(
            col["src"].tolist(),
            col["dst"].tolist(),
            ((col["send_start_ns"] - t0) / 1e6).tolist(),
            ((col["recv_end_ns"] - t0) / 1e6).tolist(),
            ((col["recv_start_ns"] - t0) / 1e6).tolist(),
            (wait / 1e6).tolist(),
            strict=True,
        )
    ]


def critical_path(job: Job, step: int, window: tuple[int, int] | None = None) -> list[PathPiece]:
    """The step's critical path as the analysis stored it (``Diagnosis.critical_path``), in ms since the job
    origin, within ``window`` (clipped to it): pieces of rank, kind, operator, start, end. Neighbouring segments
    of one rank and kind are one piece (their longest operator named); beyond MAX_PATH pieces, neighbours on one
    rank merge whatever their kind (the kind holding most of the time named), so a zoomed window shows more."""
    if window is None:
        return store.memo("marey-path", job, step, lambda: _path_pieces(job, step, None))
    return _path_pieces(job, step, window)


def _path_pieces(job: Job, step: int, window: tuple[int, int] | None) -> list[PathPiece]:
    path = diagnosis(job).critical_path
    keep = pc.equal(path.column("step"), step)
    if window is not None:
        keep = pc.and_(
            keep,
            pc.and_(
                pc.greater(path.column("end_ns"), window[0]), pc.less(path.column("start_ns"), window[1])
            ),
        )
    rows = path.filter(keep).sort_by("start_ns").to_pylist()
    if window is not None:
        rows = [
            dict(r, start_ns=max(r["start_ns"], window[0]), end_ns=min(r["end_ns"], window[1])) for r in rows
        ]
    pieces = _merged(rows, lambda a, b: a["rank"] == b["rank"] and a["kind"] == b["kind"])
    if len(pieces) > MAX_PATH:
        pieces = _merged(pieces, lambda a, b: a["rank"] == b["rank"])
    t0 = origin_ns(job)
    return [
        {
            "rank": int(p["rank"]),
            "kind": p["kind"],
            "operator": p["operator"] or "",
            "start_ms": round((p["start_ns"] - t0) / 1e6, 5),
            "end_ms": round((p["end_ns"] - t0) / 1e6, 5),
            "segments": p["segments"],
        }
        for p in pieces
    ]


def _merged(rows: list[dict[str, Any]], joins: Any) -> list[dict[str, Any]]:
    """Runs of neighbouring rows that ``joins`` merged: the kind and the operator holding most of each run's
    time, its span and how many segments it holds."""
    out: list[dict[str, Any]] = []
    run: list[dict[str, Any]] = []
    for r in [*rows, None]:
        if run and (r is None or not joins(run[-1], r)):
            time_of: dict[tuple[str, str], int] = {}
            for m in run:
                key = (m["kind"], m["operator"] or "")
                time_of[key] = time_of.get(key, 0) + m["end_ns"] - m["start_ns"]
            kind, operator = max(time_of, key=time_of.__getitem__)
            out.append(
                {
                    "rank": run[0]["rank"],
                    "kind": kind,
                    "operator": operator,
                    "start_ns": run[0]["start_ns"],
                    "end_ns": max(m["end_ns"] for m in run),
                    "segments": sum(m.get("segments", 1) for m in run),
                }
            )
            run = []
        if r is not None:
            run.append(r)
    return out
