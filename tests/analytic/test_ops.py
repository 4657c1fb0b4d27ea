"""dlperf.analytic.ops: every handler called directly on meta tensors, against counts worked
out by hand, and the table's lookups (names, in-place forms, kinds, views)."""

from __future__ import annotations

from typing import Any

import torch

from dlperf.analytic import ops
from dlperf.analytic.ops import HANDLERS, IGNORED, Cost, cost_of, is_view, kind_of, op_name

aten = torch.ops.aten


def t(*shape: int) -> torch.Tensor:
    return torch.empty(*shape, device="meta")


def conv_args(
    x: torch.Tensor, w: torch.Tensor, bias: bool, transposed: bool, groups: int
) -> list[Any]:
    # aten.convolution(input, weight, bias, stride, padding, dilation, transposed,
    #                  output_padding, groups)
    return [
        x,
        w,
        t(w.shape[0]) if bias else None,
        [1, 1],
        [0, 0],
        [1, 1],
        transposed,
        [0, 0],
        groups,
    ]


def test_convolution_counts_every_product_and_the_bias_adds() -> None:
    x, w, out = t(2, 3, 8, 8), t(4, 3, 3, 3), t(2, 4, 6, 6)
    # by hand: 2 images x 36 output positions x 4 filters x 3 channels x 9 taps
    macs = 2 * 36 * 4 * 3 * 9
    assert macs == 7776
    assert ops.convolution(conv_args(x, w, True, False, 1), out) == Cost(macs, 2 * macs + 288)
    assert ops.convolution(conv_args(x, w, False, False, 1), out) == Cost(macs, 2 * macs)


def test_depthwise_and_transposed_convolutions() -> None:
    # depthwise: w[1] is 1, so 8 channels x 9 taps x 9 positions
    out = t(1, 8, 3, 3)
    assert (
        ops.convolution(conv_args(t(1, 8, 5, 5), t(8, 1, 3, 3), False, False, 8), out).macs == 648
    )
    # transposed: one window per *input* position: 9 x 2 in x 4 out x 4 taps
    out = t(1, 4, 6, 6)
    assert ops.convolution(conv_args(t(1, 2, 3, 3), t(2, 4, 2, 2), False, True, 1), out).macs == 288


def test_convolution_backward_counts_what_its_mask_asks_for() -> None:
    grad, x, w = t(2, 4, 6, 6), t(2, 3, 8, 8), t(4, 3, 3, 3)
    forward = 7776

    def args(mask: list[bool]) -> list[Any]:
        # (grad_out, input, weight, bias_sizes, stride, padding, dilation, transposed,
        #  output_padding, groups, output_mask)
        return [grad, x, w, [4], [1, 1], [0, 0], [1, 1], False, [0, 0], 1, mask]

    assert ops.convolution_backward(args([True, True, True]), None) == Cost(
        2 * forward, 4 * forward + grad.numel()
    )
    assert ops.convolution_backward(args([False, True, False]), None) == Cost(forward, 2 * forward)


def test_matrix_products() -> None:
    assert ops.matmul([t(3, 4), t(4, 5)], t(3, 5)) == Cost(60, 120)
    assert ops.matmul([t(2, 3, 4), t(2, 4, 5)], t(2, 3, 5)) == Cost(120, 240)
    # addmm(bias, a, b): the product plus one add per output
    assert ops.add_matmul([t(5), t(3, 4), t(4, 5)], t(3, 5)) == Cost(60, 120 + 15)
    assert ops.vector_product([t(3, 4), t(4)], t(3)) == Cost(12, 24)


def test_attention_counts_both_products_and_the_softmax() -> None:
    q = k = v = t(2, 4, 8, 16)  # batch, heads, length, head dim
    cost = ops.attention([q, k, v], None)
    # q @ k^T: 2*4 x 8x16x8; p @ v: the same; softmax: 5 per score (2*4*8*8 scores)
    products = 2 * 4 * 8 * 16 * 8 * 2
    assert cost == Cost(products, 2 * products + 5 * 2 * 4 * 8 * 8)
    back = ops.attention_backward([t(2, 4, 8, 16), q, k, v], None)
    # the scores recomputed, then d-scores, d-v, d-q and d-k: five products of q @ k^T's size
    assert back.macs == 5 * products // 2
    assert back.flops == 2 * back.macs + 4 * 2 * 4 * 8 * 8


def test_pooling_one_op_per_window_element_per_output() -> None:
    x, out = t(1, 2, 4, 4), t(1, 2, 2, 2)
    assert ops.pool([x, [2, 2]], out) == Cost(0, 4 * 8)
    assert ops.pool([x, [3]], (t(1, 2, 2, 2), t(1, 2, 2, 2))) == Cost(0, 9 * 8)  # 3 -> 3x3
    # avg_pool2d_backward(grad_output, input, kernel, ...): each gradient over its window
    assert ops.pool_backward([t(1, 2, 2, 2), x, [2, 2]], None) == Cost(0, 4 * 8)


def test_normalisation_per_element_costs() -> None:
    x = t(2, 3, 4, 4)  # 96 elements
    n = x.numel()
    batch_norm = HANDLERS["native_batch_norm"]
    affine = [x, t(3), t(3), t(3), t(3)]
    plain = [x, None, None, t(3), t(3)]
    # training: normalise 2 + gamma 1 + beta 1 + statistics 4
    assert batch_norm([*affine, True, 0.1, 1e-5], None) == Cost(0, 8 * n)
    assert batch_norm([*affine, False, 0.1, 1e-5], None) == Cost(0, 4 * n)
    assert batch_norm([*plain, True, 0.1, 1e-5], None) == Cost(0, 6 * n)
    layer_norm = HANDLERS["native_layer_norm"]
    assert layer_norm([x, [4, 4], t(4, 4), None, 1e-5], None) == Cost(0, 7 * n)
    backward = HANDLERS["native_batch_norm_backward"]
    assert backward([x, x, [True, True, True]], None) == Cost(0, 9 * n)
    assert backward([x, x, [True, False, False]], None) == Cost(0, 6 * n)


def test_per_element_conventions() -> None:
    out = t(3, 5)
    assert HANDLERS["relu"]([out], out) == Cost(0, 15)
    assert HANDLERS["_softmax"]([out, 1, False], out) == Cost(0, 5 * 15)
    assert HANDLERS["_softmax_backward_data"]([out, out, 1], out) == Cost(0, 4 * 15)
    assert HANDLERS["native_dropout"]([out, 0.5, True], (out, out)) == Cost(0, 2 * 15)
    assert HANDLERS["var_mean"]([out], (t(3), t(3))) == Cost(0, 4 * 15)
    # bilinear: 4 values weighed per output (4 multiplies, 3 adds); backward 8 per gradient
    assert HANDLERS["upsample_bilinear2d"]([t(1, 1, 2, 2)], t(1, 1, 4, 4)) == Cost(0, 7 * 16)
    assert HANDLERS["upsample_bilinear2d_backward"]([t(1, 1, 4, 4)], None) == Cost(0, 8 * 16)
    assert ops.index_put([t(10), [t(4)], t(4), True], None) == Cost(0, 4)
    assert ops.index_put([t(10), [t(4)], t(4), False], None) == Cost(0, 0)
    assert ops.index_put([t(10), [t(4)], t(4)], None) == Cost(0, 0)


def test_kind_of() -> None:
    dense = conv_args(t(1, 8, 5, 5), t(8, 4, 3, 3), False, False, 2)  # groups of 4 channels
    depthwise = conv_args(t(1, 8, 5, 5), t(8, 1, 3, 3), False, False, 8)
    assert kind_of("convolution", dense) == "conv"
    assert kind_of("_convolution", depthwise) == "depthwise_conv"
    backward = [None, None, t(8, 1, 3, 3), None, None, None, None, False, None, 8, None]
    assert kind_of("convolution_backward", backward) == "depthwise_conv_backward"
    backward[9] = 1
    assert kind_of("convolution_backward", backward) == "conv_backward"
    assert kind_of("addmm", []) == kind_of("_scaled_dot_product_flash_attention", []) == "matmul"
    assert kind_of("max_pool2d_with_indices_backward", []) == "pool"
    assert kind_of("native_layer_norm_backward", []) == "norm"
    assert kind_of("relu", []) == "other"


def test_the_table_is_consistent() -> None:
    assert not HANDLERS.keys() & IGNORED  # an op is counted or ignored, never both
    assert HANDLERS.keys() >= ops.CONVOLUTIONS
    assert {
        "mm", "addmm", "bmm", "baddbmm", "mv", "dot", "vdot",
        *(n for n in HANDLERS if n.startswith("_scaled_dot_product")),
    } == ops.MATMULS  # fmt: skip


def test_op_name_and_cost_of_real_aten_calls() -> None:
    assert op_name(aten.add_.Tensor) == "add"  # in place costs what out of place does
    assert op_name(aten.copy_.default) == "copy_"  # "copy" has no handler: the name stays
    x = t(2, 3)
    assert cost_of(aten.add_.Tensor, [x, x], x) == Cost(0, 6)
    assert cost_of(aten.view.default, [x, [6]], t(6)) == Cost(0, 0)  # ignored: no arithmetic
    assert cost_of(aten.linalg_eigh.default, [x], None) is None  # unsupported: reported
    assert cost_of(torch.ops.prims.add.default, [x, x], x) is None  # not aten


def test_is_view() -> None:
    assert is_view(aten.view.default)
    assert is_view(aten._unsafe_view.default)  # aliases without its schema saying so
    assert not is_view(aten.add.Tensor)
    assert not is_view(aten.clone.default)
