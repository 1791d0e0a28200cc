"""Benchmark: the scenario matrix at scale, with the confusion table.

    python benchmarks/scenarios.py [--plan 256|1024|torch2|torch2_1024|zero_bubble|all] [--mesh NAME ...] [--kind KIND ...] [--seeds N] [--job DIR ...]

Simulates jobs of 256 ranks (DP8 x TP4 x PP8, 16 micro-batches; send/recv with and without their peer) and, with
``--plan 1024`` or ``all``, 1024 ranks (DP16 x TP8 x PP8), one fault of each kind per seed plus fault-free ones,
``--plan torch2`` (256 ranks) and ``torch2_1024`` simulate the same faults in jobs shaped as real PyTorch 2.x jobs
record them (``--shape torch2``: a CPU job over gloo with two profiler windows and an older fault-free rerun in the
folder, a GPU job with FSDP2 over ``mesh_dp_shard`` and the run manifest; issue 22); ``zero_bubble`` the same
faults in zero-bubble pipelines (a V-shaped GPU job, a looped CPU job: ``--schedule zbv`` / ``zb``). The harness
diagnoses each and scores it against its ground truth exactly as tests/test_analysis_scenarios.py does (inherent
conditions such as an LM-head-heavy last stage are expected, not false). ``--job`` scores existing simulated
folders (with their ground_truth.json) instead. Prints one line per job, the confusion table (injected kind x top
finding), the rates (goals: >= 99 % of faulty jobs' top finding names kind and culprit, >= 99 % of jobs without a
kind absent from the ground truth, fault-free jobs clean) and the seconds spent.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import scratch

import paradiag
from paradiag.simulator import SimConfig, groundtruth, parse_fault, simulate
from paradiag.simulator.faults import random_fault

MODEL = {
    "layers": 16,
    "hidden": 2048,
    "heads": 16,
    "seq_len": 2048,
    "steps": 2,
    "jitter": 0.03,
    "microbatches": 16,
}
MESHES: dict[str, dict[str, Any]] = {
    "gpu256": {"dp": 8, "tp": 4, "pp": 8},
    "gpu256_nopeer": {"dp": 8, "tp": 4, "pp": 8, "p2p_peer": False, "vocab": 8192},
    "gpu1024": {"dp": 16, "tp": 8, "pp": 8, "vocab": 8192},
    # torch2: what a real PyTorch 2.x job writes (a CPU job: a smaller model keeps its steps near a real CPU job's)
    "cpu256_torch2": {
        "dp": 8,
        "tp": 4,
        "pp": 8,
        "device": "cpu",
        "shape": "torch2",
        "hidden": 512,
        "seq_len": 512,
        "vocab": 8192,
        "windows": 2,
        "rerun": True,
    },
    "gpu256_torch2": {
        "dp": 8,
        "tp": 4,
        "pp": 8,
        "shape": "torch2",
        "dp_mode": "fsdp",
        "dp_dim": "dp_shard",
        "trace_names": "window",
        "manifest": True,
        "vocab": 8192,
    },
    # the same GPU job as older PyTorch records NCCL work (no record_param_comms args); only with --mesh
    "gpu256_torch2_noargs": {
        "dp": 8,
        "tp": 4,
        "pp": 8,
        "shape": "torch2",
        "dp_mode": "fsdp",
        "dp_dim": "dp_shard",
        "trace_names": "window",
        "vocab": 8192,
        "collective_args": False,
    },
    "cpu1024_torch2": {
        "dp": 16,
        "tp": 8,
        "pp": 8,
        "device": "cpu",
        "shape": "torch2",
        "hidden": 512,
        "seq_len": 512,
        "vocab": 8192,
        "windows": 2,
        "trace_names": "rank",
    },
    "gpu1024_torch2": {
        "dp": 16,
        "tp": 8,
        "pp": 8,
        "shape": "torch2",
        "dp_dim": "dp_replicate",
        "vocab": 8192,
        "windows": 2,
    },
    # zero-bubble pipelines (issue 22: schedules made otherwise): a V-shaped one on GPUs, a looped one on CPUs
    "gpu256_zbv": {
        "dp": 8,
        "tp": 4,
        "pp": 8,
        "schedule": "zbv",
        "virtual_stages": 2,
        "layers": 32,
        "shape": "torch2",
        "vocab": 8192,
    },
    "cpu256_zb": {
        "dp": 8,
        "tp": 4,
        "pp": 8,
        "schedule": "zb",
        "device": "cpu",
        "shape": "torch2",
        "hidden": 512,
        "seq_len": 512,
        "vocab": 8192,
    },
}
KINDS = ("slow_device", "host_stall", "operator_hotspot", "stage_imbalance", "slow_link", "none")
PLANS = {
    "256": ("gpu256", "gpu256_nopeer"),
    "1024": ("gpu1024",),
    "torch2": ("cpu256_torch2", "gpu256_torch2"),
    "torch2_1024": ("cpu1024_torch2", "gpu1024_torch2"),
    "zero_bubble": ("gpu256_zbv", "cpu256_zb"),
    "all": (
        "gpu256",
        "gpu256_nopeer",
        "gpu1024",
        "cpu256_torch2",
        "gpu256_torch2",
        "cpu1024_torch2",
        "gpu1024_torch2",
        "gpu256_zbv",
        "cpu256_zb",
    ),
}


def run_one(
    label: str, folder: Path, cache: Path
) -> tuple[str, groundtruth.Score, dict[str, Any], list[dict[str, Any]]]:
    truth = groundtruth.read(folder)
    found = [f.as_json() for f in paradiag.open(folder, cache_dir=cache).diagnosis().findings]
    result = groundtruth.score(found, truth)
    injected = truth["faults"][0]["kind"] if truth["faults"] else "none"
    mark = "ok " if result.right and not result.false_kinds else "BAD"
    print(
        f"{mark} {label}: injected {truth['faults'] or 'nothing'}; findings {[(f['kind'], f['culprit'], f['impact_pct']) for f in found]}",
        flush=True,
    )
    return injected, result, truth, found


HARMLESS_PCT = 1.0  # a fault that cost less than this share of the profiled steps left nothing to find


def profiled_ms(truth: dict[str, Any]) -> float:
    """The simulated job's profiled steps, end to end (ms): per step the median rank's step time, summed (the
    simulator's own figures, from its ground truth)."""
    per_rank = list(truth.get("step_time_us", {}).values())
    if not per_rank:
        return math.nan
    return sum(statistics.median(times[i] for times in per_rank) for i in range(len(per_rank[0]))) / 1000


def same_job(truth: dict[str, Any]) -> str:
    """What a job and its twin without the fault share: the simulator's settings and seed."""
    return repr([truth.get(k) for k in ("seed", "device", "model", "layout", "schedule", "shape", "jitter")])


def weigh_by_cost(rows: list[tuple[str, groundtruth.Score, dict[str, Any], list[dict[str, Any]]]]) -> None:
    """What each fault cost: its job's profiled steps against the fault-free job of the same mesh and seed (the
    same simulation without the fault: its twin, exactly), and the hit rate on the faults that cost at least
    HARMLESS_PCT. A fault may cost nothing: a stall at the start of a step on a stage that waits for the pipeline
    to fill anyway, a slow link that carries little. Then no finding is as right as any."""
    twins = {same_job(r[2]): profiled_ms(r[2]) for r in rows if r[0] == "none"}
    costed = []
    for injected, score, truth, _ in rows:
        twin = twins.get(same_job(truth))
        if injected == "none" or twin is None or not twin > 0:
            continue
        cost = 100 * (profiled_ms(truth) / twin - 1)
        costed.append((cost, score.right))
        print(
            f"  cost {cost:+6.2f} % of the profiled steps: {truth['faults'][0]}; {'right' if score.right else 'MISS'}"
        )
    if costed:
        real = [right for cost, right in costed if cost >= HARMLESS_PCT]
        print(
            f"top finding right on faults that cost >= {HARMLESS_PCT:g} % of the profiled steps: {sum(real)}/{len(real)}; "
            f"faults that cost less (nothing to find): {len(costed) - len(real)}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", choices=sorted(PLANS), default="256")
    parser.add_argument(
        "--mesh",
        choices=sorted(MESHES),
        action="append",
        help="only these meshes (repeatable) instead of the plan's",
    )
    parser.add_argument(
        "--kind", choices=KINDS, action="append", help="only these fault kinds (repeatable; none: fault-free)"
    )
    parser.add_argument("--seeds", type=int, default=1, help="seeds per mesh and kind")
    parser.add_argument(
        "--job", type=Path, nargs="*", default=[], help="score these simulated job folders instead"
    )
    args = parser.parse_args()
    work = scratch("paradiag-scenarios-")
    started = time.perf_counter()
    rows = []
    if args.job:
        for folder in args.job:
            rows.append(run_one(folder.name, folder, work / f"{folder.name}.cache"))
    for mesh in (args.mesh or PLANS[args.plan]) if not args.job else ():
        for seed in range(1, args.seeds + 1):
            for kind in args.kind or KINDS:
                settings = {**MODEL, **MESHES[mesh]}
                last_step = SimConfig(**settings).profiled_steps[-1][
                    -1
                ]  # a one-step stall lands in the latest window
                text = random_fault(kind, settings, random.Random(f"{mesh}-{kind}-{seed}"), step=last_step)
                name = f"{mesh}-{kind}-{seed}"
                faults = (parse_fault(text),) if text else ()
                simulate(SimConfig(output=work / name, seed=seed, faults=faults, **settings))
                rows.append(run_one(name, work / name, work / f"{name}.cache"))
    faulty = [r for r in rows if r[0] != "none"]
    clean = [r for r in rows if r[0] == "none"]
    print(groundtruth.confusion_table([(r[0], r[1].top) for r in rows]))
    print(
        f"top finding names kind and culprit: {sum(r[1].right for r in faulty)}/{len(faulty)}; fault-free clean: "
        f"{sum(r[1].right for r in clean)}/{len(clean)}; no false kind: {sum(not r[1].false_kinds for r in rows)}/{len(rows)}; "
        f"{time.perf_counter() - started:.0f} s"
    )
    weigh_by_cost(rows)
    sys.exit(0 if all(r[1].right and not r[1].false_kinds for r in rows) else 1)


if __name__ == "__main__":
    main()
