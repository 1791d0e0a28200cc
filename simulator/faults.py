"""Faults injected on purpose: parsing ``--inject KIND:key=val,...`` and the factors the engine applies.

The kinds are the analysis's registry's (``paradiag.analysis.kinds``: each finding kind names the fault that
produces it): a finding and the fault that caused it carry the same name. A fault's parameters, and how the engine
and the ground truth resolve them, are the simulator's.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from paradiag.analysis import kinds as finding_kinds
from paradiag.simulator.devices import DEVICES_PER_NODE

KINDS = finding_kinds.faults()

Mesh = dict[str, Any]
# (the mesh, the generator, a culprit rank drawn for it, the profiler step a stall hits) -> an --inject text
Draw = Callable[[Mesh, random.Random, int, int], "str | None"]


def _slow_link(mesh: Mesh, rng: random.Random, rank: int, step: int) -> str | None:
    dp, tp, pp = mesh["dp"], mesh["tp"], mesh["pp"]
    world = dp * tp * pp
    if mesh.get("device") == "cpu":
        # CPU ranks of one host share no link (gloo copies through memory; the analysis weighs links between
        # hosts only): a pipeline pair across two hosts, else any pair across them.
        per_node = mesh.get("devices_per_node", DEVICES_PER_NODE)
        step_ranks = dp * tp if pp > 1 else 1
        across = [a for a in range(world - step_ranks) if a // per_node != (a + step_ranks) // per_node]
        if across:
            a = rng.choice(across)
            return f"slow_link:ranks={a}-{a + step_ranks},factor=4"
    if tp == 2 and rng.random() < 0.5:  # a tensor-parallel pair
        a = 2 * rng.randrange(world // 2)
        return f"slow_link:ranks={a}-{a + 1},factor=4"
    a = rng.randrange(world - dp * tp)  # a pipeline pair: the same (dp, tp) on neighbouring stages
    return f"slow_link:ranks={a}-{a + dp * tp},factor=4"


@dataclass(frozen=True)
class FaultSpec:
    """One fault kind: its parameters ({parameter: (type, default)}; types: ranks (a list), pair, steps, float,
    int, str, layers), an example of its ``--inject`` text for the help, and how the scenario matrices draw one
    (``draw``, given the mesh, the generator, a culprit rank drawn for it and the profiler step a stall hits)."""

    params: dict[str, tuple[str, Any]]
    example: str
    draw: Draw


FAULTS: dict[str, FaultSpec] = {
    "slow_device": FaultSpec(
        {
            "ranks": ("ranks", None),
            "factor": ("float", 1.5),
            "steps": ("steps", None),
            "inputs": ("int", None),
        },
        "slow_device:ranks=5,factor=1.3[,steps=1-2][,inputs=1]",
        # Odd ranks drawn get more data (inputs=1: a bigger local batch) rather than a slower device.
        lambda mesh, rng, rank, step: (
            f"slow_device:ranks={rank},factor={rng.choice([1.3, 1.4, 1.5])}"
            + (",inputs=1" if rank % 2 else "")
        ),
    ),
    "slow_link": FaultSpec(
        {
            "ranks": ("pair", None),
            "nodes": ("pair", None),
            "factor": ("float", 4.0),
            "steps": ("steps", None),
        },
        "slow_link:ranks=8-16|nodes=0-1,factor=4",
        _slow_link,
    ),
    "stage_imbalance": FaultSpec(
        {"layers": ("layers", None), "stage": ("int", None), "extra": ("int", 2)},
        "stage_imbalance:layers=8/6/5/5 | stage=1,extra=2",
        lambda mesh, rng, rank, step: f"stage_imbalance:stage={rng.randrange(mesh['pp'])},extra=2",
    ),
    "host_stall": FaultSpec(
        {"ranks": ("ranks", None), "steps": ("steps", None), "ms": ("float", 40.0)},
        "host_stall:ranks=3,steps=2,ms=40",
        lambda mesh, rng, rank, step: f"host_stall:ranks={rank},steps={step},ms={rng.choice([20, 30, 40])}",
    ),
    "operator_hotspot": FaultSpec(
        {
            "ranks": ("ranks", None),
            "operator": ("str", "flash_attention"),
            "factor": ("float", 3.0),
            "steps": ("steps", None),
        },
        "operator_hotspot:ranks=2,operator=flash_attention,factor=3",
        lambda mesh, rng, rank, step: f"operator_hotspot:ranks={rank},operator=flash_attention,factor=3",
    ),
    "clock_skew": FaultSpec(
        {"nodes": ("ranks", [1]), "ms": ("float", 3.0)},
        "clock_skew:nodes=1,ms=3",
        lambda mesh, rng, rank, step: (
            f"clock_skew:nodes={rng.randrange(1, -(-mesh['dp'] * mesh['tp'] * mesh['pp'] // 8))},ms=3"
        ),
    ),
    "expert_imbalance": FaultSpec(
        {"ep_rank": ("int", 0), "factor": ("float", 2.5), "steps": ("steps", None)},
        "expert_imbalance:ep_rank=0,factor=2.5",
        lambda mesh, rng, rank, step: f"expert_imbalance:ep_rank={rng.randrange(mesh['ep'])},factor=2.5",
    ),
}
assert set(FAULTS) == set(KINDS), "every fault the registry names has its entry here, and no other"
PARAMS: dict[str, dict[str, tuple[str, Any]]] = {kind: spec.params for kind, spec in FAULTS.items()}
ALIASES = {
    "rank": "ranks",
    "node": "nodes",
    "step": "steps",
    "op": "operator",
    "host": "nodes",
    "hosts": "nodes",
}
HELP = "  ".join(spec.example for spec in FAULTS.values()) + ". Lists: 1+3+5 or 4-7 (inclusive range)."


class FaultError(ValueError):
    """An --inject value that cannot be understood."""


@dataclass(frozen=True)
class Fault:
    """One injected fault: its kind and its parameters (rank lists expanded, defaults filled)."""

    kind: str
    params: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, **{k: v for k, v in self.params.items() if v is not None}}


def _int_list(text: str, key: str) -> list[int]:
    out: list[int] = []
    for part in text.split("+"):
        lo, sep, hi = part.partition("-") if not part.startswith("-") else (part, "", "")
        try:
            out.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
        except ValueError:
            raise FaultError(f"{key}={text!r}: expected integers like 5, 1+3+5 or 4-7") from None
    return sorted(set(out))


def _value(kind_of: str, key: str, text: str) -> Any:
    try:
        if kind_of in ("ranks", "steps"):
            return _int_list(text, key)
        if kind_of == "pair":
            a, sep, b = text.partition("-")
            if not sep:
                raise FaultError(f"{key}={text!r}: expected a pair like 8-16")
            return [int(a), int(b)]
        if kind_of == "layers":
            return [int(v) for v in text.replace("+", "/").split("/")]
        if kind_of == "float":
            return float(text)
        if kind_of == "int":
            return int(text)
    except ValueError:
        raise FaultError(f"{key}={text!r} is not a valid {kind_of} value") from None
    return text


def parse(spec: str) -> Fault:
    """``KIND:key=val,key=val`` -> Fault (defaults filled in)."""
    kind, _, rest = spec.strip().partition(":")
    kind = kind.strip()
    if kind not in PARAMS:
        raise FaultError(f"unknown fault kind {kind!r}; known kinds: {', '.join(KINDS)}")
    schema = PARAMS[kind]
    params: dict[str, Any] = {k: default for k, (_, default) in schema.items()}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, text = item.partition("=")
        key = ALIASES.get(key.strip(), key.strip())
        if not eq or key not in schema:
            raise FaultError(f"{kind}: unknown parameter {item!r}; parameters: {', '.join(schema)}")
        params[key] = _value(schema[key][0], key, text.strip())
    return Fault(kind, params)


def in_steps(fault: Fault, step: int) -> bool:
    steps = fault.params.get("steps")
    return steps is None or step in steps


def check(fault: Fault, world: int, nodes: int, steps: range, ep: int, moe: bool) -> None:
    """Refuse a fault that names ranks, nodes or steps the job does not have."""
    p = fault.params
    for key, limit, what in (("ranks", world, "rank"), ("nodes", nodes, "node")):
        values = p.get(key)
        if (
            key == "ranks" and PARAMS[fault.kind].get("ranks") == ("ranks", None) and not values
        ):  # a culprit list, no default
            raise FaultError(f"{fault.kind}: ranks= is required (e.g. {fault.kind}:ranks=3)")
        bad = [v for v in values or [] if not 0 <= v < limit]
        if bad:
            raise FaultError(
                f"{fault.kind}: {what} {bad[0]} is out of range (the job has {limit} {what}s: 0..{limit - 1})"
            )
    bad_steps = [s for s in p.get("steps") or [] if s not in steps]
    if bad_steps:
        raise FaultError(
            f"{fault.kind}: step {bad_steps[0]} is out of range (steps {steps.start}..{steps.stop - 1})"
        )
    if fault.kind == "slow_link" and not (p.get("ranks") or p.get("nodes")):
        raise FaultError("slow_link: give ranks=A-B (a pair of ranks) or nodes=A-B (a pair of nodes)")
    if fault.kind == "slow_link" and len(set(p.get("ranks") or p.get("nodes") or ())) != 2:
        raise FaultError("slow_link: the pair must name two different ranks or nodes")
    if fault.kind == "expert_imbalance" and (not moe or ep < 2 or not 0 <= int(p["ep_rank"]) < ep):
        raise FaultError(
            f"expert_imbalance needs an MoE model with --ep > 1 and ep_rank in 0..{max(ep - 1, 0)}"
        )
    if "factor" in p and float(p["factor"]) <= 0:
        raise FaultError(f"{fault.kind}: factor must be positive")


def random_fault(kind: str, mesh: dict[str, Any], rng: random.Random, step: int = 1) -> str | None:
    """An ``--inject`` text for one fault of ``kind`` with a culprit drawn from ``mesh`` (dp, tp, pp, ep; Megatron rank
    order: tp fastest, then dp, pp); None for ``none``. A host stall hits profiler step ``step`` only. The scenario
    matrices draw their faults with it."""
    rank = rng.randrange(mesh["dp"] * mesh["tp"] * mesh["pp"])
    spec = FAULTS.get(kind)
    return spec.draw(mesh, rng, rank, step) if spec else None
