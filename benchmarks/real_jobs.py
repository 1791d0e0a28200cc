"""The real-job matrix: real torch.distributed jobs (PyTorch CPU, gloo) with faults injected by the training code,
each run, analysed by paradiag and judged against the fault it holds.

    .venv/bin/python benchmarks/real_jobs.py                       # the whole matrix (about an hour on 2 busy cores)
    .venv/bin/python benchmarks/real_jobs.py --only ddp_slow_rank_s0,pipe_1f1b   # names, or substrings of names
    .venv/bin/python benchmarks/real_jobs.py --keep DIR            # keep the traces (and reuse those already there)
    .venv/bin/python benchmarks/real_jobs.py --keep DIR --twins    # and each faulty job's twin without its fault
    .venv/bin/python benchmarks/real_jobs.py --jobs 2 --list       # 2 jobs at once; --list: print the matrix only
    .venv/bin/python benchmarks/real_jobs.py --make-only --keep /work/realtraces --only core   # just make traces

Every fault kind (slow_rank, host_stall, heavy_stage, slow_collective, slow_link, hotspot) runs on several APIs
(DDP, FSDP1, FSDP2, pipelining GPipe/1F1B/interleaved/looped BFS/zero-bubble (interleaved and V)/DualPipeV,
hand-written isend/irecv, DeviceMesh dp x pp and dp x tp), each with 2 seeds, plus clean jobs; a seed draws the
culprit rank, the strength, the model size, the micro-batches, the world size (2, 4 or 8) and the profiler set-up
(tensorboard_trace_handler with worker_name=rank{R} or its default name, repeat=2, paradiag.torch). The job program
and the expected diagnosis: tests/realjobs. --variant makes every job as users vary them (record_shapes off,
with_stack on, transformer blocks, a large-model recipe: checkpointing, bf16 autocast, AdamW, clipping,
accumulation).

Printed per job: expected vs the top finding, the layout read; then the hit rates: top finding right on faulty
jobs, no finding on clean jobs, layout (dp/tp/pp) read on the DeviceMesh jobs. Needs the torch venv
(PARADIAG_TORCH_PYTHON, default ~/.cache/paradiag-peers/torch/bin/python; `make peers`).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.realjobs import (  # noqa: E402
    DATA_PARALLEL,
    MESH_APIS,
    JobFailed,
    JobSpec,
    analyze,
    failure_cause,
    judge,
    layout_read,
    make_job,
    unavailable,
)

# (api, fault) pairs of the matrix; each runs with 2 seeds.
CASES: list[tuple[str, str]] = [
    ("ddp", "none"),
    ("ddp", "slow_rank"),
    ("ddp", "host_stall"),
    ("ddp", "slow_collective"),
    ("ddp", "hotspot"),
    # FSDP1 (FullyShardedDataParallel, a flat parameter per wrapped module)
    ("fsdp1", "none"),
    ("fsdp1", "slow_rank"),
    ("fsdp1", "host_stall"),
    ("fsdp2", "none"),
    ("fsdp2", "slow_rank"),
    ("fsdp2", "host_stall"),
    ("fsdp2", "hotspot"),
    ("pipe_gpipe", "none"),
    ("pipe_gpipe", "heavy_stage"),
    ("pipe_gpipe", "slow_rank"),
    ("pipe_1f1b", "none"),
    ("pipe_1f1b", "heavy_stage"),
    ("pipe_1f1b", "host_stall"),
    ("pipe_1f1b", "slow_link"),
    ("pipe_1f1b", "hotspot"),
    ("pipe_interleaved", "none"),
    ("pipe_interleaved", "heavy_stage"),
    # zero-bubble schedules: each backward split into its input and weight gradients, the weight ones deferred
    ("pipe_zb", "none"),
    ("pipe_zb", "heavy_stage"),
    ("pipe_zb", "slow_rank"),
    ("pipe_zbv", "none"),
    ("pipe_zbv", "heavy_stage"),
    ("pipe_zbv", "host_stall"),
    # looped BFS (every forward of a stage, then its backwards) and DualPipeV (a forward and a backward as one action)
    ("pipe_bfs", "none"),
    ("pipe_bfs", "heavy_stage"),
    ("pipe_bfs", "host_stall"),
    ("pipe_dualpipev", "none"),
    ("pipe_dualpipev", "heavy_stage"),
    ("pipe_dualpipev", "slow_rank"),
    ("isend", "none"),
    ("isend", "heavy_stage"),
    ("isend", "slow_link"),
    ("isend", "slow_rank"),
    ("mesh_dp_pp", "none"),
    ("mesh_dp_pp", "slow_rank"),
    ("mesh_dp_pp", "heavy_stage"),
    ("mesh_dp_pp", "host_stall"),
    ("mesh_dp_tp", "none"),
    ("mesh_dp_tp", "slow_rank"),
    ("mesh_dp_tp", "hotspot"),
]
PROFILERS = [("named", 1), ("default", 1), ("named", 2), ("paradiag", 1), ("paradiag", 2)]

# The first real traces other work waits for (written to /work/realtraces by --make-only --keep ... --only core).
CORE: list[JobSpec] = [
    JobSpec(
        "ddp_slow_rank", "ddp", "slow_rank", rank=2, slow_mode="extra", strength=0.6, hidden=512, batch=64
    ),
    JobSpec(
        "ddp_host_stall", "ddp", "host_stall", rank=1, strength=60, hidden=512, batch=64, profiler="default"
    ),
    JobSpec(
        "fsdp2_slow_rank",
        "fsdp2",
        "slow_rank",
        rank=3,
        slow_mode="extra",
        strength=0.6,
        hidden=512,
        batch=64,
        profiler="paradiag",
    ),
    JobSpec(
        "pipe_1f1b_heavy_stage",
        "pipe_1f1b",
        "heavy_stage",
        rank=2,
        strength=1.0,
        hidden=384,
        batch=64,
        micro_batches=4,
    ),
    JobSpec(
        "isend_heavy_stage", "isend", "heavy_stage", rank=1, strength=1.0, hidden=384, batch=64, repeat=2
    ),
    JobSpec(
        "mesh_dp_pp_slow_rank",
        "mesh_dp_pp",
        "slow_rank",
        rank=3,
        slow_mode="extra",
        strength=0.6,
        hidden=384,
        batch=64,
        profiler="paradiag",
    ),
    JobSpec("ddp_clean", "ddp", hidden=512, batch=64),
    JobSpec("pipe_1f1b_clean", "pipe_1f1b", hidden=384, batch=64, profiler="paradiag"),
    # then the rest of the fault kinds and APIs
    JobSpec("ddp_slow_collective", "ddp", "slow_collective", rank=0, strength=15, hidden=512, batch=64),
    JobSpec("ddp_hotspot", "ddp", "hotspot", rank=3, strength=24, hidden=512, batch=64, profiler="paradiag"),
    JobSpec("isend_slow_link", "isend", "slow_link", rank=1, strength=8, hidden=384, batch=64),
    JobSpec(
        "pipe_gpipe_heavy_stage",
        "pipe_gpipe",
        "heavy_stage",
        rank=1,
        strength=0.5,
        blocks=4,
        hidden=256,
        batch=64,
        profiler="default",
    ),
    JobSpec(
        "pipe_interleaved_heavy_stage",
        "pipe_interleaved",
        "heavy_stage",
        rank=3,
        strength=1.0,
        hidden=384,
        batch=64,
        profiler="paradiag",
    ),
    JobSpec(
        "mesh_dp_pp_heavy_stage",
        "mesh_dp_pp",
        "heavy_stage",
        rank=1,
        strength=1.0,
        hidden=384,
        batch=64,
        profiler="paradiag",
        dp_wrap="fsdp",
    ),
    JobSpec(
        "mesh_dp_tp_slow_rank",
        "mesh_dp_tp",
        "slow_rank",
        rank=2,
        slow_mode="extra",
        strength=0.6,
        hidden=512,
        batch=64,
        profiler="paradiag",
    ),
    JobSpec("mesh_dp_tp_clean", "mesh_dp_tp", hidden=512, batch=64, profiler="paradiag"),
    JobSpec(
        "fsdp2_host_stall",
        "fsdp2",
        "host_stall",
        rank=2,
        strength=80,
        hidden=512,
        batch=64,
        repeat=2,
        profiler="paradiag",
    ),
    JobSpec(
        "ddp8_slow_rank",
        "ddp",
        "slow_rank",
        rank=5,
        strength=0.8,
        world=8,
        hidden=384,
        batch=32,
        slow_mode="batch",
    ),
    JobSpec(
        "pipe_1f1b_w2_heavy_stage",
        "pipe_1f1b",
        "heavy_stage",
        rank=0,
        strength=1.0,
        world=2,
        hidden=384,
        batch=64,
        micro_batches=8,
    ),
    JobSpec("pipe_1f1b_slow_link", "pipe_1f1b", "slow_link", rank=1, strength=8, hidden=384, batch=64),
    JobSpec("ddp_slowdown", "ddp", "slow_rank", rank=1, strength=0.5, hidden=512, batch=64),
    JobSpec(
        "mesh_dp_pp_slowdown",
        "mesh_dp_pp",
        "slow_rank",
        rank=2,
        strength=0.6,
        hidden=384,
        batch=64,
        profiler="paradiag",
    ),
    JobSpec(
        "fsdp2_slowdown", "fsdp2", "slow_rank", rank=0, strength=0.5, hidden=512, batch=64, profiler="default"
    ),
]


ANY_WORLD = (
    "ddp",
    "fsdp1",
    "fsdp2",
    "isend",
    "pipe_1f1b",
    "pipe_zb",
    "pipe_zbv",
    "pipe_bfs",
    "pipe_dualpipev",
)  # 2, 4 or 8 ranks; the others 4 (or 4, 8)
ONE_F_ONE_B = (
    "pipe_1f1b",
    "mesh_dp_pp",
    "pipe_zb",
    "pipe_zbv",
)  # 1F1B-like: a micro-batch per stage at least


def matrix_spec(api: str, fault: str, seed: int) -> JobSpec:
    """One job of the matrix: what the seed draws, within what the API and fault allow."""
    rng = random.Random(f"{api}/{fault}/{seed}")
    world = rng.choice([2, 4, 4, 4, 8]) if api in ANY_WORLD else 4
    if api.startswith("mesh_"):
        world = rng.choice([4, 4, 8])
    if fault in ("heavy_stage", "slow_link") and world == 2 and api == "isend":
        world = 4
    dp = 2 if world == 4 else rng.choice([2, 4]) if world == 8 else 1
    hidden = rng.choice([256, 384, 512]) if world <= 4 else 256
    micro = world if api == "pipe_interleaved" else rng.choice([4, 8])
    if api in ONE_F_ONE_B:
        micro = max(micro, world // dp if api.startswith("mesh_") else world)
    if api == "pipe_dualpipev":  # a micro-batch per stage at least, two stages per rank
        micro = max(micro, 2 * world)
    batch = micro * rng.choice([8, 16]) if api in (*DATA_PARALLEL, "mesh_dp_tp") else micro * 8
    if api in (*DATA_PARALLEL, "mesh_dp_tp"):
        batch = rng.choice([32, 64])
    rank = rng.randrange(world)
    if (
        fault == "slow_link"
    ):  # the late sender must have a next stage (pipelining's hook delays forward sends)
        rank = rng.randrange(world - 1)
    strength = {
        "none": 0.0,
        "slow_rank": rng.choice([0.4, 0.6, 0.8]),
        "host_stall": rng.choice([40, 60, 90]),
        "heavy_stage": rng.choice([0.5, 1.0]),
        "slow_collective": rng.choice([5, 10]),
        "slow_link": rng.choice([5, 10]),
        "hotspot": rng.choice([16, 24]),
    }[fault]
    blocks = 2 if fault != "heavy_stage" or strength >= 1.0 else 2 * rng.choice([1, 2])
    profiler, repeat = PROFILERS[(seed + len(api) + len(fault)) % len(PROFILERS)]
    slow_mode = "slowdown" if seed % 2 == 0 else "batch" if api in DATA_PARALLEL else "extra"
    dp_wrap = "fsdp" if api == "mesh_dp_pp" and seed % 2 else "ddp"
    return JobSpec(
        f"{api}_{fault}_s{seed}",
        api,
        fault,
        rank=rank,
        strength=strength,
        world=world,
        hidden=hidden,
        blocks=blocks,
        batch=batch,
        micro_batches=micro,
        dp=dp,
        dp_wrap=dp_wrap,
        slow_mode=slow_mode,
        seed=seed,
        profiler=profiler,
        repeat=repeat,
        stall_step=rng.randrange(3),
    )


def matrix(seeds: tuple[int, ...] = (0, 1)) -> list[JobSpec]:
    return [matrix_spec(api, fault, seed) for api, fault in CASES for seed in seeds]


# Jobs made as users make them otherwise than the matrix (record_shapes on, with_stack off, MLP blocks): --variant
VARIANTS: dict[str, dict[str, Any]] = {
    "noshapes": {"shapes": False},
    "stack": {"stack": True},
    "plain": {"shapes": False, "stack": True},
    "attention": {"model": "attention"},  # transformer blocks (the dp x tp jobs keep the MLP)
    "usual": {"recipe": "usual"},  # checkpointing, bf16 autocast, AdamW, clipping, accumulation (job.py)
    "llm": {"recipe": "usual", "model": "attention"},  # that recipe on transformer blocks
}


def variant(spec: JobSpec, name: str) -> JobSpec:
    """``spec`` made with the options of VARIANTS[name], named after them."""
    return dataclasses.replace(spec, name=f"{spec.name}_{name}", **VARIANTS[name])


def select(specs: list[JobSpec], only: str | None) -> list[JobSpec]:
    if not only:
        return specs
    words = [w.strip() for w in only.split(",") if w.strip()]
    if "core" in words:
        return [s for s in CORE if len(words) == 1 or any(w in s.name for w in words if w != "core")] or CORE
    return [s for s in specs if any(w == s.name or w in s.name for w in words)]


README_HEAD = """# Real torch.distributed traces (PyTorch {torch}, CPU, gloo, loopback, one thread per rank)

Made by paradiag's tests/realjobs (job program tests/realjobs/job.py, specs in benchmarks/real_jobs.py) with
`benchmarks/real_jobs.py --make-only --keep DIR --only ...`. Each job is a folder `<job>/` holding only what the
job's profiler wrote (the analysis must not read the answer); the spec and the expected diagnosis are in the
sidecar `<job>.job.json` beside the folder (`expected`: `kinds` the top finding may have, `ranks` it must name,
`stage` for stage_imbalance; `truth`: the fault in words). Clean jobs: no finding is right.

Profilers: `named` = tensorboard_trace_handler(DIR, worker_name="rank{{R}}") -> `rank{{R}}.<time_ns>.pt.trace.json`;
`default` = tensorboard_trace_handler(DIR) -> `<host>_<pid>.<time_ns>.pt.trace.json` (the rank only inside, in
distributedInfo); `repeat 2` = two profiler cycles, two files per rank (the fault, when it is one step, is in the
last window); `paradiag` = paradiag.torch.profile -> `rank{{R}}.window{{W}}.pt.trace.json` + `paradiag_run.json`.
Schedule: wait 1, warmup 1, active 3 (per cycle); host_stall's "active step N" counts from 0 in the last window.
Layouts: ddp/fsdp2 are dp over every rank (fsdp2 through a 1-D DeviceMesh "dp"); pipe_*/isend one stage per rank
(stage = rank; interleaved and zb: ranks hold stages r and r + W; zbv: r and 2W - 1 - r); DeviceMesh jobs are init_device_mesh("cpu", (dp, X),
("dp", "pp"|"tp")), ranks row-major: with dp2 x pp2, mesh [[0, 1], [2, 3]], pp stage s = ranks {{s, s + 2}}, dp
groups [0, 2] and [1, 3]. Gradients of mesh_dp_pp stages: DDP over the dp group (or fully_shard when dp_wrap is
fsdp); mesh_dp_tp: one flat all_reduce over dp after backward. Other folders here without a sidecar (quick_ddp)
were made by hand and are described where they were made.

| job | api (layout) | fault | culprit | strength | right diagnosis | profiler | files |
|---|---|---|---|---|---|---|---|
"""


def write_readme(keep: Path) -> Path:
    """keep/README.md: one line per job folder that has a sidecar (the table other work reads)."""
    import json

    rows = []
    torch_version = "2.13.0"
    for sidecar in sorted(keep.glob("*.job.json")):
        rec = json.loads(sidecar.read_text())
        spec = JobSpec(**rec["spec"])
        exp = rec["expected"]
        if spec.fault == "none":
            culprit, right = "-", "no finding"
        elif "stage" in exp and spec.fault == "heavy_stage":
            culprit, right = (
                f"stage {exp['stage']} (ranks {exp['ranks']})",
                f"stage_imbalance on stage {exp['stage']}",
            )
        else:
            culprit, right = f"rank {spec.rank}", f"{' or '.join(exp['kinds'])} naming rank {spec.rank}"
        unit = {"slow_rank": "x flops extra", "heavy_stage": "x blocks extra", "hotspot": "x GELU work"}.get(
            spec.fault, " ms"
        )
        strength = "-" if spec.fault == "none" else f"{spec.strength:g}{unit}"
        prof = f"{spec.profiler}" + (f" repeat {spec.repeat}" if spec.repeat > 1 else "")
        rows.append(
            f"| {spec.name} | {spec.describe().split(', fault')[0]} | {spec.fault} | {culprit} | {strength} | "
            f"{right}: {exp['truth']} | {prof} | {len(rec.get('files', []))} |"
        )
    path = keep / "README.md"
    path.write_text(README_HEAD.format(torch=torch_version) + "\n".join(rows) + "\n")
    return path


def run_one(spec: JobSpec, keep: Path, make_only: bool, cache: Path) -> dict[str, object]:
    start = time.monotonic()
    try:
        folder = make_job(spec, keep)
    except JobFailed as exc:
        return {"spec": spec, "error": str(exc), "job_s": time.monotonic() - start}
    job_s = time.monotonic() - start
    if make_only:
        return {"spec": spec, "folder": folder, "job_s": job_s}
    start = time.monotonic()
    try:
        report = analyze(folder, cache_dir=cache / spec.name)
    except Exception as exc:  # a failure of the analysis is a result of the benchmark: print it, go on
        return {"spec": spec, "error": f"analysis failed: {exc}", "job_s": job_s}
    ok, why = judge(spec, report)
    lay_ok, lay = layout_read(spec, report)
    comm = report.get("metrics", {}).get("communication", {})
    return {
        "spec": spec,
        "folder": folder,
        "ok": ok,
        "why": why,
        "layout_ok": lay_ok,
        "layout": lay,
        "collectives": comm.get("collective_instances"),
        "p2p": comm.get("p2p_transfers"),
        "problems": len(report.get("job", {}).get("problems", [])),
        "step_ns": (report.get("metrics", {}).get("step_time_ns") or {}).get("median"),
        "job_s": job_s,
        "analyze_s": time.monotonic() - start,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only", help="comma-separated job names or substrings ('core': the first real traces)"
    )
    parser.add_argument(
        "--keep", type=Path, help="write (and reuse) the jobs' folders here; default: a temporary folder"
    )
    parser.add_argument("--jobs", type=int, default=1, help="jobs run at once (each is world-size processes)")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--list", action="store_true", help="print the matrix and exit")
    parser.add_argument("--make-only", action="store_true", help="make the traces, analyse nothing")
    parser.add_argument(
        "--twins",
        action="store_true",
        help="run each faulty job's twin too (its spec without the fault) and weigh each fault by what it cost",
    )
    parser.add_argument(
        "--variant",
        choices=sorted(VARIANTS),
        help="the jobs made as users vary them: noshapes (record_shapes off, torch.profiler's default), stack "
        "(with_stack on), plain (both), attention (transformer blocks); the jobs' names end with it",
    )
    args = parser.parse_args()
    specs = select(matrix(tuple(int(s) for s in args.seeds.split(","))), args.only)
    if args.variant:
        specs = [variant(s, args.variant) for s in specs]
    if args.twins:
        specs += [twin(s) for s in specs if s.fault != "none"]
    if args.list:
        for s in specs:
            print(
                f"{s.name:32s} {s.describe()}: rank {s.rank}, strength {s.strength:g}, hidden {s.hidden}, "
                f"mb {s.micro_batches}, profiler {s.profiler} x{s.repeat}; expects {s.expected()['kinds'] or 'none'}"
            )
        print(f"{len(specs)} jobs")
        return 0
    reason = unavailable()
    if reason:
        print(f"real jobs cannot run here: {reason}")
        return 2
    keep = args.keep or Path(tempfile.mkdtemp(prefix="paradiag-real-jobs-"))
    keep.mkdir(parents=True, exist_ok=True)
    print(f"{len(specs)} jobs, folders in {keep}", flush=True)
    results = []
    cache = Path(
        tempfile.mkdtemp(prefix="paradiag-real-jobs-cache-")
    )  # paradiag's caches, never in the folders
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        for res in pool.map(lambda s: run_one(s, keep, args.make_only, cache), specs):
            results.append(res)
            spec: JobSpec = res["spec"]  # type: ignore[assignment]
            head = f"{spec.name:32s} {res['job_s']:5.1f}s"
            if "error" in res:
                print(f"{head} ERROR {failure_cause(res['error'])}", flush=True)
                continue
            if args.make_only:
                print(f"{head} -> {res['folder']}", flush=True)
                continue
            exp = spec.expected()
            want = f"{'/'.join(exp['kinds'])} ranks {exp['ranks']}" if exp["kinds"] else "no finding"
            print(
                f"{head} {'HIT ' if res['ok'] else 'MISS'} expected {want}; got {res['why']}; "
                f"collectives {res['collectives']} p2p {res['p2p']} problems {res['problems']}; "
                f"layout {'ok' if res['layout_ok'] else 'WRONG'} {res['layout']}",
                flush=True,
            )
    if args.make_only:
        print(f"described in {write_readme(keep)}")
        return 0
    twins = {r["spec"].name: r for r in results if r["spec"].name.endswith(TWIN) and "error" not in r}  # type: ignore[attr-defined]
    judged = [r for r in results if "error" not in r and not r["spec"].name.endswith(TWIN)]  # type: ignore[attr-defined]
    faulty = [r for r in judged if r["spec"].fault != "none"]  # type: ignore[attr-defined]
    clean = [r for r in judged if r["spec"].fault == "none"]  # type: ignore[attr-defined]
    meshy = [r for r in judged if r["spec"].api in MESH_APIS]  # type: ignore[attr-defined]

    def rate(rows: list[dict[str, object]], key: str) -> str:
        hits = sum(bool(r[key]) for r in rows)
        return f"{hits}/{len(rows)} ({100 * hits / len(rows):.0f}%)" if rows else "n/a"

    print(f"\ntop finding right on faulty jobs: {rate(faulty, 'ok')}")
    print(f"no finding on clean jobs:        {rate(clean, 'ok')}")
    print(f"layout read on DeviceMesh jobs:  {rate(meshy, 'layout_ok')}")
    errors = sum("error" in r for r in results)
    print(f"jobs that failed to run or analyse: {errors}")
    by_fault: dict[str, list[dict[str, object]]] = {}
    for r in faulty:
        by_fault.setdefault(r["spec"].fault, []).append(r)  # type: ignore[attr-defined]
    for fault, rows in sorted(by_fault.items()):
        print(f"  {fault:16s} {rate(rows, 'ok')}")
    if twins:
        weigh_by_cost(faulty, twins, rate)
    return 0 if errors == 0 else 1


TWIN = "_twin"
COST_FLOOR_PCT = 2.0  # the analysis' MIN_IMPACT_PCT: a fault that costs less is not a finding's to name


def twin(spec: JobSpec) -> JobSpec:
    """The same job without its fault: what the fault cost is the difference of their median steps."""
    return dataclasses.replace(spec, name=spec.name + TWIN, fault="none", strength=0.0)


def weigh_by_cost(
    faulty: list[dict[str, object]],
    twins: dict[str, dict[str, object]],
    rate: Callable[[list[dict[str, object]], str], str],
) -> None:
    """Each faulty job's cost (its median step over its twin's, both as paradiag measured them) and the hit rates
    of the faults that cost at least COST_FLOOR_PCT and of those that cost less. One run of each is a rough
    measure: on 2 shared cores a job's median step moved by -50 % to +100 % between a run and its twin made half an
    hour later (several faulty jobs ran faster than their twins), so a cost tells a strong fault from a weak one
    only far from the floor. The twins are clean jobs too: their findings are false ones."""
    print("\nwhat each fault cost (median step vs its twin without the fault):")
    weighed: list[tuple[float, dict[str, object]]] = []
    for r in faulty:
        spec: JobSpec = r["spec"]  # type: ignore[assignment]
        t = twins.get(spec.name + TWIN)
        if not t or not t.get("step_ns") or not r.get("step_ns"):
            continue
        cost = 100 * (float(r["step_ns"]) - float(t["step_ns"])) / float(t["step_ns"])  # type: ignore[arg-type]
        weighed.append((cost, r))
        print(f"  {spec.name:32s} {cost:+7.1f} %  {'HIT ' if r['ok'] else 'MISS'}; twin: {t['why']}")
    costly = [r for c, r in weighed if c >= COST_FLOOR_PCT]
    cheap = [r for c, r in weighed if c < COST_FLOOR_PCT]
    clean_twins = [t for t in twins.values() if t.get("ok")]
    print(f"top finding right on faults costing >= {COST_FLOOR_PCT:g} %: {rate(costly, 'ok')}")
    print(f"top finding right on faults costing less:     {rate(cheap, 'ok')}")
    print(f"no finding on the twins:                       {len(clean_twins)}/{len(twins)}")


if __name__ == "__main__":
    sys.exit(main())
