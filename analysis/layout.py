"""The parallel layout of a job: each rank's pipeline stage and data/tensor/expert parallel coordinates.

Taken, in this order of trust, from the ranks' own coordinates (Ascend ``distributed_args``), from the process
group names (Kineto ``pg_config``: ``TENSOR_MODEL_PARALLEL_GROUP``, ...; Ascend ``parallel_group_info``: ``tp``,
...), or inferred from who talks to whom (send/recv chains give the pipeline order; among the collective groups,
the one with the most instances per step is tensor parallel, all-to-all groups are expert parallel, the rest data
parallel). ``found_by`` says which.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from paradiag.analysis.frame import Frame
from paradiag.parsers.base import group_role

AXES = ("dp", "tp", "pp", "ep")
P2P = ("send", "recv", "send_recv")


@dataclass
class Layout:
    """``stage_of`` rank -> pipeline stage; ``coords`` rank -> {dp, tp, pp, ep}; ``roles`` group id -> dp/tp/pp/ep/
    world; ``size`` the degree of each axis; ``found_by`` metadata:coordinates | metadata:group_names |
    inferred:communication | assumed:data_parallel."""

    coords: dict[int, dict[str, int]]
    roles: dict[str, str]
    found_by: str
    size: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for axis in AXES:
            self.size.setdefault(axis, len({c[axis] for c in self.coords.values()}) or 1)

    @property
    def world(self) -> int:
        """Ranks in the job (expert parallelism splits the data-parallel ranks, it adds none)."""
        return self.size["dp"] * self.size["tp"] * self.size["pp"]

    def group_sizes(self, members: dict[str, list[int]]) -> dict[str, int]:
        """Each group's size: its members where the traces list them, else the degree of its role's axis (HCCL
        exports name only group-local ranks; the layout took the degree from the largest group)."""
        axis = {**{a: self.size[a] for a in AXES}, "world": self.world}
        return {g: len(m) or axis.get(self.roles.get(g, ""), 0) for g, m in members.items()}

    @property
    def stage_of(self) -> dict[int, int]:
        return {r: c["pp"] for r, c in self.coords.items()}

    @property
    def stages(self) -> list[list[int]]:
        """The ranks of each stage, stage 0 first."""
        return [sorted(r for r, c in self.coords.items() if c["pp"] == s) for s in range(self.size["pp"])]

    def as_dict(self) -> dict[str, Any]:
        return {
            **{axis: self.size[axis] for axis in AXES},
            "found_by": self.found_by,
            "stages": self.stages,
            "coords": {str(r): c for r, c in sorted(self.coords.items())},
            "group_roles": dict(sorted(self.roles.items())),
        }


def role_from_description(description: str | None, size: int, world: int) -> str | None:
    """dp/tp/pp/ep/cp/world from a process group's name (``parsers.base.group_role``: DeviceMesh ``mesh_dp``,
    Megatron ``TENSOR_MODEL_PARALLEL_GROUP``, ...), None when the name says nothing."""
    text = (description or "").lower()
    if size == world and "default" in text:
        return "world"
    return group_role(description)


# Roles that are no axis of their own: context parallel shards the sequence across ranks that do the same work
# as data-parallel replicas, so its index counts on the dp axis.
AXIS_OF_ROLE = {"cp": "dp"}


def _coords_from_groups(
    ranks: list[int], members: dict[str, list[int]], roles: dict[str, str]
) -> dict[int, dict[str, int]]:
    """A rank's coordinate on an axis is its position in its group of that role (Megatron lists the pipeline
    group's stages in order); without a group on an axis it is 0. Several groups on one axis (HSDP's
    ``dp_replicate`` x ``dp_shard``, dp x cp) combine in mixed radix, the group of widest rank stride outermost;
    a group holding all the others' members (torchtitan's flattened ``dp``) is the axis by itself."""
    coords = {r: dict.fromkeys(AXES, 0) for r in ranks}
    for rank in ranks:
        by_axis: dict[str, list[list[int]]] = {}
        for group, role in roles.items():
            axis = AXIS_OF_ROLE.get(role, role)
            group_ranks = members.get(group, [])
            if axis in AXES and rank in group_ranks:
                by_axis.setdefault(axis, []).append(group_ranks)
        for axis, found in by_axis.items():
            widest = max(found, key=len)
            if all(set(g) <= set(widest) for g in found):
                found = [widest]
            found.sort(key=lambda g: -(min(np.diff(sorted(g))) if len(g) > 1 else 0))
            coordinate = 0
            for g in found:
                coordinate = coordinate * len(g) + g.index(rank)
            coords[rank][axis] = coordinate
    return coords


def layout_from_metadata(ranks: pa.Table, groups: pa.Table) -> Layout | None:
    """The layout the traces state: the ranks' coordinates, or else the process group names."""
    rank_ids = ranks.column("rank").to_pylist()
    members = {
        g: list(m)
        for g, m in zip(groups.column("group").to_pylist(), groups.column("ranks").to_pylist(), strict=True)
    }
    world = len(rank_ids)
    roles = {}
    for g, d in zip(
        groups.column("group").to_pylist(), groups.column("description").to_pylist(), strict=True
    ):
        role = role_from_description(d, len(members[g]), world)
        if role is not None:
            roles[g] = role
    stated = {a: ranks.column(a).to_pylist() for a in AXES}
    if all(v is not None for a in ("dp", "tp", "pp") for v in stated[a]):
        coords = {r: {a: int(stated[a][i] or 0) for a in AXES} for i, r in enumerate(rank_ids)}
        return Layout(coords, roles, "metadata:coordinates")
    if any(AXIS_OF_ROLE.get(role, role) in AXES for role in roles.values()):
        return Layout(_coords_from_groups(rank_ids, members, roles), roles, "metadata:group_names")
    return None


def infer_roles(frame: Frame, members: dict[str, list[int]], world: int) -> dict[str, str]:
    """Group roles from the traffic: p2p -> pp, all-to-all -> ep, the whole world -> world; among the other
    collective groups the busiest (instances per step and rank) are tp when a second, quieter family exists
    or when they gather/scatter activations (not a lone family over every rank: FSDP's parameter gathers),
    otherwise dp."""
    comm = frame.of_kind("communication")
    roles: dict[str, str] = {}
    busy: dict[str, float] = {}
    for code, group in enumerate(comm.groups):
        mine = comm.group == code
        used = Counter(comm.collectives[c] for c in comm.collective[mine])
        if any(p in used for p in P2P):
            roles[group] = "pp"
        elif "all_to_all" in used:
            roles[group] = "ep"
        elif len(members.get(group, ())) == world and world > 1 and len(members) > 1:
            roles[group] = "world"
        else:
            per = len(np.unique(comm.step[mine])) * max(len(np.unique(comm.rank[mine])), 1)
            busy[group] = int(mine.sum()) / max(per, 1)
    if busy:
        top = max(busy.values())
        quiet = [g for g, b in busy.items() if b < top / 4]
        for g, b in busy.items():
            activations = any(
                comm.collectives[c] in ("all_gather", "reduce_scatter")
                for c in comm.collective[comm.group == comm.groups.index(g)]
            )
            # A lone family spanning every rank gathers parameters, not activations: sharded data parallel (FSDP,
            # ZeRO-3) over the world, which a 1-D DeviceMesh runs on the default group. Tensor parallelism over the
            # whole world alone is told only by its group's name.
            lone = len(busy) == 1 and len(members.get(g, ())) == world
            roles[g] = "tp" if b >= top / 4 and (quiet or (activations and not lone)) else "dp"
    return roles


def pipeline_order(
    frame: Frame, members: dict[str, list[int]], roles: dict[str, str]
) -> dict[str, list[int]]:
    """Each pipeline group's ranks in stage order: the chain of send/recv pairs, starting from the end whose first
    p2p operation of the first step is a send (stage 0 sends activations before it receives anything)."""
    comm = frame.of_kind("communication")
    ordered = {}
    for group, role in roles.items():
        if role != "pp":
            continue
        mine = (comm.group == comm.groups.index(group)) & (comm.peer >= 0)
        edges = {
            tuple(sorted((int(a), int(b)))) for a, b in zip(comm.rank[mine], comm.peer[mine], strict=True)
        }
        neighbours: dict[int, set[int]] = {}
        for a, b in edges:
            neighbours.setdefault(a, set()).add(b)
            neighbours.setdefault(b, set()).add(a)
        ends = [r for r, n in neighbours.items() if len(n) == 1]
        if len(ends) != 2:
            ordered[group] = members.get(group, sorted(neighbours))
            continue
        first_step = int(comm.step[mine].min())

        def sends_first(rank: int, mine: np.ndarray = mine, first_step: int = first_step) -> bool:
            rows = np.flatnonzero(mine & (comm.rank == rank) & (comm.step == first_step))
            return len(rows) > 0 and comm.collectives[comm.collective[rows[0]]] == "send"

        chain = [next((e for e in ends if sends_first(e)), min(ends))]
        while len(chain) < len(neighbours):
            chain.append(next(iter(neighbours[chain[-1]] - set(chain))))
        ordered[group] = chain
    return ordered


def parallel_layout(ranks: pa.Table, groups: pa.Table, frame: Frame | None = None) -> Layout:
    """The job's layout, from metadata when the traces state it, else inferred from ``frame``'s traffic."""
    stated = layout_from_metadata(ranks, groups)
    if stated is not None:
        return stated
    rank_ids = [int(r) for r in ranks.column("rank").to_pylist()]
    members = {
        g: list(m)
        for g, m in zip(groups.column("group").to_pylist(), groups.column("ranks").to_pylist(), strict=True)
    }
    # The world the traces state (or the largest group they record), however many of its ranks were profiled.
    world = max([int(w) for w in ranks.column("world_size").to_pylist() if w] + [len(rank_ids)])
    data_parallel = {
        r: {"dp": r if world > len(rank_ids) else i, "tp": 0, "pp": 0, "ep": 0}
        for i, r in enumerate(rank_ids)
    }
    if frame is not None:
        roles = infer_roles(frame, members, len(rank_ids))
        if set(roles.values()) == {"dp"} and not any(members.get(g) for g in roles):
            # Data-parallel groups whose members no trace lists (HCCL without metadata): every rank a replica.
            return Layout(data_parallel, roles, "inferred:communication", size={"dp": world})
        if any(role in AXES for role in roles.values()):
            ordered = {**members, **pipeline_order(frame, members, roles)}
            return Layout(_coords_from_groups(rank_ids, ordered, roles), roles, "inferred:communication")
    return Layout(data_parallel, {}, "assumed:data_parallel", size={"dp": world})
