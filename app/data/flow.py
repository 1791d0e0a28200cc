"""The execution-flow graph: per stage, the operators in execution order, cut into nodes at communication
operators, with repeated runs of nodes (the model's layers) collapsed into one block.

Built from the trace alone: the operator instances of a step common to every device of the stage (the Marey
bands), so each node's time is known on every device and its imbalance is max / median over them.
"""

from __future__ import annotations

import re
import statistics
from typing import Any

import numpy as np

from paradiag.app import store
from paradiag.app.data.common import origin_ns
from paradiag.app.data.marey import step_bands
from paradiag.app.data.mesh import mesh_of
from paradiag.app.figures.common import short_name
from paradiag.dataset import Job

MAX_PERIOD = 16
_NUMBERED = re.compile(r"[_\d]+$")  # hcom_send__951_4_1 and hcom_send__951_5_1 are the same operator


def flow_data(job: Job, step: int, expand: bool = False) -> dict[str, Any]:
    """Per stage, the nodes (or collapsed blocks) in execution order; computed once per job, step and expansion."""
    return store.memo("flow", job.content_hash, [step, expand], lambda: _flow_data(job, step, expand))


def _flow_data(job: Job, step: int, expand: bool) -> dict[str, Any]:
    bands = step_bands(job, step)
    mesh = mesh_of(job)
    t0 = origin_ns(job)
    stages = []
    for st in bands["stages"]:
        nodes = _segments(st)
        blocks = nodes if expand else _collapse(nodes)
        for b in blocks:
            b["span_ms"] = [round((b.pop("lo") - t0) / 1e6, 6), round((b.pop("hi") - t0) / 1e6, 6)]
        stages.append({"stage": st["stage"], "ranks": st["ranks"], "tp": len({mesh.tp[r] for r in st["ranks"]}), "dp": len({mesh.dp[r] for r in st["ranks"]}), "nodes": blocks})
    return {"step": step, "stages": stages}


def _segments(st: dict[str, Any]) -> list[dict[str, Any]]:
    """Runs of compute bands end at each communication band; every communication band is a node of its own."""
    nodes: list[dict[str, Any]] = []
    run: list[int] = []
    mean_dur = (st["end"] - st["start"]).mean(axis=1).tolist() if len(st["start"]) else []
    for i, cat in enumerate(st["category"]):
        if cat in ("compute", "memory"):
            run.append(i)
            continue
        if run:
            nodes.append(_node(st, run, "compute", mean_dur))
            run = []
        nodes.append(_node(st, [i], cat, mean_dur))
    if run:
        nodes.append(_node(st, run, "compute", mean_dur))
    return nodes


def _node(st: dict[str, Any], idx: list[int], kind: str, mean_dur: list[float]) -> dict[str, Any]:
    """A node of the bands ``idx``; it is named after the operator holding most of its time (``mean_dur``: each
    band's mean time over the devices)."""
    per_rank = (st["end"][idx] - st["start"][idx]).sum(axis=0)
    names = [st["names"][i] for i in idx]
    time_of: dict[str, float] = {}
    for i, name in zip(idx, names, strict=True):
        time_of[name] = time_of.get(name, 0.0) + mean_dur[i]
    main = max(time_of, key=time_of.__getitem__)
    median = statistics.median(per_rank.tolist())
    return {
        "kind": kind,
        "signature": (kind, tuple(_NUMBERED.sub("", n) for n in names)),
        "label": short_name(main, 28) + (f" +{len(idx) - 1}" if len(idx) > 1 else ""),
        "operators": names,
        "time_ms": float(median) / 1e6,
        "imbalance": float(per_rank.max() / median) if median else 1.0,
        "slowest_rank": int(st["ranks"][int(np.argmax(per_rank))]),
        "repeat": 1,
        "lo": int(st["start"][idx].min()),
        "hi": int(st["end"][idx].max()),
    }


def _collapse(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive repeats of the same run of node signatures become one block ``×n``."""
    out: list[dict[str, Any]] = []
    i = 0
    while i < len(nodes):
        period, repeats = _best_period(nodes, i)
        if repeats < 2:
            out.append(nodes[i])
            i += 1
            continue
        members = nodes[i : i + period * repeats]
        out.append(_block(members, period, repeats))
        i += period * repeats
    return out


def _best_period(nodes: list[dict[str, Any]], i: int) -> tuple[int, int]:
    best = (1, 1)
    for p in range(1, min(MAX_PERIOD, (len(nodes) - i) // 2) + 1):
        unit = [n["signature"] for n in nodes[i : i + p]]
        k = 1
        while [n["signature"] for n in nodes[i + k * p : i + (k + 1) * p]] == unit:
            k += 1
        if k >= 2 and k * p > best[0] * best[1]:
            best = (p, k)
    return best


def _block(members: list[dict[str, Any]], period: int, repeats: int) -> dict[str, Any]:
    kinds = {m["kind"] for m in members}
    return {
        "kind": "block",
        "signature": ("block", tuple(m["signature"] for m in members[:period]), repeats),
        "label": f"{period} nodes ×{repeats}",
        "operators": [op for m in members for op in m["operators"]],
        "time_ms": sum(m["time_ms"] for m in members),
        "imbalance": max(m["imbalance"] for m in members),
        "slowest_rank": max(members, key=lambda m: m["imbalance"])["slowest_rank"],
        "repeat": repeats,
        "contains": sorted(kinds),
        "lo": min(m["lo"] for m in members),
        "hi": max(m["hi"] for m in members),
    }
