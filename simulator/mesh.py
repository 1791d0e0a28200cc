"""The DP x TP x PP (x EP) device mesh: ranks, nodes, and the process groups Megatron creates.

Rank order is Megatron's: tensor-parallel ranks are adjacent (inside a node), then data-parallel, then pipeline
stages. Expert-parallel groups split each data-parallel group into consecutive slices of ``ep`` ranks.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProcessGroup:
    """One communicator: its global name (the same on every member), its role and its member ranks."""

    index: int
    name: str  # pg_name, "0" is the default group
    role: str  # world, dp, tp, pp, ep
    description: str
    ranks: tuple[int, ...]

    @property
    def size(self) -> int:
        return len(self.ranks)


DESCRIPTIONS = {
    "world": "default_pg",
    "dp": "DATA_PARALLEL_GROUP",
    "tp": "TENSOR_MODEL_PARALLEL_GROUP",
    "pp": "PIPELINE_MODEL_PARALLEL_GROUP",
    "ep": "EXPERT_MODEL_PARALLEL_GROUP",
}


MESH_ORDER = (
    "pp",
    "dp",
    "tp",
    "ep",
)  # DeviceMesh dims outermost first (Megatron rank order: tp fastest), EP last


class Mesh:
    """Coordinates of every rank and the groups it belongs to."""

    def __init__(self, dp: int, tp: int, pp: int, ep: int, devices_per_node: int) -> None:
        self.dp, self.tp, self.pp, self.ep = dp, tp, pp, ep
        self.world = dp * tp * pp
        self.devices_per_node = min(devices_per_node, self.world)
        self.nodes = -(-self.world // self.devices_per_node)
        self.groups: list[ProcessGroup] = []
        self._of_rank: list[dict[str, ProcessGroup]] = [{} for _ in range(self.world)]
        self._add("world", [list(range(self.world))])
        self._add("dp", [[self.rank(s, d, t) for d in range(dp)] for s in range(pp) for t in range(tp)])
        self._add("tp", [[self.rank(s, d, t) for t in range(tp)] for s in range(pp) for d in range(dp)])
        self._add("pp", [[self.rank(s, d, t) for s in range(pp)] for d in range(dp) for t in range(tp)])
        if ep > 1:
            slices = [range(k * ep, (k + 1) * ep) for k in range(dp // ep)]
            self._add(
                "ep",
                [[self.rank(s, d, t) for d in sl] for s in range(pp) for t in range(tp) for sl in slices],
            )

    def _add(self, role: str, member_lists: list[list[int]]) -> None:
        for members in member_lists:
            if role != "world" and len(members) == 1:
                continue  # a one-rank group never communicates
            group = ProcessGroup(
                len(self.groups), str(len(self.groups)), role, DESCRIPTIONS[role], tuple(members)
            )
            self.groups.append(group)
            for r in members:
                self._of_rank[r][role] = group

    def rank(self, stage: int, dp_index: int, tp_index: int) -> int:
        return tp_index + self.tp * (dp_index + self.dp * stage)

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(stage, dp index, tp index) of ``rank``."""
        return rank // (self.tp * self.dp), (rank // self.tp) % self.dp, rank % self.tp

    def stage(self, rank: int) -> int:
        return rank // (self.tp * self.dp)

    def ep_index(self, rank: int) -> int:
        return self.coords(rank)[1] % self.ep

    def node(self, rank: int) -> int:
        return rank // self.devices_per_node

    def local_device(self, rank: int) -> int:
        return rank % self.devices_per_node

    def group(self, rank: int, role: str) -> ProcessGroup | None:
        return self._of_rank[rank].get(role)

    def groups_of(self, rank: int) -> list[ProcessGroup]:
        return sorted(self._of_rank[rank].values(), key=lambda g: g.index)

    def stage_rank(self, rank: int, stage: int) -> int:
        """The rank holding ``stage`` in the same pipeline as ``rank``."""
        _, d, t = self.coords(rank)
        return self.rank(stage, d, t)

    def torch2_names(self, dp_dim: str = "dp") -> dict[int, tuple[str, str]]:
        """group index -> (pg_name, pg_desc) as a PyTorch 2.x job with ``init_device_mesh`` names its groups: the
        default group ``"0"``, then every slice of each mesh dimension (outermost first) numbered in creation order,
        described ``mesh_<dim>`` (the data-parallel dim called ``dp_dim``: dp, dp_shard or dp_replicate)."""
        out = {g.index: ("0", "default_pg") for g in self.groups if g.role == "world"}
        counter = 1
        for role in MESH_ORDER:
            for g in self.groups:
                if g.role == role:
                    out[g.index] = (str(counter), f"mesh_{dp_dim if role == 'dp' else role}")
                    counter += 1
        return out

    def device_mesh(self, dp_dim: str = "dp") -> dict[str, object] | None:
        """The DeviceMesh of the job (dims of size > 1, outermost first, EP aside): dim names, shape, global ranks."""
        dims = [(role, n) for role, n in (("pp", self.pp), ("dp", self.dp), ("tp", self.tp)) if n > 1]
        if not dims:
            return None

        def nest(level: int, coords: dict[str, int]) -> object:
            if level == len(dims):
                return self.rank(coords.get("pp", 0), coords.get("dp", 0), coords.get("tp", 0))
            role, n = dims[level]
            return [nest(level + 1, {**coords, role: i}) for i in range(n)]

        names = [dp_dim if role == "dp" else role for role, _ in dims]
        return {"dim_names": names, "shape": [n for _, n in dims], "ranks": nest(0, {})}
