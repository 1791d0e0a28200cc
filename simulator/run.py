"""``simulate(config)``: build the job, run it step by step, stream every rank to its writer."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from paradiag.simulator import faults, groundtruth
from paradiag.simulator.config import ConfigError, SimConfig, validate
from paradiag.simulator.engine import Engine
from paradiag.simulator.job import Job

Progress = Callable[[str, int, int], None]  # (phase, done, total)


def _writer(job: Job, out: Path) -> Any:
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
    steps = range(cfg.first_step, cfg.first_step + cfg.steps)
    moe = cfg.model == "llm" and cfg.num_experts > 0
    for fault in cfg.faults:
        try:
            faults.check(fault, job.mesh.world, job.mesh.nodes, steps, cfg.ep, moe)
        except faults.FaultError as exc:
            raise ConfigError(str(exc)) from None
    return job


def _clean(out: Path) -> None:
    """Remove what an earlier simulation left in ``out`` (only the simulator's own file patterns)."""
    for pattern in ("rank*.pt.trace.json", "rank*.pt.trace.json.gz", ".rank*.part", "*_ascend_pt", groundtruth.FILE_NAME):
        for old in out.glob(pattern):
            shutil.rmtree(old) if old.is_dir() else old.unlink()


def simulate(config: SimConfig, progress: Progress | None = None) -> Path:
    """Simulate the job ``config`` describes, write its traces and ``ground_truth.json``; return the folder."""
    job = prepare(config)
    cfg, out = job.cfg, Path(config.output)
    out.mkdir(parents=True, exist_ok=True)
    _clean(out)
    writer = _writer(job, out)
    world = job.mesh.world
    for rank in range(world):
        writer.begin(rank)
    engine = Engine(job)
    step_us: dict[int, list[float]] = {r: [] for r in range(world)}
    compute_us: dict[int, list[float]] = {r: [] for r in range(world)}
    pass_us: dict[int, list[float]] = {r: [] for r in range(world)}  # forward and backward passes: no optimizer
    for i in range(cfg.steps):
        step = cfg.first_step + i
        records = engine.run_step(step)
        for rank in range(world):
            step_us[rank].append(records[rank][0][3])
            kernels = [rec for rec in records[rank] if rec[0] == "K"]
            compute_us[rank].append(sum(rec[7] for rec in kernels))
            pass_us[rank].append(sum(rec[7] for rec in kernels if rec[9].family != "optimizer"))
            writer.write_step(rank, step, records[rank])
        del records
        if progress:
            progress("simulate", i + 1, cfg.steps)
    files: dict[int, str] = {}
    for rank in range(world):
        files[rank] = writer.finish(rank).relative_to(out).as_posix()
        if progress:
            progress("write", rank + 1, world)
    groundtruth.write(job, out, files, {"step_time_us": step_us, "compute_us": compute_us, "pass_compute_us": pass_us})
    return out
