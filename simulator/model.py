"""The models: layers made of operators with FLOPs and bytes, and the collectives inside them.

A layer is a list of items, each an :class:`Op` (a kernel on the compute stream) or a :class:`Coll` (a collective
of the layer's tensor- or expert-parallel group). Backward items are built from the forward ones.
"""

from __future__ import annotations

from dataclasses import dataclass

BF16 = 2


@dataclass(frozen=True, slots=True)
class Op:
    """One operator: the host op that launches it, its kernel family, and its cost."""

    aten: str
    family: str
    flops: float
    nbytes: float
    dense: bool = False
    shape: str = ""


@dataclass(frozen=True, slots=True)
class Coll:
    """A collective inside a layer, on the group of role ``role`` (tp or ep)."""

    collective: str
    role: str
    in_nelems: int
    out_nelems: int
    dtype: str = "BFloat16"


Item = Op | Coll


@dataclass(frozen=True)
class Dims:
    """Shapes of one LLM micro-batch on one rank."""

    tokens: int  # micro-batch size x sequence length
    seq: int
    batch: int
    hidden: int
    tp: int
    vocab: int


def _gemm(name: str, m: int, k: int, n: int, family: str = "gemm") -> Op:
    return Op(name, family, 2.0 * m * k * n, BF16 * (m * k + k * n + m * n), True, f"{m},{k};{k},{n}")


def _elementwise(name: str, family: str, elements: int, tensors: int = 3) -> Op:
    return Op(name, family, float(elements), float(BF16 * elements * tensors), False, str(elements))


def _sp_gather(d: Dims) -> list[Item]:
    full = d.tokens * d.hidden
    return [Coll("_allgather_base", "tp", full // d.tp, full)] if d.tp > 1 else []


def _sp_scatter(d: Dims) -> list[Item]:
    full = d.tokens * d.hidden
    return [Coll("_reduce_scatter_base", "tp", full, full // d.tp)] if d.tp > 1 else []


def attention_block(d: Dims) -> list[Item]:
    h, t, local = d.hidden, d.tp, d.tokens * d.hidden // d.tp
    flash = Op(
        "aten::_flash_attention_forward",
        "attention",
        2.0 * d.batch * d.seq * d.seq * h / t,
        float(BF16 * 4 * d.tokens * h // t),
        True,
        f"{d.batch},{d.seq},{h // t}",
    )
    return [
        _elementwise("aten::native_layer_norm", "norm", local, 2),
        *_sp_gather(d),
        _gemm("aten::mm", d.tokens, h, 3 * h // t),
        flash,
        _gemm("aten::mm", d.tokens, h // t, h),
        *_sp_scatter(d),
        _elementwise("aten::add", "add", local),
    ]


def mlp_block(d: Dims) -> list[Item]:
    h, t, local = d.hidden, d.tp, d.tokens * d.hidden // d.tp
    return [
        _elementwise("aten::native_layer_norm", "norm", local, 2),
        *_sp_gather(d),
        _gemm("aten::mm", d.tokens, h, 4 * h // t),
        _elementwise("aten::gelu", "gelu", d.tokens * 4 * h // t, 2),
        _gemm("aten::mm", d.tokens, 4 * h // t, h),
        *_sp_scatter(d),
        _elementwise("aten::add", "add", local),
    ]


def moe_block(d: Dims, experts: int, tokens_in: int, tokens_out: int) -> list[Item]:
    """Router, dispatch all-to-all, this rank's experts on the tokens it received, combine all-to-all.
    ``tokens_in`` is what the rank sends (top-2 routed), ``tokens_out`` what it receives and computes."""
    h, t, local = d.hidden, d.tp, d.tokens * d.hidden // d.tp
    return [
        _elementwise("aten::native_layer_norm", "norm", local, 2),
        _gemm("aten::mm", d.tokens, h, experts),
        _elementwise("aten::topk", "router", d.tokens * experts, 2),
        Coll("alltoall_base", "ep", tokens_in * h // t, tokens_out * h // t),
        _gemm("aten::mm", tokens_out, h, 4 * h // t),
        _elementwise("aten::gelu", "gelu", tokens_out * 4 * h // t, 2),
        _gemm("aten::mm", tokens_out, 4 * h // t, h),
        Coll("alltoall_base", "ep", tokens_out * h // t, tokens_in * h // t),
        _elementwise("aten::add", "add", local),
    ]


def embedding(d: Dims) -> list[Item]:
    return [
        Op(
            "aten::embedding",
            "embedding",
            0.0,
            float(BF16 * 2 * d.tokens * d.hidden),
            False,
            f"{d.vocab // d.tp},{d.hidden}",
        )
    ]


def head(d: Dims) -> list[Item]:
    logits = d.tokens * d.vocab // d.tp
    items: list[Item] = [_gemm("aten::mm", d.tokens, d.hidden, d.vocab // d.tp)]
    items.append(Op("aten::_log_softmax", "loss", 5.0 * logits, 4.0 * 2 * logits, False, str(logits)))
    if d.tp > 1:
        items.append(Coll("allreduce", "tp", d.tokens, d.tokens, "Float"))
    return items


_BACKWARD_NAMES = {
    "aten::mm": None,
    "aten::_flash_attention_forward": "aten::_flash_attention_backward",
    "aten::native_layer_norm": "aten::native_layer_norm_backward",
    "aten::gelu": "aten::gelu_backward",
    "aten::embedding": "aten::embedding_dense_backward",
    "aten::_log_softmax": "aten::_log_softmax_backward_data",
    "aten::convolution": None,
    "aten::cudnn_batch_norm": "aten::cudnn_batch_norm_backward",
    "aten::relu_": "aten::threshold_backward",
    "aten::max_pool2d_with_indices": "aten::max_pool2d_with_indices_backward",
    "aten::topk": "aten::scatter_add_",
}
_MIRROR = {
    "_allgather_base": "_reduce_scatter_base",
    "_reduce_scatter_base": "_allgather_base",
    "alltoall_base": "alltoall_base",
}


def backward(items: list[Item]) -> list[Item]:
    """The backward pass of ``items``: reversed, GEMMs and convolutions split into data- and weight-gradient
    kernels, attention backward at 2.5x its forward, the sequence-parallel collectives mirrored."""
    out: list[Item] = []
    for item in reversed(items):
        if isinstance(item, Coll):
            if item.collective in _MIRROR:
                out.append(
                    Coll(_MIRROR[item.collective], item.role, item.out_nelems, item.in_nelems, item.dtype)
                )
            continue
        if item.family in ("gemm", "conv"):
            out.append(Op(item.aten, item.family + "_dgrad", item.flops, item.nbytes, True, item.shape))
            out.append(Op(item.aten, item.family + "_wgrad", item.flops, item.nbytes, True, item.shape))
            continue
        if item.family == "add":
            continue  # the gradient of a residual add is a pass-through
        name = _BACKWARD_NAMES.get(item.aten) or item.aten
        factor = 2.5 if item.family == "attention" else 1.5
        family = {"router": "add", "pool": "relu"}.get(item.family, item.family + "_bwd")
        out.append(Op(name, family, item.flops * factor, item.nbytes * 1.5, item.dense, item.shape))
    return out


def layer_params(hidden: int, tp: int) -> int:
    """Parameters of one dense transformer layer on one tensor-parallel rank."""
    return 12 * hidden * hidden // tp
