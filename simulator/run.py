"""``simulate(config)``: build the job, run it step by step, stream every rank to its writer."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from paradiag.simulator import faults, groundtruth
from paradiag.simulator.config import ConfigError, SimConfig, validate
from paradiag.simulator.engine import Engine
from paradiag.simulator.job import Job

Progress = Callable[[str, int, int], None]  # (phase, done, total)


MANIFEST = "paradiag_run.json"


def _writer(job: Job, out: Path, origin_us: float | None = None) -> Any:
    if job.cfg.torch2:
        from paradiag.simulator.writers.torch2 import BOOT_US, Torch2Writer

        return Torch2Writer(job, out, BOOT_US if origin_us is None else origin_us)
    if job.cfg.format == "ascend":
        from paradiag.simulator.writers.ascend import AscendWriter

        return AscendWriter(job, out)
    from paradiag.simulator.writers.kineto import KinetoWriter

    return KinetoWriter(job, out)


def prepare(config: SimConfig) -> Job:
    """Check the config and its faults against the job they describe; raise ConfigError when impossible."""
    validate(config)
    cfg = config.with_defaults()
    job = Job.build(cfg)
    steps = range(cfg.first_step, cfg.last_step + 1)
    moe = cfg.model == "llm" and cfg.num_experts > 0
    profiled = {s for window in cfg.profiled_steps for s in window}
    for fault in cfg.faults:
        try:
            faults.check(fault, job.mesh.world, job.mesh.nodes, steps, cfg.ep, moe)
        except faults.FaultError as exc:
            raise ConfigError(str(exc)) from None
        missed = [s for s in fault.params.get("steps") or [] if s not in profiled]
        if missed:
            raise ConfigError(
                f"{fault.kind}: step {missed[0]} is not profiled (profiled steps: {', '.join(map(str, sorted(profiled)))})"
            )
    return job


def _clean(out: Path) -> None:
    """Remove what an earlier simulation left in ``out`` (only the simulator's own file patterns)."""
    patterns = (
        "rank*.pt.trace.json",
        "rank*.pt.trace.json.gz",
        ".rank*.part",
        "*_ascend_pt",
        groundtruth.FILE_NAME,
        "sim-node*.pt.trace.json",
        "sim-node*.pt.trace.json.gz",
        MANIFEST,
    )
    for pattern in patterns:
        for old in out.glob(pattern):
            shutil.rmtree(old) if old.is_dir() else old.unlink()


def _run(
    job: Job, out: Path, writer: Any, progress: Progress | None
) -> tuple[dict[int, list[str]], dict[str, dict[int, list[float]]]]:
    """Simulate every profiled step of ``job`` and write each rank's file of each window; return the files per
    rank (one per window) and the per-rank, per-step timings of the ground truth."""
    cfg, world = job.cfg, job.mesh.world
    engine = Engine(job)
    step_us: dict[int, list[float]] = {r: [] for r in range(world)}
    compute_us: dict[int, list[float]] = {r: [] for r in range(world)}
    pass_us: dict[int, list[float]] = {
        r: [] for r in range(world)
    }  # forward and backward passes: no optimizer
    files: dict[int, list[str]] = {r: [] for r in range(world)}
    windows = cfg.profiled_steps
    done = 0
    for w, steps in enumerate(windows):
        for rank in range(world):
            writer.begin(rank)
        if w > 0:  # the unprofiled steps between two windows: time passes, nothing is recorded
            engine.idle(cfg.window_gap * max(span[-1] for span in step_us.values()))
        for step in steps:
            records = engine.run_step(step)
            for rank in range(world):
                step_us[rank].append(records[rank][0][3])
                kernels = [rec for rec in records[rank] if rec[0] == "K"]
                compute_us[rank].append(sum(rec[7] for rec in kernels))
                pass_us[rank].append(sum(rec[7] for rec in kernels if rec[9].family != "optimizer"))
                writer.write_step(rank, step, records[rank])
            del records
            done += 1
            if progress:
                progress("simulate", done, cfg.steps * len(windows))
        for rank in range(world):
            files[rank].append(writer.finish(rank).relative_to(out).as_posix())
            if progress and w == len(windows) - 1:
                progress("write", rank + 1, world)
    return files, {"step_time_us": step_us, "compute_us": compute_us, "pass_compute_us": pass_us}


def simulate(config: SimConfig, progress: Progress | None = None) -> Path:
    """Simulate the job ``config`` describes, write its traces and ``ground_truth.json``; return the folder."""
    job = prepare(config)
    cfg, out = job.cfg, Path(config.output)
    out.mkdir(parents=True, exist_ok=True)
    _clean(out)
    stale: list[str] = []
    if cfg.torch2 and cfg.rerun:  # an older run of the same job, without the fault, an hour earlier
        from paradiag.simulator.writers.torch2 import BOOT_US, RERUN_EARLIER_US

        older = Job.build(replace(cfg, seed=cfg.seed + 7919, faults=(), rerun=False, manifest=False))
        old_files, _ = _run(older, out, _writer(older, out, BOOT_US - RERUN_EARLIER_US), None)
        stale = sorted(f for per_rank in old_files.values() for f in per_rank)
    files, timings = _run(job, out, _writer(job, out), progress)
    if cfg.torch2 and cfg.manifest:
        from paradiag.simulator.writers.torch2 import manifest

        tmp = out / (MANIFEST + ".tmp")
        tmp.write_text(json.dumps(manifest(job), indent=1) + "\n")
        os.replace(tmp, out / MANIFEST)
    extra = {"windows": files, "stale_files": stale} if cfg.torch2 else None
    groundtruth.write(job, out, {r: f[-1] for r, f in files.items()}, timings, extra)
    return out
