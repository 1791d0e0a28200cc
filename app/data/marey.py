"""Marey's graph data for one step: stages as stations (expandable to their devices), each operator instance a
band across the devices of its stage, send/recv pairs linking stages, bubbles and waits.

A band is one operator instance: the same name at the same position (its n-th occurrence in the step) on every
device of a stage. Neighbouring bands of one category merge when, on every device, the gap between them is under
``merge_frac`` of the visible window, so the drawing stays legible at any zoom and its size is bounded.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from paradiag.app import palette, store
from paradiag.app.data import collectives
from paradiag.app.data.common import origin_ns, read_events
from paradiag.app.data.mesh import mesh_of
from paradiag.dataset import Job

COLUMNS = ["rank", "device", "kind", "name", "start_ns", "dur_ns", "step", "collective"]
BUBBLE_FRAC = 0.01
MAX_BANDS = 300  # per stage and view; beyond it, neighbours merge whatever their category (dominant colour kept)
MAX_DEVICES = 8  # devices drawn per stage; the stage row still shows the spread over all of them


def step_bands(job: Job, step: int) -> dict[str, Any]:
    """Per stage: ranks, and per band (rows) x rank (columns) start/end in ns, plus name and category."""
    return store.memo("marey-bands", job.content_hash, step, lambda: _step_bands(job, step))


def _step_bands(job: Job, step: int) -> dict[str, Any]:
    mesh = mesh_of(job)
    events = read_events(job, columns=COLUMNS)
    kind = events.column("kind").cast(pa.string())
    keep = pc.and_(pc.equal(events.column("step"), step), pc.and_(pc.greater_equal(events.column("device"), 0), pc.is_in(kind, pa.array(["compute", "communication", "memory"]))))
    events = events.filter(keep)
    stages = []
    for stage in mesh.stages:
        ranks = mesh.ranks_of_stage(stage)[:MAX_DEVICES]
        stages.append({"stage": stage, "ranks": ranks, **_stage_table(events, ranks)})
    return {"step": step, "stages": stages}


def _stage_table(events: pa.Table, ranks: list[int]) -> dict[str, Any]:
    per_rank = []
    for rank in ranks:
        mine = events.filter(pc.equal(events.column("rank"), rank)).sort_by("start_ns")
        names = mine.column("name").cast(pa.string()).to_pylist()
        seen: dict[str, int] = {}
        keys = []
        for name in names:
            seen[name] = seen.get(name, -1) + 1
            keys.append((name, seen[name]))
        start = mine.column("start_ns").to_numpy()
        end = start + mine.column("dur_ns").to_numpy()
        cats = [palette.category_of(k, c) for k, c in zip(mine.column("kind").cast(pa.string()).to_pylist(), mine.column("collective").cast(pa.string()).to_pylist(), strict=True)]
        per_rank.append({k: (s, e, c) for k, s, e, c in zip(keys, start.tolist(), end.tolist(), cats, strict=True)})
    common = [k for k in per_rank[0] if all(k in other for other in per_rank[1:])] if per_rank else []
    st = np.array([[p[k][0] for p in per_rank] for k in common], dtype=np.int64).reshape(len(common), len(ranks))
    ed = np.array([[p[k][1] for p in per_rank] for k in common], dtype=np.int64).reshape(len(common), len(ranks))
    order = np.argsort(np.median(st, axis=1), kind="stable") if len(common) else np.array([], dtype=np.int64)
    return {
        "names": [common[i][0] for i in order],
        "occurrence": [common[i][1] for i in order],
        "category": [per_rank[0][common[i]][2] for i in order],
        "start": st[order],
        "end": ed[order],
    }


def merge_bands(stage: dict[str, Any], lo: int, hi: int, merge_frac: float) -> dict[str, Any]:
    """The stage's bands overlapping [lo, hi), neighbours of one category merged when every device's gap
    between them is under ``merge_frac`` of the window."""
    st, ed = stage["start"], stage["end"]
    if len(st) == 0:
        return {"start": st, "end": ed, "category": [], "label": [], "first": [], "count": []}
    visible = np.flatnonzero((ed.max(axis=1) > lo) & (st.min(axis=1) < hi))
    st, ed = st[visible], ed[visible]
    cats = np.array(stage["category"], dtype=object)[visible]
    threshold = merge_frac * (hi - lo)
    if len(visible) > 1:
        gap = (st[1:] - np.maximum.accumulate(ed, axis=0)[:-1]).max(axis=1)
        joins = (cats[1:] == cats[:-1]) & (gap <= threshold)
    else:
        joins = np.array([], dtype=bool)
    group = np.r_[0, np.cumsum(~joins)]
    n = int(group[-1]) + 1 if len(group) else 0
    m_st = np.full((n, st.shape[1]), np.iinfo(np.int64).max, dtype=np.int64)
    m_ed = np.zeros((n, st.shape[1]), dtype=np.int64)
    np.minimum.at(m_st, group, st)
    np.maximum.at(m_ed, group, ed)
    if n > MAX_BANDS:  # still too many to read or ship: merge runs of neighbours, the longest category names them
        group = group * MAX_BANDS // n
        n = int(group[-1]) + 1
        m_st = np.full((n, st.shape[1]), np.iinfo(np.int64).max, dtype=np.int64)
        m_ed = np.zeros((n, st.shape[1]), dtype=np.int64)
        np.minimum.at(m_st, group, st)
        np.maximum.at(m_ed, group, ed)
        cats = _dominant(cats, (ed - st).sum(axis=1), group, n)
    first = np.r_[0, np.flatnonzero(np.diff(group)) + 1]
    count = np.bincount(group)
    names = [stage["names"][i] for i in visible]
    return {
        "start": m_st,
        "end": m_ed,
        "category": cats[first].tolist(),
        "label": [names[i] if c == 1 else f"{c} operators from {names[i][:50]}" for i, c in zip(first.tolist(), count.tolist(), strict=True)],
        "first": [names[i] for i in first.tolist()],
        "count": count.tolist(),
    }


def _dominant(cats: np.ndarray, dur: np.ndarray, group: np.ndarray, n: int) -> np.ndarray:
    """Each band's category replaced by the category holding most time in its merged group."""
    best: dict[int, tuple[float, str]] = {}
    totals: dict[tuple[int, str], float] = {}
    for g, c, d in zip(group.tolist(), cats.tolist(), dur.tolist(), strict=True):
        totals[(g, c)] = totals.get((g, c), 0.0) + d
        if totals[(g, c)] > best.get(g, (-1.0, ""))[0]:
            best[g] = (totals[(g, c)], c)
    return np.array([best[g][1] for g in group.tolist()], dtype=object)


def marey_data(job: Job, step: int, window: tuple[int, int] | None, merge_frac: float = 0.005) -> dict[str, Any]:
    """Everything the Marey figure draws for a step (ms since the job origin), merged for the window. The whole
    step, the view every step opens with, is computed once per job."""
    if window is None:
        return store.memo("marey-step", job.content_hash, [step, merge_frac], lambda: _marey_data(job, step, None, merge_frac))
    return _marey_data(job, step, window, merge_frac)


def _marey_data(job: Job, step: int, window: tuple[int, int] | None, merge_frac: float) -> dict[str, Any]:
    bands = step_bands(job, step)
    t0 = origin_ns(job)
    lo, hi = window or _span(bands)
    stages = []
    for stage in bands["stages"]:
        merged = merge_bands(stage, lo, hi, merge_frac)
        stages.append(
            {
                "stage": stage["stage"],
                "ranks": stage["ranks"],
                "start": ((merged["start"] - t0) / 1e6).round(5).tolist(),
                "end": ((merged["end"] - t0) / 1e6).round(5).tolist(),
                "category": merged["category"],
                "label": merged["label"],
                "operator": merged["first"],
                "bubbles": _bubbles(stage, lo, hi, t0),
            }
        )
    return {"step": step, "window_ms": [(lo - t0) / 1e6, (hi - t0) / 1e6], "stages": stages, "p2p": p2p_pairs(job, step)}


def p2p_pairs(job: Job, step: int) -> list[dict[str, Any]]:
    return store.memo("marey-p2p", job.content_hash, step, lambda: _p2p(job, step, origin_ns(job)))


def _span(bands: dict[str, Any]) -> tuple[int, int]:
    starts = [int(s["start"].min()) for s in bands["stages"] if len(s["start"])]
    ends = [int(s["end"].max()) for s in bands["stages"] if len(s["end"])]
    return (min(starts), max(ends)) if starts else (0, 1)


def _bubbles(stage: dict[str, Any], lo: int, hi: int, t0: int) -> list[list[list[float]]]:
    """Per device of the stage: [start, end] (ms) of gaps with no compute longer than BUBBLE_FRAC of the step."""
    st, ed = stage["start"], stage["end"]
    if len(st) == 0:
        return []
    compute = np.array([c == "compute" for c in stage["category"]])
    step_lo, step_hi = int(st.min()), int(ed.max())
    out = []
    threshold = BUBBLE_FRAC * (step_hi - step_lo)
    for j in range(st.shape[1]):
        order = np.argsort(st[compute, j], kind="stable")
        s, e = st[compute, j][order], ed[compute, j][order]
        a = np.r_[step_lo, np.maximum.accumulate(e) if len(e) else e]
        b = np.r_[s, step_hi]
        keep = (b - a > threshold) & (b > lo) & (a < hi)
        out.append(np.column_stack([(a[keep] - t0) / 1e6, (b[keep] - t0) / 1e6]).tolist())
    return out


def _p2p(job: Job, step: int, t0: int) -> list[dict[str, Any]]:
    """Matched send/recv pairs of the step: sender, receiver, send start, receive end, the receiver's wait."""
    table = collectives.instances(job)
    if table.num_rows == 0:
        return []
    kinds = table.column("collective").cast(pa.string())
    part = table.filter(pc.and_(pc.equal(table.column("step"), step), pc.is_in(kinds, pa.array(["send", "recv"]))))
    rows = part.select(["instance", "rank", "peer", "collective", "start_ns", "dur_ns"]).to_pylist()
    pairs = _pairs_by_instance([r for r in rows if r["peer"] is not None])
    pairs += _pairs_by_time([r for r in rows if r["peer"] is None], mesh_of(job).stage)
    out = []
    for s, r in pairs:
        wait = min(max(0, s["start_ns"] - r["start_ns"]), r["dur_ns"])
        out.append(
            {
                "src": s["rank"],
                "dst": r["rank"],
                "send_ms": (s["start_ns"] - t0) / 1e6,
                "recv_ms": (r["start_ns"] + r["dur_ns"] - t0) / 1e6,
                "recv_start_ms": (r["start_ns"] - t0) / 1e6,
                "wait_ms": wait / 1e6,
            }
        )
    return out


def _pairs_by_instance(rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    by_instance: dict[int, dict[str, Any]] = {}
    for row in rows:
        by_instance.setdefault(row["instance"], {})[row["collective"]] = row
    return [(p["send"], p["recv"]) for p in by_instance.values() if "send" in p and "recv" in p]


def _pairs_by_time(rows: list[dict[str, Any]], stage: dict[int, int]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Traces that name no peer (Ascend): a send pairs with the unmatched receive on a neighbouring stage that
    ends closest to it (a blocking pair completes together)."""
    recvs = [r for r in rows if r["collective"] == "recv"]
    used: set[int] = set()
    out = []
    for s in sorted((r for r in rows if r["collective"] == "send"), key=lambda r: r["start_ns"]):
        s_end = s["start_ns"] + s["dur_ns"]
        best, best_gap = None, None
        for i, r in enumerate(recvs):
            if i in used or abs(stage.get(r["rank"], 0) - stage.get(s["rank"], 0)) != 1:
                continue
            gap = abs(r["start_ns"] + r["dur_ns"] - s_end)
            if best_gap is None or gap < best_gap:
                best, best_gap = i, gap
        if best is not None:
            used.add(best)
            out.append((s, recvs[best]))
    return out
