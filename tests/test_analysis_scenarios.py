"""The scenario matrix: simulated jobs with one injected fault each (every kind, GPU and NPU formats, 1F1B, GPipe
and interleaved schedules, 16 to 64 ranks, 3 % jitter, several seeds) and fault-free ones. The top finding must
name the injected kind and culprit in >= 95 % of faulty jobs; fault-free jobs must yield no finding in >= 95 %.

Jobs are small (8 layers, 2 steps) and generated once per session; the whole matrix takes about two minutes on
two cores.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import paradiag
from paradiag.simulator import SimConfig, parse_fault, simulate

pytestmark = pytest.mark.slow

MODEL = {"layers": 8, "hidden": 2048, "heads": 16, "seq_len": 2048, "steps": 2, "vocab": 8192, "jitter": 0.03}
MESHES: dict[str, dict[str, Any]] = {
    "gpu16_1f1b": {"dp": 2, "tp": 2, "pp": 4, "microbatches": 4, "schedule": "1f1b"},
    "npu16_gpipe": {"dp": 2, "tp": 2, "pp": 4, "microbatches": 4, "schedule": "gpipe", "format": "ascend", "device": "910b"},
    "gpu32_interleaved": {"dp": 4, "tp": 2, "pp": 4, "microbatches": 4, "schedule": "interleaved", "virtual_stages": 2, "layers": 16},
    "gpu64_1f1b": {"dp": 4, "tp": 4, "pp": 4, "microbatches": 4, "schedule": "1f1b"},
    "gpu16_moe": {"dp": 4, "ep": 4, "tp": 2, "pp": 2, "microbatches": 4, "layers": 4},
    "npu16_moe": {"dp": 4, "ep": 4, "tp": 2, "pp": 2, "microbatches": 4, "layers": 4, "format": "ascend", "device": "910b"},
}
DENSE_KINDS = ("slow_device", "host_stall", "operator_hotspot", "stage_imbalance", "slow_link", "clock_skew")
PLAN: list[tuple[str, tuple[str, ...], list[int]]] = [  # mesh, fault kinds, seeds (each kind and seed: one job)
    ("gpu16_1f1b", (*DENSE_KINDS, "none"), [1, 2]),
    ("npu16_gpipe", (*DENSE_KINDS, "none"), [3, 4]),
    ("gpu32_interleaved", (*DENSE_KINDS, "none"), [5]),
    ("gpu64_1f1b", (*DENSE_KINDS, "none"), [6]),
    ("gpu16_moe", ("expert_imbalance", "none"), [7, 8]),
    ("npu16_moe", ("expert_imbalance",), [9]),
]


@dataclass
class Scenario:
    mesh: str
    kind: str
    seed: int
    fault: str | None = None
    truth: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.mesh}-{self.kind}-{self.seed}"


def fault_text(kind: str, mesh: dict[str, Any], rng: random.Random) -> str | None:
    """One fault of ``kind`` with a culprit drawn from the mesh (Megatron rank order: tp fastest, then dp, pp)."""
    dp, tp, pp = mesh["dp"], mesh["tp"], mesh["pp"]
    world = dp * tp * pp
    rank = rng.randrange(world)
    if kind == "slow_device":
        return f"slow_device:ranks={rank},factor={rng.choice([1.3, 1.4, 1.5])}"
    if kind == "host_stall":
        return f"host_stall:ranks={rank},steps=1,ms={rng.choice([20, 30, 40])}"
    if kind == "operator_hotspot":
        return f"operator_hotspot:ranks={rank},operator=flash_attention,factor=3"
    if kind == "stage_imbalance":
        return f"stage_imbalance:stage={rng.randrange(pp)},extra=2"
    if kind == "slow_link":
        if tp == 2 and rng.random() < 0.5:  # a tensor-parallel pair
            a = 2 * rng.randrange(world // 2)
            return f"slow_link:ranks={a}-{a + 1},factor=4"
        a = rng.randrange(world - dp * tp)  # a pipeline pair: the same (dp, tp) on neighbouring stages
        return f"slow_link:ranks={a}-{a + dp * tp},factor=4"
    if kind == "clock_skew":
        return f"clock_skew:nodes={rng.randrange(1, -(-world // 8))},ms=3"
    if kind == "expert_imbalance":
        return f"expert_imbalance:ep_rank={rng.randrange(mesh['ep'])},factor=2.5"
    return None


def scenarios() -> list[Scenario]:
    out = []
    for mesh, kinds, seeds in PLAN:
        for seed in seeds:
            for kind in kinds:
                rng = random.Random(f"{mesh}-{kind}-{seed}")
                out.append(Scenario(mesh, kind, seed, fault_text(kind, MESHES[mesh], rng)))
    return out


def culprit_matches(finding: dict[str, Any], truth: dict[str, Any]) -> bool:
    culprit = finding["culprit"]
    if truth["kind"] == "stage_imbalance":
        return culprit.get("stage") == truth["stage"]
    if truth["kind"] == "slow_link":
        return sorted(culprit.get("link", {}).get("ranks", [])) == sorted(truth["link"]["ranks"])
    return sorted(culprit.get("ranks", [])) == sorted(truth["ranks"])


@pytest.fixture(scope="session")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Scenario, list[dict[str, Any]]]]:
    root = tmp_path_factory.mktemp("scenarios")
    results = []
    for sc in scenarios():
        settings = {**MODEL, **MESHES[sc.mesh]}
        out = root / sc.name
        faults = (parse_fault(sc.fault),) if sc.fault else ()
        simulate(SimConfig(output=out, seed=sc.seed, faults=faults, **settings))
        job = paradiag.open(out, cache_dir=root / f"{sc.name}.cache")
        truth = __import__("json").loads(Path(out / "ground_truth.json").read_text())["faults"]
        sc.truth = truth[0] if truth else {}
        results.append((sc, [f.as_json() for f in job.diagnosis().findings]))
    return results


def confusion_table(outcomes: list[tuple[Scenario, list[dict[str, Any]]]]) -> str:
    counts: Counter[tuple[str, str]] = Counter()
    for sc, found in outcomes:
        counts[(sc.kind, found[0]["kind"] if found else "none")] += 1
    columns = sorted({c for _, c in counts})
    rows = sorted({r for r, _ in counts})
    width = max(len(c) for c in [*columns, *rows, "injected \\ top"]) + 1
    lines = ["injected \\ top".ljust(width) + "".join(c.rjust(width) for c in columns)]
    for r in rows:
        lines.append(r.ljust(width) + "".join(str(counts[(r, c)] or ".").rjust(width) for c in columns))
    return "\n".join(lines)


def test_scenario_matrix(outcomes: list[tuple[Scenario, list[dict[str, Any]]]]) -> None:
    faulty = [(sc, f) for sc, f in outcomes if sc.fault]
    clean = [(sc, f) for sc, f in outcomes if not sc.fault]
    right = [sc for sc, f in faulty if f and f[0]["kind"] == sc.kind and culprit_matches(f[0], sc.truth)]
    quiet = [sc for sc, f in clean if not f]
    misses = [
        f"  {sc.name}: injected {sc.fault}; top {(f[0]['kind'], f[0]['culprit']) if f else None}"
        for sc, f in faulty
        if sc not in right
    ] + [f"  {sc.name}: fault-free; found {[(x['kind'], x['culprit']) for x in f]}" for sc, f in clean if f]
    print(f"\n{confusion_table(outcomes)}")
    print(f"top finding names kind and culprit: {len(right)}/{len(faulty)}; fault-free quiet: {len(quiet)}/{len(clean)}")
    print("\n".join(misses))
    assert len({sc.mesh for sc, _ in outcomes}) >= 6 and len(faulty) >= 36
    assert len(right) >= 0.95 * len(faulty), "\n".join(misses)
    assert len(quiet) >= 0.95 * len(clean), "\n".join(misses)
