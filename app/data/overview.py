"""The overview heatmap's data: one value per rank and step for each metric, ranks in mesh order; and what the top
finding is about, where every view opens."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any, Literal

import numpy as np

from paradiag.analysis import focus as rules
from paradiag.analysis.focus import (
    DEFAULT_METRIC,
    METRICS,
    PCT_METRICS,
    RANK_KINDS,
    Z_METRICS,
    Focus,
    cited_step,
    stands_apart,
)
from paradiag.analysis.kinds import Kind
from paradiag.analysis.report import Report, report_of
from paradiag.app import store
from paradiag.app.data.collectives import wait_by_rank_step
from paradiag.app.data.common import diagnosis, slowest_step
from paradiag.app.data.mesh import mesh_of
from paradiag.app.data.shapes import HeatmapRow, Overview, StepsFocus
from paradiag.job import Job

__all__ = [
    "DEFAULT_METRIC",
    "METRICS",
    "PCT_METRICS",
    "RANK_KINDS",
    "Z_METRICS",
    "cited_step",
    "stands_apart",
]
# The metrics read from each (rank, step)'s breakdown. The focus metrics (own time against the stage, compute and
# transfers against the job) are the analysis' (``paradiag.analysis.focus``): they tell the rank everybody waits
# for from those who wait in a synchronous step, where every rank's step time is the same.
HEATMAP_MAX_ROWS = 32  # beyond, alike ranks fold

_FROM_BREAKDOWN: dict[str, Literal["compute_ns", "comm_exposed_ns", "idle_ns"]] = {
    "compute_ms": "compute_ns",
    "comm_exposed_ms": "comm_exposed_ns",
    "idle_ms": "idle_ns",
}


def report(job: Job) -> Report:
    return store.memo("report", job, None, lambda: report_of(job, diagnosis(job)))


def focus_of(job: Job) -> Focus:
    """What the first screen is about (the analysis' :func:`paradiag.analysis.focus.focus_of`), once per job."""
    return Focus.from_json(store.memo("focus", job, None, lambda: rules.focus_of(diagnosis(job)).as_json()))


def focus(job: Job) -> dict[str, Any]:
    """Where every view opens: ``{"ranks", "step", "stage", "kind"}`` of the top finding (ranks empty and step
    None when nothing stands out)."""
    f = focus_of(job)
    return {"ranks": list(f.ranks), "step": f.step, "stage": f.stage, "kind": f.kind}


def metric_of(job: Job, metric: str) -> str:
    """The metric drawn for the dropdown's ``metric``: ``focus`` is the one that shows the top finding."""
    return focus_of(job).metric if metric == "focus" else metric


def steps_focus(job: Job) -> StepsFocus:
    """What the step chart says of the top finding: ``{"what", "predicted_ms" (the replay's step time without its
    cause, None without a replay), "saving_pct" (what that saves of the measured step), "estimate_pct" (the
    finding's impact where it is not the replay's: the estimate a CPU job's extra work keeps), "step"}``."""
    f = focus_of(job)
    top = rules.top_finding(diagnosis(job))
    replay = (top.what_if or {}) if top is not None else {}
    saving = replay.get("saving_pct")
    kept = top is not None and saving is not None and abs(top.impact_pct - max(float(saving), 0.0)) >= 0.05
    return {
        "what": (f.kind or "the cause").replace("_", " "),
        "predicted_ms": replay.get("predicted_step_ms"),
        "saving_pct": saving,
        "estimate_pct": top.impact_pct if kept and top is not None else None,
        "step": f.step,
    }


def opening_step(job: Job) -> int | None:
    """The step a new page opens on: the one the top finding cites, else the slowest."""
    step = focus(job)["step"]
    return step if step is not None else slowest_step(job)


def culprits(job: Job) -> dict[int, Kind]:
    """Rank -> kind of the finding that blames it: every finding about ranks themselves, and the top finding's
    ranks (a stage's, a link's)."""
    return focus_of(job).blamed


def shown_ranks(
    job: Job, selected: list[int] | None, step: int | None, limits: tuple[int, int, int, int]
) -> list[int]:
    """The ranks a per-rank view draws one by one (the analysis' rule, :func:`paradiag.analysis.focus.shown_ranks`),
    ``step`` defaulting to the step a new page opens on."""
    ov = overview(job)
    own = dict(zip(ov["ranks"], ov["metrics"]["own_z"], strict=True))
    return rules.shown_ranks(
        diagnosis(job),
        focus_of(job),
        ov["ranks"],
        own,
        selected,
        opening_step(job) if step is None else step,
        limits,
    )


def single(job: Job) -> set[int]:
    """The ranks that keep a row of their own in every view (the focus' ``single``)."""
    return set(focus_of(job).single)


def overview(job: Job) -> Overview:
    """``{"ranks", "steps", "stage", "dp", "metrics": {name: rows x steps list}, "found_by"}``."""
    return store.memo("overview", job, None, lambda: _overview(job))


def _overview(job: Job) -> Overview:
    mesh = mesh_of(job)
    rep = report(job)
    steps = sorted(rep["job"]["steps"])
    col = {s: i for i, s in enumerate(steps)}
    row = {r: i for i, r in enumerate(mesh.ranks)}
    values = {m: np.full((len(mesh.ranks), len(steps)), np.nan) for m in METRICS if m != "focus"}
    for entry in rep["ranks"]:
        i = row[entry["rank"]]
        for s in entry["steps"]:
            j = col[s["step"]]
            values["step_ms"][i, j] = s["step_time_ns"] / 1e6
            for metric, field in _FROM_BREAKDOWN.items():
                if s["breakdown"]:
                    values[metric][i, j] = s["breakdown"][field] / 1e6
    for (rank, step), wait in wait_by_rank_step(job).items():
        if rank in row and step in col:
            values["wait_ms"][row[rank], col[step]] = wait / 1e6
    for (rank, step), f in diagnosis(job).figures().items():
        if rank in row and step in col and f["compute_ns"] is not None:
            i, j = row[rank], col[step]
            values["launch_ms"][i, j] = f["launch_delay_ns"] / 1e6
            values["zscore"][i, j] = _number(f["compute_z"])
    values.update(rules.figures(diagnosis(job), mesh.ranks, steps))
    return {
        "ranks": mesh.ranks,
        "steps": steps,
        "stage": [mesh.stage[r] for r in mesh.ranks],
        "dp": [mesh.dp[r] for r in mesh.ranks],
        "metrics": {m: _listed(v) for m, v in values.items()},
        "found_by": mesh.found_by,
    }


def _number(value: float | None) -> float:
    return float("nan") if value is None else float(value)


def _listed(matrix: np.ndarray) -> list[list[float | None]]:
    return [[None if np.isnan(v) else round(float(v), 4) for v in row] for row in matrix]


def heatmap_rows(
    ov: Overview,
    metric: str,
    expanded: list[str] | None = None,
    max_rows: int = 32,
    culprit: Mapping[int, Kind] | None = None,
    single: set[int] | None = None,
    reasons: dict[int, str] | None = None,
) -> list[HeatmapRow]:
    """Rows for the heatmap, top to bottom: one per rank; with more than ``max_rows`` ranks, each stage folds
    into one row of its alike ranks (coloured by their median; hover: min/median/max) while the ranks whose own
    time stands out (``stands_apart``) and the ``single`` ranks (default: the ``culprit`` ranks) keep a row each.
    A row whose ranks a finding all blames (``culprit``: rank -> kind) is marked, with the ``reasons`` of its first
    rank. An ``expanded`` stage (``s3``) unfolds into its DP groups (``s3.dp1``), folded the same way; an expanded
    DP group into its ranks."""
    culprit = culprit or {}
    single = set(culprit) if single is None else single
    reasons = reasons or {}
    matrix, own = ov["metrics"][metric], ov["metrics"]["own_z"]
    ranks, stages, dps = ov["ranks"], ov["stage"], ov["dp"]
    singles: list[HeatmapRow] = [
        {
            "label": f"rank {r} · s{st}",
            "ranks": [r],
            "stage": st,
            "values": matrix[i],
            "spread": None,
            "group": None,
            "culprit": culprit.get(r),
            "reason": reasons.get(r),
        }
        for i, (r, st) in enumerate(zip(ranks, stages, strict=True))
    ]
    if len(ranks) <= max_rows:
        return singles
    expanded_set = set(expanded or [])
    fold = partial(_fold, singles=singles, matrix=matrix, own=own, single=single)
    out: list[HeatmapRow] = []
    for stage in dict.fromkeys(stages):
        members = [i for i, st in enumerate(stages) if st == stage]
        name = f"s{stage}"
        if name not in expanded_set:
            out += fold(name, members)
            continue
        for dp in dict.fromkeys(dps[i] for i in members):
            sub = [i for i in members if dps[i] == dp]
            sub_name = f"{name}.dp{dp}"
            out += (
                [{**singles[i], "group": sub_name} for i in sub]
                if sub_name in expanded_set
                else fold(sub_name, sub)
            )
    return out


def _fold(
    name: str,
    members: list[int],
    singles: list[HeatmapRow],
    matrix: list[list[float | None]],
    own: list[list[float | None]],
    single: set[int],
) -> list[HeatmapRow]:
    """One row for the alike ``members`` of a group, then one per member that stands out."""
    apart = [i for i in members if stands_apart(own[i], singles[i]["ranks"][0] in single)]
    alike = [i for i in members if i not in apart]
    if not alike:
        return [{**singles[i], "group": name} for i in apart]
    row = _group_row(
        name,
        singles[alike[0]]["stage"],
        [singles[i]["ranks"][0] for i in alike],
        [matrix[i] for i in alike],
        len(apart),
    )
    kinds = {singles[i]["culprit"] for i in alike}
    if (
        len(kinds) == 1 and None not in kinds
    ):  # a finding about the whole group (a stage): the row is the culprit
        row["culprit"], row["reason"] = kinds.pop(), singles[alike[0]]["reason"]
    return [row] + [{**singles[i], "group": name} for i in apart]


def _group_row(
    name: str, stage: int, ranks: list[int], values: list[list[float | None]], apart: int
) -> HeatmapRow:
    block = np.array([[np.nan if v is None else v for v in row] for row in values], dtype=float)
    with np.errstate(all="ignore"):
        med, lo, hi = (np.nanmedian(block, axis=0), np.nanmin(block, axis=0), np.nanmax(block, axis=0))
    kind = "alike ranks" if apart else "ranks"
    return {
        "label": f"{name} · {len(ranks)} {kind}",
        "ranks": ranks,
        "stage": stage,
        "values": [None if np.isnan(v) else round(float(v), 4) for v in med],
        "spread": [f"{a:.3f} / {b:.3f} / {c:.3f}" for a, b, c in zip(lo, med, hi, strict=True)],
        "group": name,
        "culprit": None,
        "reason": None,
    }
