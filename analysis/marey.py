"""Data for the Marey (pipeline) view: stages as stations, time within the step on x, one band per micro-batch
and direction.

``marey_spans`` gives every pass of every rank, with times relative to its step's start (the earliest host start
of the step over all ranks, so that stages line up). ``marey_bands`` aggregates the ranks of a stage (its DP
replicas and TP shards) and the steps: per (stage, chunk, micro-batch, direction) the median start and end and
the 10th/90th percentiles, and the individual spans that stand out (an end more than ``OUTLIER_MADS`` robust
deviations, and at least 1 % of the median step, from the band's median) so that a slow rank stays visible.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

OUTLIER_MADS = 3.5


def marey_spans(passes: pa.Table, steps: pa.Table) -> pa.Table:
    """``passes`` (from ``stages.all_passes``) with ``start_rel_ns`` / ``end_rel_ns`` from their step's start."""
    origin: dict[int, int] = {}
    for step, start in zip(steps.column("step").to_pylist(), steps.column("start_ns").to_pylist(), strict=True):
        origin[step] = min(origin.get(step, start), start)
    base = np.array([origin.get(s, 0) for s in passes.column("step").to_pylist()], dtype=np.int64)
    start = passes.column("start_ns").to_numpy() - base
    end = passes.column("end_ns").to_numpy() - base
    return passes.append_column("start_rel_ns", pa.array(start)).append_column("end_rel_ns", pa.array(end))


def _quantiles(values: np.ndarray) -> dict[str, int]:
    q10, q50, q90 = np.percentile(values, [10, 50, 90])
    return {"median": int(q50), "q10": int(q10), "q90": int(q90), "min": int(values.min()), "max": int(values.max())}


def marey_bands(spans: pa.Table, step_ns: float, steps: list[int] | None = None) -> list[dict[str, Any]]:
    """One band per (stage, chunk, micro_batch, direction) over the ranks of the stage and ``steps`` (all by
    default), in stage then start order."""
    if steps is not None:
        spans = spans.filter(pc.is_in(spans.column("step"), pa.array(steps, pa.int64())))
    cols = {k: spans.column(k).to_numpy(zero_copy_only=False) for k in ("stage", "chunk", "micro_batch", "direction", "rank", "step", "start_rel_ns", "end_rel_ns")}
    keys: dict[tuple[int, int, int, str], list[int]] = {}
    for i, key in enumerate(zip(cols["stage"].tolist(), cols["chunk"].tolist(), cols["micro_batch"].tolist(), cols["direction"].tolist(), strict=True)):
        keys.setdefault(key, []).append(i)
    bands: list[dict[str, Any]] = []
    for (stage, chunk, mb, direction), rows in keys.items():
        idx = np.array(rows)
        start, end = cols["start_rel_ns"][idx], cols["end_rel_ns"][idx]
        med = float(np.median(end))
        spread = max(1.4826 * float(np.median(np.abs(end - med))), 0.01 * step_ns)
        out = np.flatnonzero(np.abs(end - med) > OUTLIER_MADS * spread)
        bands.append(
            {
                "stage": stage,
                "chunk": chunk,
                "micro_batch": mb,
                "direction": direction,
                "n": len(idx),
                "start_ns": _quantiles(start),
                "end_ns": _quantiles(end),
                "outliers": [
                    {"rank": int(cols["rank"][idx[o]]), "step": int(cols["step"][idx[o]]), "start_ns": int(start[o]), "end_ns": int(end[o])}
                    for o in out
                ],
            }
        )
    bands.sort(key=lambda b: (b["stage"], b["start_ns"]["median"]))
    return bands
