"""A ResNet-50-like CNN: bottleneck stages [3, 4, 6, 3] on 224x224 images, as (operator, parameters) pairs."""

from __future__ import annotations

from paradiag.simulator.model import BF16, Item, Op

STAGES = ((3, 64), (4, 128), (6, 256), (3, 512))


def _conv(batch: int, cin: int, cout: int, k: int, hw_out: int) -> tuple[Op, int]:
    flops = 2.0 * batch * hw_out * hw_out * cout * cin * k * k
    nbytes = BF16 * (batch * hw_out * hw_out * (cin + cout) + cin * cout * k * k)
    shape = f"{batch},{cin},{hw_out},{hw_out};{cout},{cin},{k},{k}"
    return Op("aten::convolution", "conv", flops, float(nbytes), True, shape), cin * cout * k * k


def _bn_relu(batch: int, channels: int, hw: int, relu: bool = True) -> list[tuple[Op, int]]:
    elements = batch * channels * hw * hw
    out = [
        (
            Op(
                "aten::cudnn_batch_norm",
                "bn",
                8.0 * elements,
                float(BF16 * 3 * elements),
                False,
                str(elements),
            ),
            2 * channels,
        )
    ]
    if relu:
        out.append(
            (Op("aten::relu_", "relu", float(elements), float(BF16 * 2 * elements), False, str(elements)), 0)
        )
    return out


def forward(batch: int) -> list[tuple[Item, int]]:
    """Forward operators with the parameter count each one owns (for gradient buckets)."""
    ops: list[tuple[Item, int]] = [_conv(batch, 3, 64, 7, 112), *_bn_relu(batch, 64, 112)]
    ops.append(
        (
            Op(
                "aten::max_pool2d_with_indices",
                "pool",
                float(batch * 64 * 56 * 56 * 9),
                float(BF16 * batch * 64 * (112 * 112 + 56 * 56)),
                False,
            ),
            0,
        )
    )
    cin, hw = 64, 56
    for index, (blocks, width) in enumerate(STAGES):
        for block in range(blocks):
            out_hw = hw // 2 if (block == 0 and index > 0) else hw
            ops += [_conv(batch, cin, width, 1, hw), *_bn_relu(batch, width, hw)]
            ops += [_conv(batch, width, width, 3, out_hw), *_bn_relu(batch, width, out_hw)]
            ops += [
                _conv(batch, width, 4 * width, 1, out_hw),
                *_bn_relu(batch, 4 * width, out_hw, relu=False),
            ]
            if block == 0:
                ops += [
                    _conv(batch, cin, 4 * width, 1, out_hw),
                    *_bn_relu(batch, 4 * width, out_hw, relu=False),
                ]
            elements = batch * 4 * width * out_hw * out_hw
            ops.append((Op("aten::add_", "add", float(elements), float(BF16 * 3 * elements), False), 0))
            ops.append((Op("aten::relu_", "relu", float(elements), float(BF16 * 2 * elements), False), 0))
            cin, hw = 4 * width, out_hw
    ops.append(
        (
            Op(
                "aten::mm",
                "gemm",
                2.0 * batch * 2048 * 1000,
                float(BF16 * (batch * 2048 + 2048 * 1000)),
                True,
                f"{batch},2048;2048,1000",
            ),
            2048 * 1000,
        )
    )
    ops.append((Op("aten::_log_softmax", "loss", 5.0 * batch * 1000, 8.0 * batch * 1000, False), 0))
    return ops
