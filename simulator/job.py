"""A job: the config made concrete (mesh, device, layers per pipeline chunk, MoE token loads, fault lookups)."""

from __future__ import annotations

from dataclasses import dataclass

from paradiag.simulator import devices, schedule
from paradiag.simulator.config import ConfigError, SimConfig
from paradiag.simulator.faults import Fault, in_steps
from paradiag.simulator.mesh import Mesh

TOP_K = 2


def stage_layers(cfg: SimConfig) -> list[int]:
    """Transformer layers per pipeline stage: even, or as a stage_imbalance fault sets them."""
    even = [cfg.layers // cfg.pp] * cfg.pp
    for i in range(cfg.layers % cfg.pp):
        even[i] += 1
    fault = next((f for f in cfg.faults if f.kind == "stage_imbalance"), None)
    if fault is None:
        return even
    if fault.params.get("layers"):
        layers = list(fault.params["layers"])
        if len(layers) != cfg.pp or sum(layers) != cfg.layers or min(layers) < cfg.virtual_stages:
            raise ConfigError(
                f"stage_imbalance: layers={'/'.join(map(str, layers))} must list {cfg.pp} stages of at least {cfg.virtual_stages} layers summing to {cfg.layers}"
            )
        return layers
    stage, extra = fault.params.get("stage"), int(fault.params.get("extra") or 2)
    if stage is None or not 0 <= stage < cfg.pp or cfg.pp < 2:
        raise ConfigError(
            f"stage_imbalance: stage= must name a pipeline stage in 0..{cfg.pp - 1} (and --pp must be > 1)"
        )
    others = [s for s in range(cfg.pp) if s != stage]
    for i in range(extra):
        donor = others[i % len(others)]
        if even[donor] <= cfg.virtual_stages:
            raise ConfigError(
                f"stage_imbalance: stage {donor} has too few layers to give {extra} to stage {stage}"
            )
        even[donor] -= 1
        even[stage] += 1
    return even


@dataclass
class Job:
    """Everything the program builder and the engine need to know about the simulated job."""

    cfg: SimConfig
    mesh: Mesh
    spec: devices.DeviceSpec
    stage_layers: list[int]
    chunk_layers: list[list[int]]  # global chunk -> global layer indices

    @classmethod
    def build(cls, cfg: SimConfig) -> Job:
        mesh = Mesh(cfg.dp, cfg.tp, cfg.pp, cfg.ep, cfg.devices_per_node)
        per_stage = stage_layers(cfg) if cfg.model == "llm" else [0]
        v = cfg.virtual_stages
        counts = [0] * (cfg.pp * v)
        for s, n in enumerate(per_stage):
            for c in range(v):
                counts[schedule.chunk_of(cfg.schedule, cfg.pp, s, c)] = n // v + (1 if c < n % v else 0)
        chunks, start = [], 0
        for n in counts:
            chunks.append(list(range(start, start + n)))
            start += n
        return cls(cfg, mesh, devices.get(cfg.device), per_stage, chunks)

    @property
    def chunks(self) -> int:
        return self.cfg.pp * self.cfg.virtual_stages

    def is_moe(self, layer: int) -> bool:
        return self.cfg.num_experts > 0 and layer % self.cfg.moe_every == self.cfg.moe_every - 1

    def faults(self, kind: str) -> list[Fault]:
        return [f for f in self.cfg.faults if f.kind == kind]

    def expert_tokens(self, rank: int, step: int, tokens: int) -> tuple[int, int]:
        """(tokens this rank sends, tokens its experts receive) in one MoE layer of one micro-batch."""
        ep = self.cfg.ep
        sent = tokens * TOP_K
        weights = [1.0] * ep
        for f in self.faults("expert_imbalance"):
            if in_steps(f, step):
                weights[int(f.params["ep_rank"]) % ep] *= float(f.params["factor"])
        share = weights[self.mesh.ep_index(rank)] / sum(weights)
        return sent, int(sent * ep * share)

    def compute_factor(self, rank: int, step: int) -> float:
        factor = 1.0
        for f in self.faults("slow_device"):
            if rank in f.params["ranks"] and in_steps(f, step):
                factor *= float(f.params["factor"])
        return factor

    def input_factor(self, rank: int, step: int) -> float:
        """How much more data than its peers the rank works on (``slow_device`` with ``inputs=1``: a bigger local
        batch, its operators' inputs ``factor`` x larger, as their time is)."""
        factor = 1.0
        for f in self.faults("slow_device"):
            if f.params.get("inputs") and rank in f.params["ranks"] and in_steps(f, step):
                factor *= float(f.params["factor"])
        return factor

    def hotspots(self, rank: int, step: int) -> list[tuple[str, float]]:
        return [
            (str(f.params["operator"]), float(f.params["factor"]))
            for f in self.faults("operator_hotspot")
            if rank in f.params["ranks"] and in_steps(f, step)
        ]

    def host_stall_us(self, rank: int, step: int) -> float:
        return sum(
            float(f.params["ms"]) * 1e3
            for f in self.faults("host_stall")
            if rank in f.params["ranks"] and in_steps(f, step)
        )

    def link_factor(self, a: int, b: int, step: int) -> float:
        factor = 1.0
        for f in self.faults("slow_link"):
            if not in_steps(f, step):
                continue
            if (f.params.get("ranks") and {a, b} == set(f.params["ranks"])) or (
                f.params.get("nodes") and {self.mesh.node(a), self.mesh.node(b)} == set(f.params["nodes"])
            ):
                factor *= float(f.params["factor"])
        return factor

    def group_link_factor(self, ranks: tuple[int, ...], step: int) -> float:
        """How much slower a group's collectives run because a slow link joins two of its members (or nodes)."""
        factor = 1.0
        for f in self.faults("slow_link"):
            if not in_steps(f, step):
                continue
            if (f.params.get("ranks") and set(f.params["ranks"]) <= set(ranks)) or (
                f.params.get("nodes") and set(f.params["nodes"]) <= {self.mesh.node(r) for r in ranks}
            ):
                factor *= float(f.params["factor"])
        return factor

    def link(self, a: int, b: int, step: int) -> tuple[float, float]:
        """(GB/s, latency us) of the link a -> b during ``step``, slow links included."""
        same_node = self.mesh.node(a) == self.mesh.node(b)
        bw = self.spec.intra_gbps if same_node else self.spec.inter_gbps
        lat = self.spec.intra_latency_us if same_node else self.spec.inter_latency_us
        return bw / self.link_factor(a, b, step), lat

    def clock_offset_us(self, rank: int) -> float:
        node = self.mesh.node(rank)
        return sum(
            float(f.params["ms"]) * 1e3 for f in self.faults("clock_skew") if node in f.params["nodes"]
        )
