"""A small real torch.distributed training job with a fault injected in its own code, profiled as users do.

Run by torchrun (tests/realjobs/__init__.py: make_job), one process per rank, gloo on loopback, one thread each:

    OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo torchrun --nproc-per-node 4 --master-addr 127.0.0.1 --master-port P \
        tests/realjobs/job.py --api pipe_1f1b --fault heavy_stage --rank 2 --strength 0.5 --out DIR

The model is a stack of blocks (Linear h->2h, GELU, Linear 2h->h). APIs:
  ddp          DistributedDataParallel over every rank (an optional comm hook)
  fsdp1        FullyShardedDataParallel (FSDP1): a flat parameter per block and one for the root
  fsdp2        fully_shard per block and on the root, over init_device_mesh("cpu", (W,), ("dp",))
  pipe_gpipe, pipe_1f1b, pipe_interleaved, pipe_zb, pipe_zbv, pipe_bfs, pipe_dualpipev
               torch.distributed.pipelining: one PipelineStage per rank (interleaved, zb, bfs (looped BFS): two,
               virtual stages, r and r + W; zbv, dualpipev: two in a V, r and 2W - 1 - r)
  isend        a hand-written GPipe: forward every micro-batch with dist.isend/irecv, then backward in reverse
  mesh_dp_pp   init_device_mesh("cpu", (dp, pp), ("dp", "pp")): Schedule1F1B over the pp dimension, each stage
               wrapped in DDP (or fully_shard, --dp-wrap fsdp) over the dp dimension
  mesh_dp_tp   init_device_mesh("cpu", (dp, tp), ("dp", "tp")): parallelize_module ColwiseParallel/RowwiseParallel
               over tp (DTensor), gradients averaged over dp
Faults (on --rank; pipeline faults on the stage that rank holds):
  none; slow_rank (--slow-mode slowdown: every op stretched to (1 + strength)x its time, a slower device; extra: extra
  matmuls worth --strength x the layers' flops; batch: a (1 + strength)x local batch, DDP/FSDP2 only); host_stall (sleeps --strength ms once, in one profiled step); heavy_stage (the stage holds
  (1 + strength) x the blocks); slow_collective (a DDP comm hook that sleeps --strength ms before each bucket's
  all_reduce); slow_link (the rank sleeps --strength ms before each send to the next stage); hotspot (GELU on that
  rank computes --strength x the elements in one call).
Profilers: named (tensorboard_trace_handler with worker_name=rank{R}), default (default worker_name), paradiag
(paradiag.torch.profile); --repeat N gives N windows per rank.
Training as large-model recipes do (--recipe usual): every block under activation checkpointing (non-reentrant:
its forward computed again in the backward), forwards under bf16 autocast, AdamW (foreach) with gradient clipping
(FSDP2's norm is an all_reduce of its shards'), and, on the data-parallel APIs, two accumulation micro-steps per
step with the gradients' sync skipped in the first (DDP/FSDP1 no_sync, FSDP2 set_requires_gradient_sync).
Nothing but what the profiler writes goes into --out.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

PIPE_SCHEDULES = {
    "pipe_gpipe": "ScheduleGPipe",
    "pipe_1f1b": "Schedule1F1B",
    "pipe_interleaved": "ScheduleInterleaved1F1B",
    "pipe_zb": "ScheduleInterleavedZeroBubble",  # backward split in input and weight gradients
    "pipe_zbv": "ScheduleZBVZeroBubble",  # ... and its two stages per rank placed in a V: r and 2W - 1 - r
    "pipe_bfs": "ScheduleLoopedBFS",  # two looped stages a rank (r, r + W): a stage's forwards, then its backwards
    "pipe_dualpipev": "ScheduleDualPipeV",  # DeepSeek's DualPipe in a V: a forward and a backward run as one action
}
VIRTUAL = {"pipe_interleaved": 2, "pipe_zb": 2, "pipe_zbv": 2, "pipe_bfs": 2, "pipe_dualpipev": 2}
V_SHAPED = ("pipe_zbv", "pipe_dualpipev")


def options(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--api",
        required=True,
        choices=["ddp", "fsdp1", "fsdp2", *PIPE_SCHEDULES, "isend", "mesh_dp_pp", "mesh_dp_tp"],
    )
    p.add_argument(
        "--fault",
        default="none",
        choices=["none", "slow_rank", "host_stall", "heavy_stage", "slow_collective", "slow_link", "hotspot"],
    )
    p.add_argument("--rank", type=int, default=1, help="the rank the fault is injected on")
    p.add_argument("--strength", type=float, default=0.5)
    p.add_argument("--slow-mode", choices=["slowdown", "extra", "batch"], default="slowdown")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--blocks", type=int, default=2, help="blocks per stage (pipelines) or in the model")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--micro-batches", type=int, default=4)
    p.add_argument("--dp", type=int, default=2, help="mesh jobs: size of the dp dimension")
    p.add_argument("--dp-wrap", choices=["ddp", "fsdp"], default="ddp")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profiler", choices=["named", "default", "paradiag"], default="named")
    p.add_argument(
        "--model",
        choices=["mlp", "attention"],
        default="mlp",
        help="the block: Linear-GELU-Linear, or a transformer block (self-attention, LayerNorm, MLP); dp x tp: mlp",
    )
    p.add_argument(
        "--recipe",
        choices=["plain", "usual"],
        default="plain",
        help="plain: SGD, fp32, no checkpointing; usual: checkpointing, bf16 autocast, AdamW, clipping, accumulation",
    )
    p.add_argument("--no-shapes", action="store_true", help="record_shapes=False (torch.profiler's default)")
    p.add_argument("--with-stack", action="store_true", help="with_stack=True: Python frames around the ops")
    p.add_argument("--wait", type=int, default=1)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--active", type=int, default=3)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument(
        "--stall-step", type=int, default=1, help="host_stall: the active step (of the last window) it hits"
    )
    p.add_argument("--out", required=True)
    return p.parse_args(argv)


SEQUENCE = 4  # tokens per sample of the attention model
HEADS = 4


class AttentionBlock(nn.Module):
    """A pre-norm transformer block: self-attention (torch's MultiheadAttention) and an MLP (Linear, GELU,
    Linear), each around a residual."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.attn = nn.MultiheadAttention(hidden, HEADS, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.GELU(), nn.Linear(2 * hidden, hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


MODEL = "mlp"  # --model: the block every job stacks
USUAL = False  # --recipe usual


class Checkpointed(nn.Module):
    """A block under activation checkpointing: its activations are dropped after the forward and computed again
    in the backward (non-reentrant, as torchtitan and FSDP2 recipes use)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        return checkpoint(self.inner, x, use_reentrant=False)


def block(hidden: int, wrap: bool = True) -> nn.Module:
    inner = (
        AttentionBlock(hidden)
        if MODEL == "attention"
        else nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.GELU(), nn.Linear(2 * hidden, hidden))
    )
    return Checkpointed(inner) if USUAL and wrap else inner


def autocast():
    """The forward's precision: bf16 autocast under the usual recipe, else nothing."""
    return torch.autocast("cpu", dtype=torch.bfloat16) if USUAL else contextlib.nullcontext()


def optimizer(params) -> torch.optim.Optimizer:
    if USUAL:
        return torch.optim.AdamW(params, lr=1e-3, foreach=True)
    return torch.optim.SGD(params, lr=0.01)


def clip(params) -> None:
    """The usual recipe clips the gradients' global norm (on DTensor parameters, a collective)."""
    if USUAL:
        torch.nn.utils.clip_grad_norm_(list(params), 1.0, foreach=True)


def sample_shape(args: argparse.Namespace, rows: int) -> tuple[int, ...]:
    """A batch's shape: rows of hidden features, or rows of SEQUENCE tokens for the attention model."""
    return (rows, SEQUENCE, args.hidden) if args.model == "attention" else (rows, args.hidden)


HOT_ELEMENTS = 1 << 16  # a hot call computes at least `factor` x this many elements


class SlowGELU(nn.Module):
    """GELU that computes `factor` times the elements in the one aten::gelu call (an operator hotspot), and at
    least `factor` x HOT_ELEMENTS: a small call (a pipeline's micro-batch of 8 rows, a tensor-parallel shard) costs
    the dispatch, not its elements, so 16x its 6k elements took 71 us against its peers' 36-92 us on a busy host:
    a hotspot not in the trace. Sized so, the hot call's time is `factor` x what a full-sized GELU takes."""

    def __init__(self, factor: int) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        copies = self.factor * max(1, -(-HOT_ELEMENTS // max(x.numel(), 1)))
        return F.gelu(x.expand(copies, *x.shape))[0]


def add_hotspot(model: nn.Module, factor: int) -> None:
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, nn.GELU):
                setattr(module, name, SlowGELU(factor))


def add_extra_work(model: nn.Module, strength: float) -> None:
    """Before every Linear's and attention's forward, an extra matmul sized to `strength` x the layer's forward +
    backward flops of its projections (a rank that does more work per step: a slower device, a noisy neighbour)."""
    buffers: dict[int, torch.Tensor] = {}

    def hook(module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
        x = args[0]
        rows = x.shape[0] if x.dim() == 2 else int(torch.tensor(x.shape[:-1]).prod())
        if isinstance(module, nn.MultiheadAttention):  # its projections: 3h (queries, keys, values) and h out
            out_features = 4 * module.embed_dim
        else:
            weight = module.weight
            out_features = weight.to_local().shape[0] if hasattr(weight, "to_local") else weight.shape[0]
        in_features = x.shape[-1]
        k = max(1, round(strength * 3 * rows * out_features / in_features))
        key = in_features
        if key not in buffers or buffers[key].shape[0] < k:
            buffers[key] = torch.randn(k, in_features)
            buffers[-key] = torch.randn(in_features, in_features)
        with torch.no_grad():
            torch.mm(buffers[key][:k], buffers[-key])

    for module in model.modules():
        # MultiheadAttention computes with its projections' weights, not by calling them (their hooks never run)
        if isinstance(module, nn.Linear | nn.MultiheadAttention):
            module.register_forward_pre_hook(hook)


class Slowdown:
    """A slower device: every operator on this rank's thread (forward, backward, optimizer, in-place updates
    included) is stretched to (1 + strength)x its own time: once it returns, the thread keeps its core busy for
    `strength` x what the call took, inside the operator's profiled span, as a device slower by that factor would.
    Collectives and the profiler's own ops are never stretched (their time is waiting, not computing). An op on
    DTensors is stretched as a whole (its sharding propagation and local compute): the tensor-parallel plans here
    redistribute in module hooks, outside the ops, through c10d ops, which are not stretched.

    (Rerunning a share of the calls instead, results dropped, cannot stretch in-place ops, the optimizer's and
    autograd's accumulations among them: a "1.8x" rank computed only 1.09-1.18x its peers.)"""

    def __init__(self, strength: float) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        outer = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                start = time.perf_counter()
                out = func(*args, **(kwargs or {}))
                if outer.stretched(func):
                    outer.busy((time.perf_counter() - start) * outer.strength)
                return out

        self.strength = strength
        self.mode = Mode()

    @staticmethod
    def stretched(func) -> bool:
        name = func._schema.name
        return "c10d" not in name and not name.startswith("profiler::")

    @staticmethod
    def busy(seconds: float) -> None:
        """Keep the core busy (not asleep: a slower device computes longer; it does not yield its core)."""
        until = time.perf_counter() + seconds
        while time.perf_counter() < until:
            pass


def make_profiler(args: argparse.Namespace, rank: int, mesh: object = None):
    out = Path(args.out)
    if args.profiler == "paradiag":
        sys.path.insert(
            0, str(Path(__file__).resolve().parents[2])
        )  # the checkout's paradiag (torch.py: stdlib only)
        import paradiag.torch

        return paradiag.torch.profile(
            out,
            mesh=mesh,
            wait=args.wait,
            warmup=args.warmup,
            active=args.active,
            repeat=args.repeat,
            record_shapes=not args.no_shapes,
            with_stack=args.with_stack,
        )
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    handler = (
        tensorboard_trace_handler(str(out), worker_name=f"rank{rank}")
        if args.profiler == "named"
        else tensorboard_trace_handler(str(out))
    )
    return profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=not args.no_shapes,
        with_stack=args.with_stack,
        on_trace_ready=handler,
        schedule=schedule(wait=args.wait, warmup=args.warmup, active=args.active, repeat=args.repeat),
    )


def total_steps(args: argparse.Namespace) -> int:
    return args.repeat * (args.wait + args.warmup + args.active) + 1


def stall_iteration(args: argparse.Namespace) -> int:
    cycle = args.wait + args.warmup + args.active
    return (args.repeat - 1) * cycle + args.wait + args.warmup + min(args.stall_step, args.active - 1)


def batch_for(
    args: argparse.Namespace, step: int, who: int, rows: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(args.seed * 100003 + step * 101 + who)
    n = rows or args.batch
    return torch.randn(*sample_shape(args, n), generator=g), torch.randn(*sample_shape(args, n), generator=g)


def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(out, target)


def stage_blocks(args: argparse.Namespace, stage: int, num_stages: int, fault_stage: int | None) -> int:
    if args.fault == "heavy_stage" and stage == fault_stage:
        return max(args.blocks + 1, round(args.blocks * (1 + args.strength)))
    return args.blocks


def inject(args: argparse.Namespace, model: nn.Module, rank: int) -> None:
    if rank != args.rank:
        return
    if args.fault == "slow_rank" and args.slow_mode == "extra":
        add_extra_work(model, args.strength)
    elif args.fault == "hotspot":
        add_hotspot(model, max(2, round(args.strength)))


def train(args: argparse.Namespace, rank: int, world: int, step_fn, mesh: object = None) -> None:
    stall_at = stall_iteration(args)
    if args.fault == "slow_rank" and args.slow_mode == "slowdown" and rank == args.rank:
        inner = step_fn
        slow = Slowdown(args.strength)

        def step_fn(step: int) -> None:
            with slow.mode:
                inner(step)

    with make_profiler(args, rank, mesh) as prof:
        for step in range(total_steps(args)):
            if args.fault == "host_stall" and rank == args.rank and step == stall_at:
                time.sleep(args.strength / 1000)
            step_fn(step)
            prof.step()


def run_data_parallel(args: argparse.Namespace, rank: int, world: int) -> None:
    torch.manual_seed(args.seed)
    model = nn.Sequential(*[block(args.hidden) for _ in range(args.blocks)])
    inject(args, model, rank)
    mesh = None
    if args.api == "ddp":
        wrapped = nn.parallel.DistributedDataParallel(model)
        if args.fault == "slow_collective":
            delay = args.strength / 1000 if rank == args.rank else 0.0

            def hook(state, bucket):  # no annotations: DDP checks them, and they are strings here
                if delay:
                    time.sleep(delay)
                tensor = bucket.buffer().div_(world)
                return dist.all_reduce(tensor, async_op=True).get_future().then(lambda fut: fut.value()[0])

            wrapped.register_comm_hook(None, hook)
    elif args.api == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        # FSDP1: a flat parameter per block (the policy wraps each block) and one for the root
        wrapped = FullyShardedDataParallel(
            model,
            auto_wrap_policy=ModuleWrapPolicy({nn.Sequential}),
            sharding_strategy=ShardingStrategy.FULL_SHARD,
            device_id=torch.device("cpu"),
            use_orig_params=True,
        )
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
        for layer in model:
            fully_shard(layer, mesh=mesh)
        wrapped = fully_shard(model, mesh=mesh)
    opt = optimizer(wrapped.parameters())
    rows = args.batch
    if args.fault == "slow_rank" and args.slow_mode == "batch" and rank == args.rank:
        rows = round(args.batch * (1 + args.strength))
    micro = 2 if USUAL else 1  # accumulation micro-steps; the gradients are synchronised in the last only

    def sync(last: bool):
        if args.api == "fsdp2":
            wrapped.set_requires_gradient_sync(last)
            return contextlib.nullcontext()
        return contextlib.nullcontext() if last else wrapped.no_sync()

    def step_fn(step: int) -> None:
        for k in range(micro):
            x, y = batch_for(args, step * micro + k, rank, max(1, rows // micro))
            with sync(k == micro - 1):
                with autocast():
                    loss = loss_fn(wrapped(x), y)
                loss.backward()
        if USUAL:
            if args.api == "fsdp1":
                wrapped.clip_grad_norm_(1.0)
            else:
                clip(wrapped.parameters())
        opt.step()
        opt.zero_grad()

    train(args, rank, world, step_fn, mesh)


def run_pipeline(args: argparse.Namespace, rank: int, world: int) -> None:
    from torch.distributed import pipelining

    mesh = dp_group = None
    pp_group = None
    if args.api == "mesh_dp_pp":
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (args.dp, world // args.dp), mesh_dim_names=("dp", "pp"))
        pp_group = mesh.get_group("pp")
        dp_group = mesh.get_group("dp")
        pp_rank, num_ranks = mesh.get_local_rank("pp"), world // args.dp
        dp_rank = mesh.get_local_rank("dp")
        fault_pp = None
        if args.fault == "heavy_stage":
            fault_pp = int((mesh.mesh == args.rank).nonzero()[0][1])
        schedule_name = "Schedule1F1B"
    else:
        pp_rank, num_ranks, dp_rank = rank, world, 0
        fault_pp = args.rank if args.fault == "heavy_stage" else None
        schedule_name = PIPE_SCHEDULES[args.api]
    virtual = VIRTUAL.get(args.api, 1)
    num_stages = num_ranks * virtual
    stage_ids = [pp_rank + v * num_ranks for v in range(virtual)]
    if args.api in V_SHAPED:
        stage_ids = [pp_rank, num_stages - 1 - pp_rank]
    stages = []
    modules = []
    for s in stage_ids:
        torch.manual_seed(args.seed * 1000 + s)
        heavy = fault_pp is not None and s % num_ranks == fault_pp and s == stage_ids[0]
        n = stage_blocks(args, s, num_stages, s if heavy else None)
        module = nn.Sequential(*[block(args.hidden) for _ in range(n)])
        inject(args, module, rank)
        if dp_group is not None:
            if args.dp_wrap == "ddp":
                # static_graph: a stage runs several forwards before its backwards (1F1B's warm-up), and DDP's
                # first-iteration bucket rebuild counts a parameter once per backward it saw (dp2 x pp4, 4
                # micro-batches: "rebuilt params size of 16" vs 8, an internal assert); the graph is static.
                module = nn.parallel.DistributedDataParallel(
                    module, process_group=dp_group, static_graph=True
                )
            else:
                from torch.distributed.fsdp import fully_shard

                module = fully_shard(module, mesh=mesh["dp"])
        modules.append(module)
        stages.append(pipelining.PipelineStage(module, s, num_stages, torch.device("cpu"), group=pp_group))
    schedule_cls = getattr(pipelining, schedule_name)
    if virtual > 1:
        schedule = schedule_cls(stages, n_microbatches=args.micro_batches, loss_fn=loss_fn)
    else:
        schedule = schedule_cls(stages[0], n_microbatches=args.micro_batches, loss_fn=loss_fn)
    opt = optimizer([p for m in modules for p in m.parameters()])
    first = 0 in stage_ids
    last = num_stages - 1 in stage_ids
    delay = args.strength / 1000 if args.fault == "slow_link" and rank == args.rank else 0.0
    if delay:  # a late peer on every send: the stage's forward returns late
        for stage in stages:
            stage.submod.register_forward_hook(lambda m, i, o: time.sleep(delay))

    def step_fn(step: int) -> None:
        x, y = batch_for(args, step, dp_rank)
        with autocast():
            if first and last:
                schedule.step(x, target=y)
            elif first:
                schedule.step(x)
            elif last:
                schedule.step(target=y, losses=[])
            else:
                schedule.step()
        clip(p for m in modules for p in m.parameters())
        opt.step()
        opt.zero_grad()

    train(args, rank, world, step_fn, mesh)


def run_isend(args: argparse.Namespace, rank: int, world: int) -> None:
    """GPipe by hand: every micro-batch forward (irecv from the previous stage, compute, isend to the next), then
    every backward in reverse (irecv the output's gradient, backward, isend the input's gradient)."""
    torch.manual_seed(args.seed * 1000 + rank)
    n = stage_blocks(args, rank, world, args.rank if args.fault == "heavy_stage" else None)
    module = nn.Sequential(*[block(args.hidden) for _ in range(n)])
    inject(args, module, rank)
    opt = optimizer(module.parameters())
    m = args.micro_batches
    rows = args.batch // m
    delay = args.strength / 1000 if args.fault == "slow_link" and rank == args.rank else 0.0

    def step_fn(step: int) -> None:
        x, y = batch_for(args, step, 0)
        inputs, outputs, sends = [], [], []
        for mb in range(m):
            if rank == 0:
                inp = x[mb * rows : (mb + 1) * rows].clone()
            else:
                inp = torch.empty(*sample_shape(args, rows))
                dist.irecv(inp, src=rank - 1).wait()
            inp.requires_grad_(rank > 0)
            with autocast():
                out = module(inp).float()  # sent and received as fp32
            if rank < world - 1:
                if delay:
                    time.sleep(delay)
                sends.append(dist.isend(out.detach(), dst=rank + 1))
            inputs.append(inp)
            outputs.append(out)
        for mb in reversed(range(m)):
            if rank == world - 1:
                loss_fn(outputs[mb], y[mb * rows : (mb + 1) * rows]).backward()
            else:
                grad = torch.empty(*sample_shape(args, rows))
                dist.irecv(grad, src=rank + 1).wait()
                outputs[mb].backward(grad)
            if rank > 0:
                if delay:
                    time.sleep(delay)
                sends.append(dist.isend(inputs[mb].grad, dst=rank - 1))
        for work in sends:
            work.wait()
        clip(module.parameters())
        opt.step()
        opt.zero_grad()

    train(args, rank, world, step_fn)


def run_tensor_parallel(args: argparse.Namespace, rank: int, world: int) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", (args.dp, world // args.dp), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(args.seed)
    model = nn.Sequential(*[block(args.hidden, wrap=False) for _ in range(args.blocks)])
    plan = {}
    for i in range(args.blocks):
        plan[f"{i}.0"] = ColwiseParallel()
        plan[f"{i}.2"] = RowwiseParallel()
    model = parallelize_module(model, mesh["tp"], plan)
    if USUAL:  # checkpointed once parallelised (the plan names the blocks' own layers)
        for i in range(args.blocks):
            model[i] = Checkpointed(model[i])
    inject(args, model, rank)
    dp_group = mesh.get_group("dp")
    dp_rank = mesh.get_local_rank("dp")
    opt = optimizer(model.parameters())

    def step_fn(step: int) -> None:
        x, y = batch_for(args, step, dp_rank)
        with autocast():
            loss = loss_fn(model(x), y)
        loss.backward()
        local = [p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad for p in model.parameters()]
        flat = torch.cat([g.reshape(-1) for g in local])
        dist.all_reduce(flat, group=dp_group)
        flat.div_(args.dp)
        offset = 0
        for g in local:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()
        clip(model.parameters())
        opt.step()
        opt.zero_grad()

    train(args, rank, world, step_fn, mesh)


def main(argv: list[str] | None = None) -> None:
    args = options(argv)
    global MODEL
    if args.api == "mesh_dp_tp":  # the tensor-parallel plan names the MLP's layers
        args.model = "mlp"
    MODEL = args.model
    global USUAL
    USUAL = args.recipe == "usual"
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        if args.api in ("ddp", "fsdp1", "fsdp2"):
            run_data_parallel(args, rank, world)
        elif args.api == "isend":
            run_isend(args, rank, world)
        elif args.api == "mesh_dp_tp":
            run_tensor_parallel(args, rank, world)
        else:
            run_pipeline(args, rank, world)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    if rank == 0:
        print(f"job done: {os.listdir(args.out)}", flush=True)
    # The job is done and its traces are written: leave without the interpreter's teardown, in which a rank at
    # times aborts in a C++ destructor ("terminate called without an active exception": a thread still joinable
    # when the process's statics are destroyed; 3 of 6 runs of a DDP job under tcmalloc, about 1 in 40 under
    # jemalloc on a loaded machine, always after "job done").
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
