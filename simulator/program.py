"""The per-rank, per-step program: what the host thread launches, in order.

Instructions are tuples (cheap to build by the hundred thousand):

* ``("K", op)``: a compute kernel (an :class:`~paradiag.simulator.model.Op`) on the compute stream
* ``("C", coll, sync)``: a collective of the rank's ``coll.role`` group; ``sync``: compute waits for it
* ``("S", peer, nelems, tag)`` / ``("R", peer, nelems, tag)``: pipeline send / receive (tag matches the pair)
* ``("H", name, category, us)``: host-only work (data loading, ...)
* ``("M", nbytes)``: host-to-device copy of the batch
* ``("Y", role)``: the host waits for the device (role None: every stream)
* ``("W", role)``: the compute stream waits for the ``role`` communication stream
* ``("A", name)`` / ``("Z",)``: a host annotation range opens / closes
* ``("T", thread)``: the host work that follows runs on ``thread`` (``main``, or ``autograd``: the backward pass of
  a GPU job under PyTorch 2.x, whose autograd engine runs it on its own thread; torch2 shape only)
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from paradiag.simulator import model, resnet, schedule
from paradiag.simulator.job import Job
from paradiag.simulator.model import Coll, Dims, Item, Op

Instr = tuple[Any, ...]
DATA_LOADER = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
OPTIMIZER = "Optimizer.step#FusedAdam.step"
BUCKET_PARAMS = 40_000_000  # Megatron's default gradient bucket
DDP_BUCKET_PARAMS = 25 * 1024 * 1024 // 4  # DDP's 25 MB of fp32 gradients


def _kernels(items: list[Item]) -> list[Instr]:
    return [("K", i) if isinstance(i, Op) else ("C", i, True) for i in items]


def _optimizer(params: int) -> list[Instr]:
    per_kernel = params * 16 / 4
    return [
        ("A", OPTIMIZER),
        *[("K", Op("aten::_fused_adamw_", "optimizer", params / 4 * 10, per_kernel)) for _ in range(4)],
        ("Z",),
    ]


@lru_cache(maxsize=64)
def _dense_layer(d: Dims) -> tuple[list[Item], list[Item]]:
    forward = model.attention_block(d) + model.mlp_block(d)
    return forward, model.backward(forward)


def _layer(job: Job, d: Dims, layer: int, rank: int, step: int) -> tuple[list[Item], list[Item]]:
    if not job.is_moe(layer):
        return _dense_layer(d)
    sent, received = job.expert_tokens(rank, step, d.tokens)
    forward = model.attention_block(d) + model.moe_block(d, job.cfg.num_experts, sent, received)
    return forward, model.backward(forward)


def _dims(job: Job) -> Dims:
    c = job.cfg
    return Dims(c.micro_batch_size * c.seq_len, c.seq_len, c.micro_batch_size, c.hidden, c.tp, c.vocab)


def _chunk(
    job: Job, d: Dims, g: int, rank: int, step: int
) -> tuple[list[Item], list[list[Item]], list[int], list[list[Item]]]:
    """Forward items of global chunk ``g``, backward items per layer (backward order), params per layer (backward
    order), and the forward items per layer (forward order: embedding, layers, head)."""
    layers = job.chunk_layers[g]
    forward: list[Item] = model.embedding(d) if g == 0 else []
    units: list[list[Item]] = [model.embedding(d)] if g == 0 else []
    backward_layers: list[list[Item]] = []
    params: list[int] = []
    for layer in layers:
        f, b = _layer(job, d, layer, rank, step)
        forward += f
        units.append(f)
        backward_layers.append(b)
        params.append(model.layer_params(d.hidden, d.tp))
    if g == job.chunks - 1:
        forward += model.head(d)
        units.append(model.head(d))
        backward_layers.append(model.backward(model.head(d)))
        params.append(d.vocab * d.hidden // d.tp)
    backward_layers.reverse()
    params.reverse()
    if g == 0:
        backward_layers.append(model.backward(model.embedding(d)))
        params.append(d.vocab * d.hidden // d.tp)
    return forward, backward_layers, params, units


def _gradients(layers: list[list[Item]], weights: bool) -> list[list[Item]]:
    """A zero-bubble schedule's half of each layer's backward: the weights' gradient kernels (``weights``), else
    the rest (the inputs' gradients and the layer's collectives)."""
    return [
        [i for i in items if (isinstance(i, Op) and i.family.endswith("_wgrad")) == weights]
        for items in layers
    ]


def _backward_with_buckets(
    layers: list[list[Item]], params: list[int], reduce: bool, bucket: int = BUCKET_PARAMS
) -> list[Instr]:
    """Backward kernels, with a data-parallel gradient all-reduce launched as each bucket of gradients is ready
    (it overlaps the rest of the backward pass, as DDP and Megatron do)."""
    out: list[Instr] = []
    pending = 0
    for i, (items, n) in enumerate(zip(layers, params, strict=True)):
        out += _kernels(items)
        pending += n
        if reduce and pending and (pending >= bucket or i == len(layers) - 1):
            out.append(("C", Coll("allreduce", "dp", pending, pending, "Float"), False))
            pending = 0
    return out


def _fsdp_pass(layers: list[list[Item]], params: list[int], dp: int, reduce: bool) -> list[Instr]:
    """One FSDP2 pass: each layer's parameters all-gathered over the data-parallel group before it runs, the next
    layer's gather issued (prefetched) before this layer computes; in the backward (``reduce``, on the last
    micro-batch only, as with gradient accumulation) each layer's gradients reduce-scattered once it is done."""
    out: list[Instr] = [("C", Coll("_allgather_base", "dp", params[0] // dp, params[0], "BFloat16"), False)]
    for i, items in enumerate(layers):
        out.append(("W", "dp"))
        if i + 1 < len(layers):
            out.append(
                ("C", Coll("_allgather_base", "dp", params[i + 1] // dp, params[i + 1], "BFloat16"), False)
            )
        out += _kernels(items)
        if reduce:
            out.append(("C", Coll("_reduce_scatter_base", "dp", params[i], params[i] // dp, "Float"), False))
    return out


def _backward(job: Job, items: list[Instr]) -> list[Instr]:
    """A backward pass; under the torch2 shape a GPU job runs it on the autograd engine's thread."""
    if job.cfg.torch2 and not job.cfg.cpu:
        return [("T", "autograd"), *items, ("T", "main")]
    return items


def llm(job: Job, rank: int, step: int) -> list[Instr]:
    """One training step of a transformer LLM on ``rank``: data, the pipeline schedule, gradients, optimizer."""
    cfg, mesh, d = job.cfg, job.mesh, _dims(job)
    stage, pp, m, last = mesh.stage(rank), cfg.pp, cfg.num_microbatches, job.chunks - 1
    act = d.tokens * d.hidden // d.tp
    prog: list[Instr] = [("H", DATA_LOADER, "user_annotation", 250.0)]
    if stage in (0, pp - 1):
        if cfg.tp > 1:
            prog.append(("C", Coll("broadcast", "tp", d.tokens * 2, d.tokens * 2, "Long"), True))
        prog.append(("M", d.tokens * 8 * 2))
    chunks: dict[int, Any] = {}
    fsdp = cfg.torch2 and cfg.dp_mode == "fsdp" and cfg.dp > 1
    total_params = 0
    for c in range(cfg.virtual_stages):
        g = schedule.chunk_of(cfg.schedule, pp, stage, c)
        chunks[g] = _chunk(job, d, g, rank, step)
        total_params += sum(chunks[g][2])
    # torch.distributed.pipelining's multi-stage schedules (several chunks a stage, or the zero-bubble ones) name
    # each action on the host: "PP:{stage}F{mb}" (B: a whole backward; I and W: its inputs' and its weights'
    # gradients), around its compute (its receive and send are actions of their own).
    named = cfg.torch2 and (cfg.virtual_stages > 1 or cfg.schedule in schedule.ZERO_BUBBLE)

    def peer(g: int) -> int | None:
        """The rank that holds chunk ``g`` in this pipeline; None where it is this rank (a V's turn)."""
        there = schedule.holder(cfg.schedule, pp, g)
        return None if there == stage else mesh.stage_rank(rank, there)

    for phase, mb, c in schedule.order(cfg.schedule, pp, stage, m, cfg.virtual_stages):
        g = schedule.chunk_of(cfg.schedule, pp, stage, c)
        forward, backward_layers, params, units = chunks[g]
        source = peer(g - 1) if phase == "F" and g > 0 else peer(g + 1) if phase != "F" and g < last else None
        # A multi-stage schedule's sends and receives are actions of their own: "PP:{stage}RECV_F{mb}" around the
        # c10d call that posts a receive (its wait is the compute action's), "PP:{stage}SEND_B{mb}" a send's.
        direction = "F" if phase == "F" else "B"
        if source is not None and phase != "W":
            recv: list[Instr] = [("R", source, act, (int(phase != "F"), mb, g))]
            if named:
                recv = [("A", f"PP:{g}RECV_{direction}{mb}"), *recv, ("Z",)]
            prog += [*recv, ("Y", "pp")]
        if named:
            prog.append(("A", f"PP:{g}{phase}{mb}"))
        reduce = cfg.dp > 1 and mb == m - 1 and phase in "BW"
        if phase == "F":
            prog += _fsdp_pass(units, params[::-1], cfg.dp, False) if fsdp else _kernels(forward)
        else:
            layers = backward_layers if phase == "B" else _gradients(backward_layers, phase == "W")
            prog += _backward(
                job,
                _fsdp_pass(layers, params, cfg.dp, reduce)
                if fsdp
                else _backward_with_buckets(layers, params, reduce),
            )
        if named:
            prog.append(("Z",))
        target = (
            peer(g + 1) if phase == "F" and g < last else peer(g - 1) if phase in "BI" and g > 0 else None
        )
        if target is not None:
            send: list[Instr] = [
                ("S", target, act, (int(phase != "F"), mb, g + 1 if phase == "F" else g - 1))
            ]
            if named:
                send = [("A", f"PP:{g}SEND_{direction}{mb}"), *send, ("Z",)]
            prog += send
    if cfg.dp > 1:
        prog.append(("W", "dp"))
    return [*prog, *_optimizer(total_params), ("Y", None)]


@lru_cache(maxsize=4)
def _resnet_ops(batch: int) -> tuple[list[Item], list[list[Item]], list[int]]:
    pairs = resnet.forward(batch)
    forward = [op for op, _ in pairs]
    backward_layers = [model.backward([op]) for op, _ in reversed(pairs)]
    return forward, backward_layers, [n for _, n in reversed(pairs)]


def cnn(job: Job, rank: int, step: int) -> list[Instr]:
    """One data-parallel step of ResNet-50: load, copy, forward, backward with DDP buckets, optimizer."""
    batch = job.cfg.image_batch
    forward, backward_layers, params = _resnet_ops(batch)
    prog: list[Instr] = [("H", DATA_LOADER, "user_annotation", 1800.0), ("M", batch * 3 * 224 * 224 * 2)]
    prog += _kernels(forward)
    reduce = job.cfg.dp > 1
    prog += _backward(job, _backward_with_buckets(backward_layers, params, reduce, DDP_BUCKET_PARAMS))
    if reduce:
        prog.append(("W", "dp"))
    return [*prog, *_optimizer(sum(params)), ("Y", None)]


def build(job: Job, rank: int, step: int) -> list[Instr]:
    return llm(job, rank, step) if job.cfg.model == "llm" else cnn(job, rank, step)
