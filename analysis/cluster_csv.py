"""Already-aggregated Ascend cluster step times (msprof-analyze ``cluster_step_trace_time.csv``) and the slow rank
they show.

The CSV has one row per (step, rank) with ``Type`` = ``rank`` (and per-stage maxima with ``Type`` = ``stage``,
whose ``Index`` lists the stage's ranks); times are microseconds. Here a row becomes nanoseconds under the names
of ``analysis/npu_breakdown.py``.

The slow rank follows the same rule as for traces: among the ranks of one stage (which wait for each other in
their collectives), the culprit is the one with the most time of its own (``computing`` + ``free``: computing,
or the device idle because its host is late) and, consistently, the least time in exposed communication (it
waits least: the others wait for it). Its kind is ``host_stall`` when its extra time is mostly ``free``, else
``slow_device``.
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from paradiag.analysis.frame import robust_z
from paradiag.parsers.ascend_common import STEP_TRACE_COLUMNS

COLUMNS = STEP_TRACE_COLUMNS  # the same columns as each rank's step_trace_time.csv


def read_cluster_step_trace_time(path: str | Path) -> tuple[pa.Table, list[list[int]]]:
    """The per-rank rows as a table (rank, step, the columns in ns) and the stages the file lists."""
    path = Path(path)
    if path.is_dir():
        path = next(path.rglob("cluster_step_trace_time.csv"))
    rows: dict[str, list[Any]] = {"rank": [], "step": []}
    stages: list[list[int]] = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row["Type"] == "stage":
                ranks = sorted(int(x) for x in row["Index"].strip("()[] ").split(",") if x.strip())
                if ranks not in stages:
                    stages.append(ranks)
                continue
            rows["rank"].append(int(row["Index"]))
            rows["step"].append(int(row["Step"]) if row["Step"] not in ("", None) else -1)
            for name, column in COLUMNS.items():
                value = row.get(name)
                rows.setdefault(column, []).append(
                    round(float(value) * 1000) if value not in (None, "") else None
                )
    return pa.table(rows), sorted(stages)


def _medians(table: pa.Table) -> dict[int, dict[str, float]]:
    """Per rank, over its steps: median own time (computing + free), free, and exposed communication."""
    cols = table.to_pydict()
    samples: dict[int, dict[str, list[float]]] = {}
    for i, rank in enumerate(cols["rank"]):
        entry = samples.setdefault(rank, {"own": [], "free": [], "comm": []})
        entry["own"].append(cols["computing_ns"][i] + cols["free_ns"][i])
        entry["free"].append(cols["free_ns"][i])
        entry["comm"].append(cols["communication_not_overlapped_ns"][i])
    return {r: {k: statistics.median(v) for k, v in e.items()} for r, e in samples.items()}


def slow_rank(table: pa.Table, stages: list[list[int]]) -> dict[str, Any] | None:
    """The rank its stage waits for, with its figures; None when no rank stands out (robust z of own time over
    its stage below 1.5, or its exposed communication not among the stage's lowest third)."""
    per_rank = _medians(table)
    best: dict[str, Any] | None = None
    for stage in stages or [sorted(per_rank)]:
        ranks = [r for r in stage if r in per_rank]
        if len(ranks) < 3:
            continue
        own = np.array([per_rank[r]["own"] for r in ranks])
        comm = [per_rank[r]["comm"] for r in ranks]
        free = np.array([per_rank[r]["free"] for r in ranks])
        z = robust_z(own, floor_ratio=0.001)
        i = int(z.argmax())
        waits_least = sorted(comm).index(comm[i]) < max(1, len(ranks) // 3)
        if z[i] < 1.5 or not waits_least or (best is not None and z[i] <= best["z"]):
            continue
        extra_own, extra_free = own[i] - np.median(own), free[i] - np.median(free)
        best = {
            "rank": ranks[i],
            "stage_ranks": ranks,
            "z": round(float(z[i]), 2),
            "own_ns": int(own[i]),
            "stage_median_own_ns": int(np.median(own)),
            "communication_not_overlapped_ns": int(comm[i]),
            "stage_median_communication_ns": int(statistics.median(comm)),
            "kind": "host_stall" if extra_free > 0.5 * extra_own else "slow_device",
        }
    return best
