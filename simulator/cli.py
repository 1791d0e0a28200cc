"""``paradiag simulate``: generate a multi-rank training job's traces with faults injected on purpose."""

from __future__ import annotations

import time
from pathlib import Path

import click

from paradiag.simulator import faults
from paradiag.simulator.config import FORMATS, MODELS, SCHEDULES, ConfigError, SimConfig
from paradiag.simulator.devices import DEVICES
from paradiag.simulator.run import prepare
from paradiag.simulator.run import simulate as run_simulation


def _parse_faults(values: tuple[str, ...]) -> tuple[faults.Fault, ...]:
    try:
        return tuple(faults.parse(v) for v in values)
    except faults.FaultError as exc:
        raise click.BadParameter(str(exc), param_hint="--inject") from None


@click.command("simulate", context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("--model", type=click.Choice(MODELS), default="llm", show_default=True, help="Transformer LLM (optionally MoE) or a ResNet-50-like CNN (data parallel only).")
@click.option("--device", type=click.Choice(sorted(DEVICES)), default="h100", show_default=True, help="Accelerator: sets FLOP/s, HBM and link bandwidths, kernel names.")
@click.option("--dp", type=click.IntRange(min=1), default=1, show_default=True, help="Data-parallel size.")
@click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True, help="Tensor-parallel size (inside a node of 8 devices; sequence parallel).")
@click.option("--pp", type=click.IntRange(min=1), default=1, show_default=True, help="Pipeline-parallel stages.")
@click.option("--ep", type=click.IntRange(min=1), default=1, show_default=True, help="Expert-parallel size (divides --dp; makes every 2nd layer MoE).")
@click.option("--schedule", type=click.Choice(SCHEDULES), default="1f1b", show_default=True, help="Pipeline schedule.")
@click.option("--virtual-stages", type=click.IntRange(min=1), default=1, show_default=True, help="Model chunks per device (interleaved schedule only).")
@click.option("--microbatches", type=click.IntRange(min=1), default=None, help="Micro-batches per step  [default: 2 x pp, 1 without pipeline]")
@click.option("--steps", type=click.IntRange(min=1), default=4, show_default=True, help="Profiled training steps (ProfilerStep#0..N-1).")
@click.option("--layers", type=click.IntRange(min=1), default=24, show_default=True, help="Transformer layers (LLM).")
@click.option("--hidden", type=click.IntRange(min=64), default=2048, show_default=True, help="Hidden size (LLM).")
@click.option("--seq-len", type=click.IntRange(min=16), default=2048, show_default=True, help="Sequence length (LLM).")
@click.option("--vocab", type=click.IntRange(min=256), default=50304, show_default=True, help="Vocabulary size (LLM): sets the embedding and LM-head cost of the first and last stage.")
@click.option("--experts", type=click.IntRange(min=0), default=0, show_default=True, help="Experts per MoE layer (0: 2 x ep when --ep > 1, else dense).")
@click.option("--inject", "injects", multiple=True, metavar="KIND:key=val,...", help=f"Inject a fault (repeatable). Kinds: {', '.join(faults.KINDS)}. Examples: {faults.HELP}")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None, help="Output format  [default: ascend for 910b, kineto for GPUs]")
@click.option("--gzip/--no-gzip", "gzip_", default=False, show_default=True, help="Gzip the Kineto trace files (.pt.trace.json.gz).")
@click.option("--p2p-peer/--no-p2p-peer", "p2p_peer", default=True, show_default=True, help="Kineto: send/recv record their peer's rank (the \"Rank\" argument); --no-p2p-peer writes them as older PyTorch versions did, with only the process group and its ranks.")
@click.option("--jitter", type=click.FloatRange(0.0, 0.5), default=0.03, show_default=True, help="Run-to-run noise on kernel and transfer times (relative).")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed: the same seed and options give byte-identical output.")
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path), required=True, help="Job folder to write (created; earlier simulator output in it is replaced).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def simulate(model: str, device: str, dp: int, tp: int, pp: int, ep: int, schedule: str, virtual_stages: int, microbatches: int | None,
             steps: int, layers: int, hidden: int, seq_len: int, vocab: int, experts: int, injects: tuple[str, ...], fmt: str | None, gzip_: bool,
             p2p_peer: bool, jitter: float, seed: int, output: Path, quiet: bool) -> None:
    """Simulate a distributed training job and write one trace per rank plus ground_truth.json.

    Example: paradiag simulate --dp 4 --tp 2 --pp 4 --schedule 1f1b --microbatches 8 --steps 4
    --inject slow_device:ranks=5,factor=1.3 --inject slow_link:ranks=8-16,factor=4 --seed 7 -o job/
    """
    config = SimConfig(
        output=output, model=model, device=device, dp=dp, tp=tp, pp=pp, ep=ep, schedule=schedule, virtual_stages=virtual_stages,
        microbatches=microbatches, steps=steps, layers=layers, hidden=hidden, seq_len=seq_len, vocab=vocab, experts=experts,
        faults=_parse_faults(injects), format=fmt or ("ascend" if device == "910b" else "kineto"), gzip=gzip_, p2p_peer=p2p_peer, jitter=jitter, seed=seed,
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
    click.echo(f"{job.mesh.world} ranks x {config.steps} steps ({config.format}) written to {output} in {elapsed:.1f} s")


def _with_progress(config: SimConfig, world: int) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True) as bar:
        tasks = {"simulate": bar.add_task("simulating steps", total=config.steps), "write": bar.add_task(f"writing {world} ranks", total=world)}

        def update(phase: str, done: int, total: int) -> None:
            bar.update(tasks[phase], completed=done)

        run_simulation(config, progress=update)
