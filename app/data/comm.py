"""The communication matrix (src x dst) and the collective instances on one link.

Per-link figures come from the trace's own link table when it has one (Ascend communication matrices: bytes and
transit time per link and transport), else from the analysis report's matrix (ring model over collectives, plus
send/recv pairs).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from paradiag.app import store
from paradiag.app.data import collectives
from paradiag.app.data.common import origin_ns
from paradiag.app.data.overview import report
from paradiag.dataset import Job


def matrix(job: Job) -> dict[str, Any]:
    """``{"ranks", "cells": [{src, dst, link_type, bytes, time_ns, bandwidth_gbps, instances}], "source"}``."""
    return store.memo("comm-matrix", job.content_hash, 1, lambda: _matrix(job))


def _matrix(job: Job) -> dict[str, Any]:
    links = job.extra("links")
    if links is not None and links.num_rows:
        links = links.filter(pc.not_equal(links.column("src_global"), links.column("dst_global")))
        grouped = links.group_by(["src_global", "dst_global", "transport"]).aggregate([("bytes", "sum"), ("transit_ns", "sum"), ("bytes", "count")])
        cells = [
            {"src": r["src_global"], "dst": r["dst_global"], "link_type": r["transport"], "bytes": r["bytes_sum"], "time_ns": r["transit_ns_sum"], "instances": r["bytes_count"], "bandwidth_gbps": round(r["bytes_sum"] / r["transit_ns_sum"], 3) if r["transit_ns_sum"] else None}
            for r in grouped.to_pylist()
        ]
        source = "the trace's link table"
    else:
        cells = list(report(job)["metrics"].get("communication_matrix") or [])
        source = "collectives (ring model) and send/recv pairs"
    return {"ranks": job.rank_ids, "cells": cells, "source": source}


def link_instances(job: Job, src: int, dst: int, top: int = 10) -> list[dict[str, Any]]:
    """The collective instances both ranks took part in (for send/recv: between them), slowest transfer first."""
    table = collectives.instances(job)
    if table.num_rows == 0:
        return []
    both = table.filter(pc.is_in(table.column("rank"), value_set=pa.array([src, dst], pa.int32())))
    inst = both.column("instance").to_numpy()
    ranks = both.column("rank").to_numpy()
    has_src = set(inst[ranks == src].tolist())
    shared = [i for i in set(inst[ranks == dst].tolist()) if i in has_src]
    if not shared:
        return []
    rows = table.filter(pc.is_in(table.column("instance"), value_set=pa.array(shared, pa.int64())))
    for name in ("collective", "group"):
        rows = rows.set_column(rows.schema.get_field_index(name), name, rows.column(name).cast(pa.string()))
    grouped = rows.group_by("instance").aggregate([("transfer_ns", "max"), ("wait_ns", "max"), ("start_ns", "min"), ("dur_ns", "max"), ("step", "min"), ("collective", "min"), ("group", "min"), ("bytes", "max")])
    grouped = grouped.sort_by([("transfer_ns_max", "descending")]).slice(0, top)
    t0 = origin_ns(job)
    out = []
    for r in grouped.to_pylist():
        start = (r["start_ns_min"] - t0) / 1e6
        length = max(r["dur_ns_max"] / 1e6, 1e-3)
        out.append(
            {
                "collective": str(r["collective_min"]),
                "group": str(r["group_min"]),
                "step": int(r["step_min"]),
                "transfer_ms": r["transfer_ns_max"] / 1e6,
                "wait_ms": r["wait_ns_max"] / 1e6,
                "bytes": r["bytes_max"],
                "instance": int(r["instance"]),
                "ranks": [src, dst],
                "window": [round(start - 0.5 * length, 6), round(start + 1.5 * length, 6)],
            }
        )
    return out


def as_grid(data: dict[str, Any], metric: str) -> tuple[list[int], list[list[float | None]], list[list[str]]]:
    ranks = data["ranks"]
    index = {r: i for i, r in enumerate(ranks)}
    z: list[list[float | None]] = [[None] * len(ranks) for _ in ranks]
    hover = [[""] * len(ranks) for _ in ranks]
    for c in data["cells"]:
        if c["src"] not in index or c["dst"] not in index:
            continue
        value = {"bandwidth": c["bandwidth_gbps"], "bytes": c["bytes"] / 2**20, "time": c["time_ns"] / 1e6}[metric]
        i, j = index[c["src"]], index[c["dst"]]
        z[i][j] = value if value is None else float(np.round(value, 3))
        hover[i][j] = f"{c['src']} → {c['dst']} ({c['link_type']})<br>{c['bandwidth_gbps']} GB/s · {c['bytes'] / 2**20:.1f} MiB · {c['time_ns'] / 1e6:.2f} ms · {c['instances']} transfers"
    return ranks, z, hover
