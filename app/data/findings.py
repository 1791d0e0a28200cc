"""The ranked findings the summary bar lists: the analysis report's, or (until the report carries them) two
plain checks over the overview data (a rank computing slower than its stage peers; in a job without pipeline
stages, a rank the others waited for), each with its culprit ranks, steps and evidence."""

from __future__ import annotations

from typing import Any

import numpy as np

from paradiag.app import store
from paradiag.app.data.overview import overview, report
from paradiag.dataset import Job

Z_SLOW = 3.5
LATE_MS = 1.0


def findings_of(job: Job) -> list[dict[str, Any]]:
    found = report(job).get("findings") or []
    if found:
        return list(found)
    return store.memo("findings", job.content_hash, 1, lambda: _fallback(job))


def _fallback(job: Job) -> list[dict[str, Any]]:
    ov = overview(job)
    out = _slow_ranks(ov) + (_late_arrivals(ov) if len(set(ov["stage"])) == 1 else [])
    for f in out:
        f.setdefault("source", "dashboard checks")
    return sorted(out, key=lambda f: -f["impact_pct"])


def _matrix(ov: dict[str, Any], metric: str) -> np.ndarray:
    return np.array([[np.nan if v is None else v for v in row] for row in ov["metrics"][metric]], dtype=float)


def _slow_ranks(ov: dict[str, Any]) -> list[dict[str, Any]]:
    z, compute, step = _matrix(ov, "zscore"), _matrix(ov, "compute_ms"), _matrix(ov, "step_ms")
    out = []
    for i, rank in enumerate(ov["ranks"]):
        hot = [j for j in range(len(ov["steps"])) if z[i, j] > Z_SLOW]
        if len(hot) * 2 < len(ov["steps"]):
            continue
        peers = [k for k in range(len(ov["ranks"])) if ov["stage"][k] == ov["stage"][i] and k != i]
        extra = float(np.nanmedian(compute[i] - np.nanmedian(compute[peers], axis=0))) if peers else 0.0
        out.append(
            {
                "kind": "slow_device",
                "ranks": [rank],
                "stage": ov["stage"][i],
                "steps": [ov["steps"][j] for j in hot],
                "impact_pct": round(100 * extra / float(np.nanmedian(step)), 1),
                "severity": "high" if extra > 0.1 * float(np.nanmedian(step)) else "medium",
                "evidence": f"rank {rank} computes {extra:.2f} ms more per step than its stage peers (z = {float(np.nanmedian(z[i, hot])):.0f})",
            }
        )
    return out


def _late_arrivals(ov: dict[str, Any]) -> list[dict[str, Any]]:
    """A rank that waits far less than everyone else in a step made the others wait for it."""
    wait, step, z = _matrix(ov, "wait_ms"), _matrix(ov, "step_ms"), _matrix(ov, "zscore")
    out = []
    for j, s in enumerate(ov["steps"]):
        column = wait[:, j]
        if np.all(np.isnan(column)) or len(column) < 3:
            continue
        i = int(np.nanargmin(column))
        others = float(np.nanmedian(np.delete(column, i)))
        gap = others - float(column[i])
        if gap < LATE_MS or gap < 0.5 * others or z[i, j] > Z_SLOW:
            continue
        rank = ov["ranks"][i]
        out.append(
            {
                "kind": "host_stall",
                "ranks": [rank],
                "stage": ov["stage"][i],
                "steps": [s],
                "impact_pct": round(100 * gap / float(np.nanmedian(step[:, j])), 1),
                "severity": "high" if gap > 0.1 * float(np.nanmedian(step[:, j])) else "medium",
                "evidence": f"in step {s} the others waited {others:.2f} ms in collectives for rank {rank}, which waited {column[i]:.2f} ms; its compute is normal",
            }
        )
    return out
