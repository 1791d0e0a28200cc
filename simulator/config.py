"""The simulated job's options, and the checks that refuse impossible combinations."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from paradiag.simulator import devices
from paradiag.simulator.devices import DEVICES_PER_NODE
from paradiag.simulator.faults import Fault

MODELS = ("llm", "resnet50")
# Zero-bubble schedules split each backward into the inputs' and the weights' gradients: "zb" looped (ZB-H1 with
# one chunk a stage, torch's ScheduleInterleavedZeroBubble with several), "zbv" V-shaped (two chunks a stage: torch's
# ScheduleZBVZeroBubble). ``paradiag.simulator.schedule``.
SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb", "zbv")
FORMATS = ("kineto", "ascend")
SHAPES = (
    "megatron",
    "torch2",
)  # megatron: record_param_comms and Megatron group names; torch2: what a PyTorch 2.x job records
TRACE_NAMES = (
    "worker",
    "rank",
    "window",
)  # torch2 file names: {host}_{pid}.{ns}, rank{R}.{ns} (tensorboard_trace_handler), rank{R}.window{W}
DP_DIMS = ("dp", "dp_shard", "dp_replicate")  # torch2: the DeviceMesh dim name of the data-parallel groups
DP_MODES = ("ddp", "fsdp")


class ConfigError(ValueError):
    """Options that describe no possible job; the message says which and why."""


@dataclass(frozen=True)
class SimConfig:
    """Everything that defines one simulated job; the same config and seed give byte-identical output."""

    output: Path = Path("simulated_job")
    model: str = "llm"
    device: str = "h100"
    dp: int = 1
    tp: int = 1
    pp: int = 1
    ep: int = 1
    schedule: str = "1f1b"
    virtual_stages: int = 1
    microbatches: int | None = None  # default: 2 x pp (1 without pipeline)
    steps: int = 4
    layers: int = 24
    hidden: int = 2048
    heads: int = 16
    seq_len: int = 2048
    micro_batch_size: int = 1
    experts: int = 0  # MoE experts per MoE layer (0: dense; default 2 x ep when ep > 1)
    moe_every: int = 2  # every n-th layer is an MoE layer
    vocab: int = 50304
    image_batch: int = 32  # ResNet-50 images per micro-batch
    faults: tuple[Fault, ...] = ()
    format: str = "kineto"
    gzip: bool = False
    p2p_peer: bool = (
        True  # Kineto: send/recv name their peer (record_param_comms "Rank"); older PyTorch did not
    )
    jitter: float = 0.03
    seed: int = 0
    devices_per_node: int = DEVICES_PER_NODE
    first_step: int = 0
    name: str = field(default="")
    # The torch2 shape (docs/simulator.md "PyTorch 2.x shape"); the defaults write the megatron shape, unchanged.
    shape: str = "megatron"
    dp_mode: str = (
        "ddp"  # torch2: ddp (bucketed all-reduce) or fsdp (FSDP2: per-layer all-gather and reduce-scatter)
    )
    dp_dim: str = "dp"
    windows: int = 1  # profiler cycles (schedule repeat): one trace file per rank and window
    window_gap: int = 2  # unprofiled steps (wait + warmup) before each window after the first
    trace_names: str = "worker"
    rerun: bool = False  # torch2: an older, fault-free run's files are left in the folder (one hour earlier)
    manifest: bool = False  # torch2: paradiag_run.json as paradiag.torch writes it
    # torch2 on GPU: record_param_comms and the kernel's collective args, as PyTorch >= 2.2 records NCCL work;
    # False writes what older PyTorch (or a profile without them) holds: the c10d op, nccl annotation and kernel only
    collective_args: bool = True

    @property
    def torch2(self) -> bool:
        return self.shape == "torch2"

    @property
    def cpu(self) -> bool:
        return self.device == "cpu"

    @property
    def profiled_steps(self) -> list[list[int]]:
        """The profiler step numbers of each window (ProfilerStep#N continues across windows)."""
        period = self.steps + self.window_gap
        return [[self.first_step + w * period + i for i in range(self.steps)] for w in range(self.windows)]

    @property
    def last_step(self) -> int:
        return self.profiled_steps[-1][-1]

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def num_microbatches(self) -> int:
        return self.microbatches if self.microbatches is not None else (2 * self.pp if self.pp > 1 else 1)

    @property
    def num_experts(self) -> int:
        return self.experts or (2 * self.ep if self.ep > 1 else 0)

    @property
    def nodes(self) -> int:
        return -(-self.world_size // self.devices_per_node)

    def with_defaults(self) -> SimConfig:
        """The config as simulated: defaults made explicit, the device's format chosen."""
        return replace(self, microbatches=self.num_microbatches, experts=self.num_experts)


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def validate(cfg: SimConfig) -> None:
    """Raise ConfigError with a clear message when the options describe no possible job."""
    _check(cfg.model in MODELS, f"--model must be one of {', '.join(MODELS)}")
    devices.get(cfg.device)
    _check(cfg.schedule in SCHEDULES, f"--schedule must be one of {', '.join(SCHEDULES)}")
    _check(cfg.format in FORMATS, f"--format must be one of {', '.join(FORMATS)}")
    for name in ("dp", "tp", "pp", "ep", "steps", "virtual_stages", "layers", "num_microbatches"):
        _check(getattr(cfg, name) >= 1, f"--{name.replace('_', '-')} must be at least 1")
    _check(0.0 <= cfg.jitter <= 0.5, "--jitter must be between 0 and 0.5")
    _check(cfg.shape in SHAPES, f"--shape must be one of {', '.join(SHAPES)}")
    _check(
        cfg.windows >= 1 and cfg.window_gap >= 0, "--windows must be at least 1 and --window-gap at least 0"
    )
    if cfg.torch2:
        _check(
            cfg.format == "kineto",
            "--shape torch2 writes PyTorch profiler (Kineto) traces: use --format kineto",
        )
        _check(cfg.trace_names in TRACE_NAMES, f"--trace-names must be one of {', '.join(TRACE_NAMES)}")
        _check(cfg.dp_dim in DP_DIMS, f"--dp-dim must be one of {', '.join(DP_DIMS)}")
        _check(cfg.dp_mode in DP_MODES, f"--dp-mode must be one of {', '.join(DP_MODES)}")
        _check(
            not (cfg.rerun and cfg.trace_names == "window"),
            "--rerun needs time-stamped file names (--trace-names worker or rank): a rerun with rank{R}.window{W} names overwrites the older files",
        )
        _check(cfg.dp_mode != "fsdp" or cfg.model == "llm", "--dp-mode fsdp needs --model llm")
    else:
        _check(
            cfg.device != "cpu", "--device cpu writes what a CPU (gloo) job records: it needs --shape torch2"
        )
        extras = [
            name
            for name, on in (
                ("--windows", cfg.windows != 1),
                ("--rerun", cfg.rerun),
                ("--manifest", cfg.manifest),
                ("--dp-mode fsdp", cfg.dp_mode != "ddp"),
                ("--no-collective-args", not cfg.collective_args),
            )
            if on
        ]
        _check(not extras, f"{', '.join(extras)} need --shape torch2")
    _check(
        cfg.tp <= cfg.devices_per_node,
        f"--tp {cfg.tp} is larger than a node ({cfg.devices_per_node} devices): tensor parallelism stays inside a node",
    )
    if cfg.model == "resnet50":
        _check(
            cfg.tp == 1 and cfg.pp == 1 and cfg.ep == 1,
            "--model resnet50 is data parallel only: use --tp 1 --pp 1 --ep 1",
        )
        return
    _check(
        cfg.hidden % cfg.tp == 0 and cfg.heads % cfg.tp == 0,
        f"--tp {cfg.tp} must divide the hidden size {cfg.hidden} and the {cfg.heads} attention heads",
    )
    _check(
        cfg.dp % cfg.ep == 0,
        f"--ep {cfg.ep} must divide --dp {cfg.dp} (expert parallelism splits the data-parallel ranks)",
    )
    if cfg.ep > 1 or cfg.experts:
        _check(
            cfg.num_experts % cfg.ep == 0,
            f"{cfg.num_experts} experts cannot be split over --ep {cfg.ep} ranks",
        )
    _check(
        cfg.schedule != "gpipe" or cfg.virtual_stages == 1,
        "--virtual-stages needs --schedule interleaved, zb or zbv",
    )
    _check(
        cfg.schedule != "1f1b" or cfg.virtual_stages == 1,
        "--virtual-stages needs --schedule interleaved, zb or zbv",
    )
    if cfg.schedule in ("zb", "zbv"):
        _check(cfg.pp > 1, f"--schedule {cfg.schedule} needs --pp > 1")
        _check(cfg.model == "llm", f"--schedule {cfg.schedule} needs --model llm")
    _check(
        cfg.schedule != "zbv" or cfg.virtual_stages == 2,
        "--schedule zbv needs --virtual-stages 2 (each stage holds two chunks of the V)",
    )
    if cfg.schedule == "interleaved":
        _check(
            cfg.pp > 1 and cfg.virtual_stages > 1,
            "--schedule interleaved needs --pp > 1 and --virtual-stages > 1",
        )
        _check(
            cfg.num_microbatches % cfg.pp == 0,
            f"--schedule interleaved needs --microbatches ({cfg.num_microbatches}) divisible by --pp ({cfg.pp})",
        )
    chunks = cfg.pp * cfg.virtual_stages
    _check(
        cfg.layers >= chunks,
        f"the mesh is larger than the model allows: {cfg.layers} layers cannot fill {cfg.pp} stages x {cfg.virtual_stages} virtual stages",
    )
    if not any(f.kind == "stage_imbalance" for f in cfg.faults):
        _check(
            cfg.layers % chunks == 0,
            f"--layers {cfg.layers} must be divisible by pp x virtual stages = {chunks}",
        )
