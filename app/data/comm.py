"""The communication matrix (src x dst) and the collective instances on one link.

Per-link figures are the Diagnosis's matrix: the trace's own per-link traffic where it records it (Ascend
communication matrices: bytes and transit time per link, intra- or inter-node), else a ring model over collectives
plus send/recv pairs. Each link is rated against comparable links (same transport, transfers of a similar size): its
slowness is their median bandwidth over its own, so a slow link stands out whatever its kind of traffic. Above
MAX_GROUPS ranks the matrix is drawn by pipeline stage or by node (the coarsest that fits), each block showing its
worst link; a click on a block opens its members.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Literal, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from paradiag.app import store
from paradiag.app.data import collectives
from paradiag.app.data.common import diagnosis, origin_ns
from paradiag.app.data.mesh import mesh_of
from paradiag.app.data.shapes import (
    BlockRanks,
    CommCell,
    CommMatrix,
    CommMetric,
    CommView,
    LinkInstance,
    RankGroup,
)
from paradiag.job import Job


def matrix(job: Job) -> CommMatrix:
    """``{"ranks", "cells": [{src, dst, link_type, bytes, time_ns, bandwidth_gbps, instances}], "source"}``: the
    Diagnosis's matrix, rated here. ``ranks`` also holds the ranks only named as link ends (an export that traced
    some ranks of a group records their links to the others)."""
    return store.memo("comm-matrix", job, None, lambda: _matrix(job))


def _matrix(job: Job) -> CommMatrix:
    cells = [cast(CommCell, asdict(c)) for c in diagnosis(job).communication_matrix]
    ranks = sorted(set(job.rank_ids) | {c["src"] for c in cells} | {c["dst"] for c in cells})
    links = job.extra("links")
    measured = (
        links is not None
        and links.num_rows > 0
        and bool(
            pc.any(
                pc.and_(
                    pc.not_equal(links.column("transport"), "LOCAL"), pc.greater(links.column("bytes"), 0)
                )
            ).as_py()
        )
    )
    source = (
        "the trace's per-link traffic (Ascend communication matrix)"
        if measured and cells
        else "collectives (ring model) and send/recv pairs"
    )
    return {
        "ranks": ranks,
        "cells": cells,
        "source": source,
        "slowness": slowness(cells, _dimensions(job, cells)),
    }


MAX_GROUPS = 64  # rows (and columns) the matrix is drawn with at most
MIN_PEERS = 3  # comparable links needed to rate a link against them (else: against its transport alone)
METRICS: dict[CommMetric, str] = {
    "slowness": "× slower than comparable links",
    "bandwidth": "GB/s",
    "bytes": "MB",
    "time": "ms",
}


def metric_named(name: str | None) -> CommMetric:
    """The matrix's metric called ``name``, else slowness."""
    return cast(CommMetric, name) if name in METRICS else "slowness"


def slowness(
    cells: list[CommCell], dimension: dict[tuple[int, int], str] | None = None
) -> list[float | None]:
    """Per link: the median bandwidth of comparable links over its own. Comparable: the same transport and
    parallel dimension (``dimension``: (src, dst) -> "pp", "dp", "tp"...) and a mean transfer within a factor of
    two; with fewer than MIN_PEERS such links, the same transport and dimension."""
    dimension = dimension or {}
    bw = np.array([c["bandwidth_gbps"] or np.nan for c in cells], dtype=np.float64)
    by_class: dict[Any, list[int]] = {}
    by_type: dict[Any, list[int]] = {}
    keys = []
    for i, c in enumerate(cells):
        kind = (c["link_type"], dimension.get((c["src"], c["dst"]), ""))
        size = int(np.round(np.log2(max(c["bytes"] / max(c["instances"], 1), 1.0))))
        keys.append((kind, size))
        by_class.setdefault((kind, size), []).append(i)
        by_type.setdefault(kind, []).append(i)
    out: list[float | None] = []
    for i, (kind, size) in enumerate(keys):
        peers = by_class[(kind, size)] if len(by_class[(kind, size)]) >= MIN_PEERS else by_type[kind]
        ref = float(np.nanmedian(bw[peers])) if np.isfinite(bw[peers]).any() else np.nan
        out.append(round(ref / bw[i], 3) if np.isfinite(ref) and bw[i] > 0 else None)
    return out


def _dimensions(job: Job, cells: list[CommCell]) -> dict[tuple[int, int], str]:
    """The parallel dimension each link crosses: pipeline (its ends in different stages), tensor (same stage and
    data-parallel index) or data. A link to a rank the traces do not cover crosses the job's only parallel axis
    when it has one, else an unknown one (rated apart)."""
    mesh = mesh_of(job)
    sizes = {a: len(set(m.values())) for a, m in (("pp", mesh.stage), ("dp", mesh.dp), ("tp", mesh.tp))}
    axes = [a for a, n in sizes.items() if n > 1] or ["dp"]
    only = axes[0] if len(axes) == 1 else "?"
    out = {}
    for c in cells:
        a, b = c["src"], c["dst"]
        if a not in mesh.stage or b not in mesh.stage:
            out[(a, b)] = only
        elif mesh.stage[a] != mesh.stage[b]:
            out[(a, b)] = "pp"
        else:
            out[(a, b)] = "tp" if mesh.dp.get(a) == mesh.dp.get(b) else "dp"
    return out


def levels(job: Job, ranks: list[int]) -> list[dict[int, str]]:
    """The ways to group ``ranks``, coarsest first: by pipeline stage, by node, one by one."""
    mesh = mesh_of(job)
    hosts = job.by_rank("host")
    return [
        {r: f"s{mesh.stage.get(r, 0)}" for r in ranks},
        {r: str(hosts.get(r) or "?") for r in ranks},
        {r: str(r) for r in ranks},
    ]


def view(job: Job, src: list[int] | None = None, dst: list[int] | None = None) -> CommView:
    """The matrix between ``src`` and ``dst`` ranks (all by default), at the coarsest grouping that splits them
    into at most MAX_GROUPS (single ranks when they are few): ``{"level", "src", "dst": [{"label", "ranks"}],
    "cells": {metric: rows x columns}, "hover", "source"}``. The whole job's view is computed once."""
    if src is None and dst is None:
        return store.memo("comm-view", job, MAX_GROUPS, lambda: _view(job, None, None))
    return _view(job, src, dst)


def _view(job: Job, src: list[int] | None, dst: list[int] | None) -> CommView:
    data = matrix(job)
    src, dst = src or data["ranks"], dst or data["ranks"]
    stage, node, rank = levels(job, data["ranks"])
    level: Literal["rank", "node", "stage"] = "rank"
    rows, cols = _groups(src, rank), _groups(dst, rank)
    coarser: tuple[tuple[Literal["stage", "node"], dict[int, str]], ...] = (
        (("stage", stage), ("node", node)) if len(src) > MAX_GROUPS or len(dst) > MAX_GROUPS else ()
    )
    for name, group in coarser:
        coarse, fine = _groups(src, group), _groups(dst, group)
        if len(coarse) <= MAX_GROUPS and len(fine) <= MAX_GROUPS and (len(coarse) > 1 or len(fine) > 1):
            level, rows, cols = name, coarse, fine
            break
    cells, hover = _blocks(data["cells"], data["slowness"], rows, cols)
    return {
        "level": level,
        "src": rows,
        "dst": cols,
        "source": data["source"],
        "cells": cells,
        "hover": hover,
    }


def block_at(data: CommView, src: str, dst: str) -> BlockRanks | None:
    """The ranks of the block at row ``src``, column ``dst`` of a view drawn by blocks (None at rank level, or
    for labels the view does not have)."""
    if data["level"] == "rank":
        return None
    rows = next((g["ranks"] for g in data["src"] if g["label"] == src), None)
    cols = next((g["ranks"] for g in data["dst"] if g["label"] == dst), None)
    return {"src": rows, "dst": cols} if rows is not None and cols is not None else None


def _groups(ranks: list[int], group: dict[int, str]) -> list[RankGroup]:
    out: dict[str, list[int]] = {}
    for r in ranks:
        out.setdefault(group.get(r, str(r)), []).append(r)
    return [{"label": k, "ranks": v} for k, v in out.items()]


def _blocks(
    cells: list[CommCell],
    slow: list[float | None],
    rows: list[RankGroup],
    cols: list[RankGroup],
) -> tuple[dict[CommMetric, list[list[float | None]]], list[list[str]]]:
    """Each block's figures: bytes and busy time summed, bandwidth of the sums, the worst link's slowness."""
    row_of = {r: i for i, g in enumerate(rows) for r in g["ranks"]}
    col_of = {r: j for j, g in enumerate(cols) for r in g["ranks"]}
    shape = (len(rows), len(cols))
    total = {k: np.zeros(shape) for k in ("bytes", "time", "links", "instances")}
    worst = np.full(shape, np.nan)
    worst_link: dict[tuple[int, int], str] = {}
    types: dict[tuple[int, int], set[str]] = {}
    for c, s in zip(cells, slow, strict=True):
        i, j = row_of.get(c["src"]), col_of.get(c["dst"])
        if i is None or j is None:
            continue
        total["bytes"][i, j] += c["bytes"]
        total["time"][i, j] += c["time_ns"]
        total["links"][i, j] += 1
        total["instances"][i, j] += c["instances"]
        types.setdefault((i, j), set()).add(str(c["link_type"]))
        if s is not None and not s <= worst[i, j]:
            worst[i, j] = s
            worst_link[(i, j)] = f"{c['src']} → {c['dst']}"
    has = total["links"] > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        bandwidth = np.where(has & (total["time"] > 0), total["bytes"] / total["time"], np.nan)
    z: dict[CommMetric, np.ndarray] = {
        "slowness": worst,
        "bandwidth": bandwidth,
        "bytes": np.where(has, total["bytes"] / 1e6, np.nan),
        "time": np.where(has, total["time"] / 1e6, np.nan),
    }
    hover = [["" for _ in cols] for _ in rows]
    for (i, j), kinds in types.items():
        links = int(total["links"][i, j])
        head = f"{rows[i]['label']} → {cols[j]['label']} ({', '.join(sorted(kinds))})" + (
            f" · {links} links, worst {worst_link.get((i, j), '-')}" if links > 1 else ""
        )
        hover[i][j] = (
            f"{head}<br>{worst[i, j]:.2f}× slower than comparable links<br>{bandwidth[i, j]:.1f} GB/s · {z['bytes'][i, j]:.1f} MB · {z['time'][i, j]:.2f} ms · {int(total['instances'][i, j])} transfers"
        )
    return {
        k: [[None if not np.isfinite(v) else round(float(v), 3) for v in row] for row in m]
        for k, m in z.items()
    }, hover


LINK_TOP = 10  # a link's instances listed at most


def link_instances(job: Job, src: int, dst: int, top: int = LINK_TOP) -> list[LinkInstance]:
    """The collective instances both ranks took part in (for send/recv: between them), slowest transfer first,
    ``top`` of them (LINK_TOP at most): computed once per link (a click on it selects the slowest and lists the
    others)."""
    return store.memo("comm-link", job, (src, dst), lambda: _link_instances(job, src, dst))[:top]


def _link_instances(job: Job, src: int, dst: int) -> list[LinkInstance]:
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
    grouped = rows.group_by("instance").aggregate(
        [
            ("transfer_ns", "max"),
            ("wait_ns", "max"),
            ("start_ns", "min"),
            ("dur_ns", "max"),
            ("step", "min"),
            ("collective", "min"),
            ("group", "min"),
            ("bytes", "max"),
        ]
    )
    grouped = grouped.sort_by([("transfer_ns_max", "descending")]).slice(0, LINK_TOP)
    t0 = origin_ns(job)
    out: list[LinkInstance] = []
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
