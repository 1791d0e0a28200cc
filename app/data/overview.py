"""The overview heatmap's data: one value per rank and step for each metric, ranks in mesh order."""

from __future__ import annotations

from typing import Any

import numpy as np

from paradiag.analysis.report import report_of
from paradiag.app import store
from paradiag.app.data.collectives import wait_by_rank_step
from paradiag.app.data.common import diagnosis
from paradiag.app.data.mesh import mesh_of
from paradiag.dataset import Job

METRICS = {
    "step_ms": "step time (ms)",
    "compute_ms": "compute (ms)",
    "comm_exposed_ms": "exposed communication (ms)",
    "idle_ms": "idle (ms)",
    "wait_ms": "wait in collectives (ms)",
    "zscore": "imbalance z-score (compute vs stage peers)",
}
_FROM_BREAKDOWN = {"compute_ms": "compute_ns", "comm_exposed_ms": "comm_exposed_ns", "idle_ms": "idle_ns"}


def report(job: Job) -> dict[str, Any]:
    return store.memo("report", job.content_hash, 1, lambda: report_of(job, diagnosis(job)))


def overview(job: Job) -> dict[str, Any]:
    """``{"ranks", "steps", "stage", "metrics": {name: rows x steps list}, "found_by"}``."""
    return store.memo("overview", job.content_hash, 1, lambda: _overview(job))


def _overview(job: Job) -> dict[str, Any]:
    mesh = mesh_of(job)
    rep = report(job)
    steps = sorted(rep["job"]["steps"])
    col = {s: i for i, s in enumerate(steps)}
    row = {r: i for i, r in enumerate(mesh.ranks)}
    values = {m: np.full((len(mesh.ranks), len(steps)), np.nan) for m in METRICS}
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
    values["zscore"] = _stage_zscore(values["compute_ms"], [mesh.stage[r] for r in mesh.ranks])
    return {
        "ranks": mesh.ranks,
        "steps": steps,
        "stage": [mesh.stage[r] for r in mesh.ranks],
        "dp": [mesh.dp[r] for r in mesh.ranks],
        "metrics": {m: _listed(v) for m, v in values.items()},
        "found_by": mesh.found_by,
    }


def _stage_zscore(compute: np.ndarray, stages: list[int]) -> np.ndarray:
    """Robust z-score (median, 1.4826 MAD) of each rank's compute against the ranks of its stage, per step."""
    out = np.full_like(compute, np.nan)
    stage_arr = np.asarray(stages)
    for stage in set(stages):
        rows = stage_arr == stage
        block = compute[rows]
        med = np.nanmedian(block, axis=0)
        mad = 1.4826 * np.nanmedian(np.abs(block - med), axis=0)
        scale = np.maximum(mad, 0.01 * np.abs(med) + 1e-9)  # a floor: near-identical ranks are not outliers
        out[rows] = (block - med) / scale
    return out


def _listed(matrix: np.ndarray) -> list[list[float | None]]:
    return [[None if np.isnan(v) else round(float(v), 4) for v in row] for row in matrix]


def heatmap_rows(ov: dict[str, Any], metric: str, expanded: list[str] | None = None, max_rows: int = 32) -> list[dict[str, Any]]:
    """Rows for the heatmap: one per rank, or when there are more than ``max_rows`` ranks one per group
    (stage and DP index, or stage) coloured by its worst member (hover: min/median/max), except the
    ``expanded`` groups, whose ranks get a row each."""
    matrix = ov["metrics"][metric]
    ranks, stages, dps = ov["ranks"], ov["stage"], ov["dp"]
    singles = [
        {"label": f"rank {r} · s{st}", "ranks": [r], "stage": st, "values": matrix[i], "spread": [None] * len(ov["steps"]), "group": None}
        for i, (r, st) in enumerate(zip(ranks, stages, strict=True))
    ]
    if len(ranks) <= max_rows:
        return singles
    keys = [(st, dp) for st, dp in zip(stages, dps, strict=True)]
    if len(set(keys)) > max_rows:
        keys = [(st, 0) for st in stages]
    out: list[dict[str, Any]] = []
    for key in dict.fromkeys(keys):
        members = [i for i, k in enumerate(keys) if k == key]
        name = f"s{key[0]}.dp{key[1]}" if len(set(dps)) > 1 and len(set(keys)) > len(set(stages)) else f"s{key[0]}"
        if expanded and name in expanded:
            out += [dict(singles[i], group=name) for i in members]
            continue
        out.append(_group_row(name, key[0], [ranks[i] for i in members], [matrix[i] for i in members]))
    return out


def _group_row(name: str, stage: int, ranks: list[int], values: list[list[float | None]]) -> dict[str, Any]:
    block = np.array([[np.nan if v is None else v for v in row] for row in values], dtype=float)
    med, lo, hi = (np.nanmedian(block, axis=0), np.nanmin(block, axis=0), np.nanmax(block, axis=0))
    return {
        "label": f"{name} ({len(ranks)} ranks)",
        "ranks": ranks,
        "stage": stage,
        "values": [None if np.isnan(v) else round(float(v), 4) for v in hi],
        "spread": [f"{a:.3f} / {b:.3f} / {c:.3f}" for a, b, c in zip(lo, med, hi, strict=True)],
        "group": name,
    }
