"""The overview heatmap's data: one value per rank and step for each metric, ranks in mesh order; and what the top
finding is about, where every view opens."""

from __future__ import annotations

from typing import Any

import numpy as np

from paradiag.analysis.frame import OUTLIER_DEVIATIONS, robust_z
from paradiag.analysis.report import report_of
from paradiag.app import store
from paradiag.app.data.collectives import wait_by_rank_step
from paradiag.app.data.common import diagnosis, slowest_step
from paradiag.app.data.mesh import mesh_of
from paradiag.dataset import Job

METRICS = {
    "own_z": "own time vs stage peers (robust z)",
    "step_ms": "step time (ms)",
    "compute_ms": "compute (ms)",
    "launch_ms": "launch delay (ms)",
    "comm_exposed_ms": "exposed communication (ms)",
    "idle_ms": "idle (ms)",
    "wait_ms": "wait in collectives (ms)",
    "zscore": "compute vs stage peers (robust z)",
}
DEFAULT_METRIC = "own_z"
Z_METRICS = ("own_z", "zscore")
# A rank's own time is what it spends before its peers can go on: its compute, and the time its host takes to
# feed the device (a data loader stall). In a synchronous step every rank's step time is the same, so only the
# own time, compared within the stage, separates the rank everybody waits for from the ranks that wait. It is
# scored on the sum (with the analysis' ``robust_z``): the analysis' ``launch_delay_z`` alone calls a 50 us
# launch jitter 20 deviations when the launch delays are a few 100 us, however small against the step.
_FROM_BREAKDOWN = {"compute_ms": "compute_ns", "comm_exposed_ms": "comm_exposed_ns", "idle_ms": "idle_ns"}
# Findings about a rank itself (not a stage, a link or the clocks): their ranks are outlined as culprits.
RANK_KINDS = ("slow_device", "host_stall", "operator_hotspot", "expert_imbalance")


def report(job: Job) -> dict[str, Any]:
    return store.memo("report", job, 1, lambda: report_of(job, diagnosis(job)))


def focus(job: Job) -> dict[str, Any]:
    """Where every view opens: the top finding that blames ranks themselves (else the top finding that names
    ranks) as ``{"ranks", "step", "stage", "kind"}`` (ranks empty and step None when nothing stands out)."""
    found = [f for f in diagnosis(job).findings if f.culprit.ranks]
    # The per-rank views (timeline, detail) are about ranks: a finding that blames ranks themselves comes first;
    # a stage or a link is what Marey, the flow graph and the matrix show.
    top = next((f for f in found if f.kind in RANK_KINDS), found[0] if found else None)
    if top is None:
        return {"ranks": [], "step": None, "stage": None, "kind": None}
    return {"ranks": list(top.culprit.ranks), "step": cited_step(top.as_json()), "stage": top.culprit.stage, "kind": top.kind}


def opening_step(job: Job) -> int | None:
    """The step a new page opens on: the one the top finding cites, else the slowest."""
    step = focus(job)["step"]
    return step if step is not None else slowest_step(job)


def cited_step(finding: dict[str, Any]) -> int | None:
    """The step a finding's evidence cites (the analysis' ``step``), else its first step."""
    if finding.get("step") is not None:
        return int(finding["step"])
    steps = finding.get("steps") or []
    return int(steps[0]) if steps else None


def culprits(job: Job) -> dict[int, str]:
    """Rank -> kind of the first finding that names the rank itself as the cause."""
    return {r: next(k for k in kinds if k in RANK_KINDS) for r, kinds in diagnosis(job).culprits().items() if any(k in RANK_KINDS for k in kinds)}


def overview(job: Job) -> dict[str, Any]:
    """``{"ranks", "steps", "stage", "dp", "metrics": {name: rows x steps list}, "found_by"}``."""
    return store.memo("overview", job, 2, lambda: _overview(job))


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
    own = np.full((len(mesh.ranks), len(steps)), np.nan)
    for (rank, step), f in diagnosis(job).figures().items():
        if rank in row and step in col and f["compute_ns"] is not None:
            i, j = row[rank], col[step]
            values["launch_ms"][i, j] = f["launch_delay_ns"] / 1e6
            values["zscore"][i, j] = _number(f["compute_z"])
            own[i, j] = f["compute_ns"] + f["launch_delay_ns"]
    values["own_z"] = _stage_z(own, [mesh.stage[r] for r in mesh.ranks])
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


def _stage_z(values: np.ndarray, stages: list[int]) -> np.ndarray:
    """Per step, each rank's robust z-score (the analysis' ``robust_z``) among the ranks of its stage."""
    out = np.full_like(values, np.nan)
    stage_arr = np.asarray(stages)
    for stage in set(stages):
        rows = np.flatnonzero(stage_arr == stage)
        for j in range(values.shape[1]):
            column = values[rows, j]
            ok = np.isfinite(column)
            if ok.sum() >= 2:
                out[rows[ok], j] = robust_z(column[ok])
    return out


def _listed(matrix: np.ndarray) -> list[list[float | None]]:
    return [[None if np.isnan(v) else round(float(v), 4) for v in row] for row in matrix]


def heatmap_rows(ov: dict[str, Any], metric: str, expanded: list[str] | None = None, max_rows: int = 32, culprit: dict[int, str] | None = None) -> list[dict[str, Any]]:
    """Rows for the heatmap, top to bottom: one per rank; with more than ``max_rows`` ranks, each stage folds
    into one row of its alike ranks (coloured by their median; hover: min/median/max) while the ranks whose own
    time stands out (``OUTLIER_DEVIATIONS``) and the ``culprit`` ranks keep a row each. An ``expanded`` stage (``s3``)
    unfolds into its DP groups (``s3.dp1``), folded the same way; an expanded DP group into its ranks."""
    culprit = culprit or {}
    matrix, own = ov["metrics"][metric], ov["metrics"]["own_z"]
    ranks, stages, dps = ov["ranks"], ov["stage"], ov["dp"]
    singles = [
        {"label": f"rank {r} · s{st}", "ranks": [r], "stage": st, "values": matrix[i], "spread": None, "group": None, "culprit": culprit.get(r)}
        for i, (r, st) in enumerate(zip(ranks, stages, strict=True))
    ]
    if len(ranks) <= max_rows:
        return singles
    expanded_set = set(expanded or [])
    out: list[dict[str, Any]] = []
    for stage in dict.fromkeys(stages):
        members = [i for i, st in enumerate(stages) if st == stage]
        name = f"s{stage}"
        if name not in expanded_set:
            out += _fold(name, members, singles, matrix, own)
            continue
        for dp in dict.fromkeys(dps[i] for i in members):
            sub = [i for i in members if dps[i] == dp]
            sub_name = f"{name}.dp{dp}"
            out += [dict(singles[i], group=sub_name) for i in sub] if sub_name in expanded_set else _fold(sub_name, sub, singles, matrix, own)
    return out


def _fold(name: str, members: list[int], singles: list[dict[str, Any]], matrix: list[list[float | None]], own: list[list[float | None]]) -> list[dict[str, Any]]:
    """One row for the alike ``members`` of a group, then one per member that stands out."""
    apart = [i for i in members if stands_apart(own[i], singles[i]["culprit"])]
    alike = [i for i in members if i not in apart]
    rows = [_group_row(name, singles[alike[0]]["stage"], [singles[i]["ranks"][0] for i in alike], [matrix[i] for i in alike], len(apart))] if alike else []
    return rows + [dict(singles[i], group=name) for i in apart]


def stands_apart(own_z: list[float | None], culprit: str | None) -> bool:
    """Whether a rank keeps a row of its own when alike ranks fold (heatmap, timeline): a finding blames it, or its
    own time (``own_z``, per step) leaves its stage's noise band in some step."""
    return bool(culprit) or max((abs(v) for v in own_z if v is not None), default=0.0) >= OUTLIER_DEVIATIONS


def _group_row(name: str, stage: int, ranks: list[int], values: list[list[float | None]], apart: int) -> dict[str, Any]:
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
    }
