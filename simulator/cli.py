"""``paradiag simulate``: generate a multi-rank training job's traces with faults injected on purpose."""

from __future__ import annotations

import time
from pathlib import Path

import click

from paradiag.simulator import faults
from paradiag.simulator.config import (
    DP_DIMS,
    DP_MODES,
    FORMATS,
    MODELS,
    SCHEDULES,
    SHAPES,
    TRACE_NAMES,
    ConfigError,
    SimConfig,
)
from paradiag.simulator.devices import DEVICES
from paradiag.simulator.run import prepare
from paradiag.simulator.run import simulate as run_simulation


def _parse_faults(values: tuple[str, ...]) -> tuple[faults.Fault, ...]:
    try:
        return tuple(faults.parse(v) for v in values)
    except faults.FaultError as exc:
        raise click.BadParameter(str(exc), param_hint="--inject") from None


@click.command("simulate", context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option(
    "--model",
    type=click.Choice(MODELS),
    default="llm",
    show_default=True,
    help="Transformer LLM (optionally MoE) or a ResNet-50-like CNN (data parallel only).",
)
@click.option(
    "--device",
    type=click.Choice(sorted(DEVICES)),
    default="h100",
    show_default=True,
    help="Accelerator: sets FLOP/s, HBM and link bandwidths, kernel names (cpu: a CPU job over gloo, --shape torch2 only).",
)
@click.option("--dp", type=click.IntRange(min=1), default=1, show_default=True, help="Data-parallel size.")
@click.option(
    "--tp",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Tensor-parallel size (inside a node of 8 devices; sequence parallel).",
)
@click.option(
    "--pp", type=click.IntRange(min=1), default=1, show_default=True, help="Pipeline-parallel stages."
)
@click.option(
    "--ep",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Expert-parallel size (divides --dp; makes every 2nd layer MoE).",
)
@click.option(
    "--schedule",
    type=click.Choice(SCHEDULES),
    default="1f1b",
    show_default=True,
    help="Pipeline schedule (zb, zbv: zero-bubble, the backward split into inputs' and weights' gradients).",
)
@click.option(
    "--virtual-stages",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Model chunks per device (interleaved and zb schedules; zbv: 2).",
)
@click.option(
    "--microbatches",
    type=click.IntRange(min=1),
    default=None,
    help="Micro-batches per step  [default: 2 x pp, 1 without pipeline]",
)
@click.option(
    "--steps",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Profiled training steps (ProfilerStep#0..N-1).",
)
@click.option(
    "--layers", type=click.IntRange(min=1), default=24, show_default=True, help="Transformer layers (LLM)."
)
@click.option(
    "--hidden", type=click.IntRange(min=64), default=2048, show_default=True, help="Hidden size (LLM)."
)
@click.option(
    "--seq-len", type=click.IntRange(min=16), default=2048, show_default=True, help="Sequence length (LLM)."
)
@click.option(
    "--vocab",
    type=click.IntRange(min=256),
    default=50304,
    show_default=True,
    help="Vocabulary size (LLM): sets the embedding and LM-head cost of the first and last stage.",
)
@click.option(
    "--experts",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Experts per MoE layer (0: 2 x ep when --ep > 1, else dense).",
)
@click.option(
    "--inject",
    "injects",
    multiple=True,
    metavar="KIND:key=val,...",
    help=f"Inject a fault (repeatable). Kinds: {', '.join(faults.KINDS)}. Examples: {faults.HELP}",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default=None,
    help="Output format  [default: ascend for 910b, kineto for GPUs]",
)
@click.option(
    "--gzip/--no-gzip",
    "gzip_",
    default=False,
    show_default=True,
    help="Gzip the Kineto trace files (.pt.trace.json.gz).",
)
@click.option(
    "--p2p-peer/--no-p2p-peer",
    "p2p_peer",
    default=True,
    show_default=True,
    help='Kineto: send/recv record their peer\'s rank (the "Rank" argument); --no-p2p-peer writes them as older PyTorch versions did, with only the process group and its ranks.',
)
@click.option(
    "--shape",
    type=click.Choice(SHAPES),
    default="megatron",
    show_default=True,
    help="What the traces look like: megatron (record_param_comms, Megatron group names) or torch2 (as a PyTorch 2.x job records them: DeviceMesh groups, c10d ops, group-local peers; gloo threads with --device cpu).",
)
@click.option(
    "--dp-mode",
    type=click.Choice(DP_MODES),
    default="ddp",
    show_default=True,
    help="torch2: data parallelism as DDP (bucketed gradient all-reduce) or FSDP2 (per-layer all-gather and reduce-scatter).",
)
@click.option(
    "--dp-dim",
    type=click.Choice(DP_DIMS),
    default="dp",
    show_default=True,
    help="torch2: the DeviceMesh dim name of the data-parallel groups (mesh_dp, mesh_dp_shard, mesh_dp_replicate).",
)
@click.option(
    "--windows",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="torch2: profiler windows (schedule repeat): one file per rank and window, ProfilerStep numbers continuing.",
)
@click.option(
    "--window-gap",
    type=click.IntRange(min=0),
    default=2,
    show_default=True,
    help="torch2: unprofiled steps (wait + warmup) between two windows.",
)
@click.option(
    "--trace-names",
    type=click.Choice(TRACE_NAMES),
    default="worker",
    show_default=True,
    help="torch2 file names: worker ({host}_{pid}.{time_ns}), rank (rank{R}.{time_ns}), window (rank{R}.window{W}).",
)
@click.option(
    "--rerun/--no-rerun",
    default=False,
    show_default=True,
    help="torch2: also leave an older, fault-free run's files (an hour earlier) in the folder.",
)
@click.option(
    "--manifest/--no-manifest",
    default=False,
    show_default=True,
    help="torch2: write paradiag_run.json as paradiag.torch does.",
)
@click.option(
    "--collective-args/--no-collective-args",
    default=True,
    show_default=True,
    help="torch2 on GPU: record_param_comms and the kernel's collective args (group, sizes), as PyTorch >= 2.2 records NCCL work; --no-collective-args writes only the c10d op, the nccl annotation and the kernel, as older PyTorch did.",
)
@click.option(
    "--jitter",
    type=click.FloatRange(0.0, 0.5),
    default=0.03,
    show_default=True,
    help="Run-to-run noise on kernel and transfer times (relative).",
)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Random seed: the same seed and options give byte-identical output.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Job folder to write (created; earlier simulator output in it is replaced).",
)
@click.option("--quiet", is_flag=True, help="No progress bar.")
def simulate(
    model: str,
    device: str,
    dp: int,
    tp: int,
    pp: int,
    ep: int,
    schedule: str,
    virtual_stages: int,
    microbatches: int | None,
    steps: int,
    layers: int,
    hidden: int,
    seq_len: int,
    vocab: int,
    experts: int,
    injects: tuple[str, ...],
    fmt: str | None,
    gzip_: bool,
    p2p_peer: bool,
    shape: str,
    dp_mode: str,
    dp_dim: str,
    windows: int,
    window_gap: int,
    trace_names: str,
    rerun: bool,
    manifest: bool,
    collective_args: bool,
    jitter: float,
    seed: int,
    output: Path,
    quiet: bool,
) -> None:
    """Simulate a distributed training job and write one trace per rank plus ground_truth.json.

    Example: paradiag simulate --dp 4 --tp 2 --pp 4 --schedule 1f1b --microbatches 8 --steps 4
    --inject slow_device:ranks=5,factor=1.3 --inject slow_link:ranks=8-16,factor=4 --seed 7 -o job/
    """
    config = SimConfig(
        output=output,
        model=model,
        device=device,
        dp=dp,
        tp=tp,
        pp=pp,
        ep=ep,
        schedule=schedule,
        virtual_stages=virtual_stages,
        microbatches=microbatches,
        steps=steps,
        layers=layers,
        hidden=hidden,
        seq_len=seq_len,
        vocab=vocab,
        experts=experts,
        faults=_parse_faults(injects),
        format=fmt or ("ascend" if device == "910b" else "kineto"),
        gzip=gzip_,
        p2p_peer=p2p_peer,
        jitter=jitter,
        seed=seed,
        shape=shape,
        dp_mode=dp_mode,
        dp_dim=dp_dim,
        windows=windows,
        window_gap=window_gap,
        trace_names=trace_names,
        rerun=rerun,
        manifest=manifest,
        collective_args=collective_args,
    )
    try:
        job = prepare(config)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    started = time.perf_counter()
    if quiet:
        run_simulation(config)
    else:
        _with_progress(config, job.mesh.world)
    elapsed = time.perf_counter() - started
    cycles = f" x {config.windows} windows" if config.windows > 1 else ""
    click.echo(
        f"{job.mesh.world} ranks x {config.steps} steps{cycles} ({config.format}{', torch2' if config.torch2 else ''}) written to {output} in {elapsed:.1f} s"
    )


def _with_progress(config: SimConfig, world: int) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=True,
    ) as bar:
        tasks = {
            "simulate": bar.add_task("simulating steps", total=config.steps * config.windows),
            "write": bar.add_task(f"writing {world} ranks", total=world),
        }

        def update(phase: str, done: int, total: int) -> None:
            bar.update(tasks[phase], completed=done)

        run_simulation(config, progress=update)
