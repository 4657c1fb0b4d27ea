"""Operator -> cost handlers: the table the counting engine looks every ATen call up in.

Units are in the names. A MAC is one multiply-accumulate (convolutions, matrix products,
attention); `flops` counts every floating-point operation, so an op's flops are
2 * macs plus its additions that are not part of a multiply-accumulate (bias, residuals).
Conventions for the ops that are not multiply-accumulates, one number per output (or
input) element, are the constants below; docs/analyze.md lists them.

An operator is either in HANDLERS, in IGNORED (views, copies, creation, indexing: no
arithmetic), one of the MARKERS outside ATen (the profiler's: no work at all), or reported by
name as unsupported. Nothing is silently counted as zero.

On complex tensors an operator's cost is in real operations (`in_real_arithmetic`): a complex
multiply-accumulate is COMPLEX_MAC real ones, element-wise ops cost COMPLEX_ELEMENTWISE; an
operator with no complex rule is reported "on complex tensors", not counted as if real.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from math import prod
from typing import Any, NamedTuple

import torch

# torch's flop counter imports triton where torch is a CUDA build and, when that fails (triton
# missing, or its import refused by a memory limit, `ulimit -v`), logs "triton not found;
# flop counting will not work for triton kernels" before dlperf's own line or answer. dlperf
# counts with its own handlers, never triton kernels: the warning is quieted for the import.
_FLOP_COUNTER_LOG = logging.getLogger("torch.utils.flop_counter")
_quiet = _FLOP_COUNTER_LOG.disabled
_FLOP_COUNTER_LOG.disabled = True
try:
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count
finally:
    _FLOP_COUNTER_LOG.disabled = _quiet


class Cost(NamedTuple):
    macs: int
    flops: int


Handler = Callable[[Sequence[Any], Any], Cost]
"""(positional args of the ATen call, its output) -> Cost."""

# FLOPs per element of the ops that are not multiply-accumulates.
ELEMENTWISE = 1
"""Any element-wise op (add, mul, relu, exp, sigmoid, gelu, compare, their backward)."""
NORMALIZE = 2
"""(x - mean) * rstd with given statistics (batch norm in eval); the affine weight (gamma)
and bias (beta), where the layer has them, add one FLOP each."""
NORM_STATS = 4
"""Computing mean (1 add) and variance (subtract, square, add) of each element."""
NORM_BACKWARD = 6
"""Recompute x-hat (2) and d-input (4); d-gamma (2) and d-beta (1) where they are computed."""
INTERPOLATE = {"upsample_linear1d": 2, "upsample_bilinear2d": 4, "upsample_trilinear3d": 8,
               "upsample_bicubic2d": 16}  # fmt: skip
"""Input values each output of an interpolating upsampling weighs: a weighted sum of n values
is n multiplies and n - 1 adds; its backward spreads each output's gradient over them
(n multiplies, n adds)."""
SOFTMAX = 5
"""max (1), subtract (1), exp (1), sum (1), divide (1); log-softmax alike."""
SOFTMAX_BACKWARD = 4
"""dx = y * (dy - sum(dy * y)): multiply, sum, subtract, multiply."""
PRELU_BACKWARD = 2
"""d-input (1, as leaky ReLU's backward) and d-slope's product x * dy (1) per element; the
sum of those products over each slope's elements is an op of its own (`sum`)."""
WEIGHT_NORM = (3, 1)
"""weight_norm's w = v * (g / ||v||), per row of v (its elements but those along `dim`):
FLOPs per element of v (the norm's square and add, as linalg_vector_norm counts it, and the
multiply) and per row (g / norm)."""
WEIGHT_NORM_BACKWARD = (5, 3)
"""Its backward, grad_g = sum(grad_w * v) / norm and grad_v = g / norm * (grad_w - v * grad_g /
norm): per element of v a multiply and an add for the sum, a multiply, a subtract and a
multiply for grad_v; per row three divides (grad_g, g / norm, grad_g / norm)."""


def _numel(t: Any) -> int:
    return t.numel() if isinstance(t, torch.Tensor) else 0


def _first(out: Any) -> torch.Tensor:
    first: torch.Tensor = out[0] if isinstance(out, tuple | list) else out
    return first


def _mac_only(macs: int, extra_flops: int = 0) -> Cost:
    return Cost(macs, 2 * macs + extra_flops)


# --- multiply-accumulate ops -------------------------------------------------------------


def conv_macs(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, transposed: bool) -> int:
    """Every input x weight product: N * positions * w[0] * w[1] * kernel.

    w[1] is already in_channels / groups (or out_channels / groups when transposed), so
    grouped and depthwise convolutions need no special case. A plain convolution computes
    one kernel window per *output* position, a transposed one per *input* position.
    """
    positions = prod((x if transposed else out).shape[2:])
    return x.shape[0] * positions * w.shape[0] * w.shape[1] * prod(w.shape[2:])


def convolution(args: Sequence[Any], out: Any) -> Cost:
    x, w, bias, *_ = args
    transposed = bool(args[6])
    bias_adds = out.numel() if bias is not None else 0
    return _mac_only(conv_macs(x, w, out, transposed), bias_adds)


def convolution_backward(args: Sequence[Any], out: Any) -> Cost:
    """d-input and d-weight each take exactly the forward's products; d-bias sums dy.

    `x` is the forward's input and `grad_out` has its output's shape, transposed or not,
    so the forward's products are conv_macs(x, w, grad_out): a transposed convolution's
    at its input positions. (torch.utils.flop_counter counts d-weight `groups` times too
    often for grouped convolutions; this handler does not.)
    """
    grad_out, x, w = args[:3]
    transposed, mask = bool(args[7]), args[10]
    macs = conv_macs(x, w, grad_out, transposed) * (int(mask[0]) + int(mask[1]))
    return _mac_only(macs, grad_out.numel() if mask[2] else 0)


def matmul(args: Sequence[Any], out: Any) -> Cost:
    """mm and bmm: a (..., n, k) @ b (..., k, m) takes n * k * m products per batch entry."""
    a, b = args[0], args[1]
    return _mac_only(prod(a.shape) * b.shape[-1])


def add_matmul(args: Sequence[Any], out: Any) -> Cost:
    """addmm and baddbmm: the product of arguments 1 and 2, plus one add per output."""
    return _mac_only(matmul(args[1:], out).macs, out.numel())


def vector_product(args: Sequence[Any], out: Any) -> Cost:
    """mv, dot and vdot (dot with the first argument conjugated, which costs nothing: a complex
    one is counted as dot's complex products): one product per element of the first argument."""
    return _mac_only(args[0].numel())


def attention(args: Sequence[Any], out: Any) -> Cost:
    """Fused scaled-dot-product attention: q @ k^T and p @ v, plus the softmax."""
    q, k, v = args[:3]
    macs = sdpa_flop_count(q.shape, k.shape, v.shape) // 2  # type: ignore[no-untyped-call]
    scores = q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2]
    return _mac_only(macs, SOFTMAX * scores)


def attention_backward(args: Sequence[Any], out: Any) -> Cost:
    grad, q, k, v = args[:4]
    macs = sdpa_backward_flop_count(grad.shape, q.shape, k.shape, v.shape) // 2  # type: ignore[no-untyped-call]
    scores = q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2]
    return _mac_only(macs, SOFTMAX_BACKWARD * scores)


# --- everything else, per element ---------------------------------------------------------


def per_output(flops_per_element: int) -> Handler:
    def handler(args: Sequence[Any], out: Any) -> Cost:
        return Cost(0, flops_per_element * _numel(_first(out)))

    return handler


def per_input(flops_per_element: int) -> Handler:
    def handler(args: Sequence[Any], out: Any) -> Cost:
        return Cost(0, flops_per_element * _numel(args[0]))

    return handler


def _window(args: Sequence[Any]) -> int:
    kernel = args[1]
    return prod(kernel) if len(kernel) > 1 else kernel[0] ** (args[0].dim() - 2)


def pool(args: Sequence[Any], out: Any) -> Cost:
    """Max or average pooling: one compare or add per window element per output."""
    return Cost(0, _window(args) * _first(out).numel())


def pool_backward(args: Sequence[Any], out: Any) -> Cost:
    """avg_pool backward: each output gradient is spread over its window."""
    return Cost(0, _window(args[1:]) * args[0].numel())


def _adaptive_windows(x: Any, pooled: Any, dims: int) -> int:
    """The input elements all windows of an adaptive pool of tensor `x` to tensor `pooled`
    over the last `dims` dimensions hold, one per window element per output. Window i of
    n_out over n_in spans floor(i * n_in / n_out) to ceil((i + 1) * n_in / n_out): they
    overlap where n_out does not divide n_in (the 6 windows over 7 read 2 each), and one per
    input element undercounted them (AdaptiveAvgPool2d(6) on 7x7: 49
    for the 144 its equal AvgPool2d(2, 1) counts)."""
    sides = zip(x.shape[-dims:], pooled.shape[-dims:], strict=True)
    read = [
        sum(-(-(i + 1) * n_in // n_out) - i * n_in // n_out for i in range(n_out))
        for n_in, n_out in sides
    ]
    return int(prod(pooled.shape[:-dims]) * prod(read))


def adaptive_pool(dims: int) -> Handler:
    """Adaptive average or max pooling over `dims` dimensions: one add or compare per window
    element per output, as a window pool's."""

    def handler(args: Sequence[Any], out: Any) -> Cost:
        return Cost(0, _adaptive_windows(args[0], _first(out), dims))

    return handler


def adaptive_pool_backward(dims: int) -> Handler:
    """Adaptive average pooling's backward (grad_output, input): each output's gradient spread
    over its window, as avg_pool's backward."""

    def handler(args: Sequence[Any], out: Any) -> Cost:
        return Cost(0, _adaptive_windows(args[1], args[0], dims))

    return handler


max_pool_backward = per_input(ELEMENTWISE)
"""A window max pool's backward (grad_output, input, ...): each output's gradient added into
the input position its max came from, one add per output gradient."""
MAX_POOL_BACKWARD = (
    "max_pool2d_with_indices_backward",
    "max_pool3d_with_indices_backward",
    "fractional_max_pool2d_backward",
    "fractional_max_pool3d_backward",
)


def _affine(args: Sequence[Any], weight_at: int) -> int:
    """How many of the affine weight and bias (arguments weight_at, weight_at + 1) are given:
    a layer built with affine=False has neither."""
    return sum(args[i] is not None for i in (weight_at, weight_at + 1))


def normalisation(weight_at: int, stats: bool | None) -> Handler:
    """A norm whose affine weight is argument `weight_at`, computing its statistics or not;
    None: when training, as native_batch_norm(input, weight, bias, running_mean, running_var,
    training, ...) says."""

    def handler(args: Sequence[Any], out: Any) -> Cost:
        computes = bool(args[5]) if stats is None else stats
        per_element = NORMALIZE + _affine(args, weight_at) + NORM_STATS * computes
        return Cost(0, per_element * args[0].numel())

    return handler


def norm_backward(args: Sequence[Any], out: Any) -> Cost:
    """A norm's backward; its last argument, output_mask, says whether d-gamma and d-beta are
    computed (not for a layer without them)."""
    mask = args[-1]
    return Cost(0, (NORM_BACKWARD + 2 * bool(mask[1]) + bool(mask[2])) * args[0].numel())


def weight_norm(per_element: int, per_row: int, v_at: int) -> Handler:
    """_weight_norm_interface(v, g, dim) and its backward(grad_w, v, g, norms, dim): FLOPs per
    element of v (argument `v_at`) and per row, g's elements (argument `v_at` + 1).
    torch.utils.flop_counter counts neither (no matrix product)."""

    def handler(args: Sequence[Any], out: Any) -> Cost:
        return Cost(0, per_element * args[v_at].numel() + per_row * args[v_at + 1].numel())

    return handler


def index_put(args: Sequence[Any], out: Any) -> Cost:
    """index_put(self, indices, values, accumulate): an add per value when accumulating
    (the backward of indexing, e.g. Swin's relative position bias)."""
    accumulate = len(args) > 3 and bool(args[3])
    return Cost(0, args[2].numel() if accumulate else 0)


def scatter(args: Sequence[Any], out: Any) -> Cost:
    """scatter(self, dim, index, src or value[, reduce]): a copy of one value per index element,
    no FLOPs, unless `reduce` (add, multiply) makes it one op per index element."""
    reduces = len(args) > 4 and args[4] is not None
    return Cost(0, args[2].numel() if reduces else 0)


def scatter_reduce(args: Sequence[Any], out: Any) -> Cost:
    """scatter_add(self, dim, index, src) and scatter_reduce(..., reduce): one add (multiply,
    compare) per index element, the src values it brings in; "mean" then divides every
    element of the output by its count."""
    mean = len(args) > 4 and args[4] == "mean"
    return Cost(0, args[2].numel() + (_first(out).numel() if mean else 0))


def index_add(args: Sequence[Any], out: Any) -> Cost:
    """index_add(self, dim, index, source, alpha): one add per source element (alpha's scaling
    counted in it, as add's alpha is)."""
    return Cost(0, args[3].numel())


def col2im(args: Sequence[Any], out: Any) -> Cost:
    """col2im(columns, output_size, kernel_size, dilation, padding, stride), nn.Fold and
    nn.Unfold's backward: one add per column value that lands in the image, overlapping
    blocks summed (those in the padding are dropped). Not a copy as im2col is: it was counted
    0, and a Fold of overlapping blocks computed nothing."""
    columns, size, kernel, dilation, padding, stride = args[:6]
    landing = 1
    for side, k, d, p, s in zip(size, kernel, dilation, padding, stride, strict=True):
        blocks = (side + 2 * p - d * (k - 1) - 1) // s + 1
        landing *= sum(0 <= b * s - p + i * d < side for b in range(blocks) for i in range(k))
    channels = columns.shape[-2] // prod(kernel)
    return Cost(0, prod(columns.shape[:-2]) * channels * landing)


HANDLERS: dict[str, Handler] = {
    "convolution": convolution,
    "_convolution": convolution,
    "convolution_backward": convolution_backward,
    "mm": matmul,
    "addmm": add_matmul,
    "bmm": matmul,
    "baddbmm": add_matmul,
    "mv": vector_product,
    "dot": vector_product,
    "vdot": vector_product,  # parametrizations.spectral_norm's sigma
    "_scaled_dot_product_flash_attention_for_cpu": attention,
    "_scaled_dot_product_flash_attention": attention,
    "_scaled_dot_product_efficient_attention": attention,
    "_scaled_dot_product_cudnn_attention": attention,
    "_scaled_dot_product_flash_attention_for_cpu_backward": attention_backward,
    "_scaled_dot_product_flash_attention_backward": attention_backward,
    "_scaled_dot_product_efficient_attention_backward": attention_backward,
    "_scaled_dot_product_cudnn_attention_backward": attention_backward,
    # normalisation
    "native_batch_norm": normalisation(1, stats=None),
    "_native_batch_norm_legit": normalisation(1, stats=True),
    "_native_batch_norm_legit_no_training": normalisation(1, stats=False),
    "native_layer_norm": normalisation(2, stats=True),
    "native_group_norm": normalisation(1, stats=True),
    "native_batch_norm_backward": norm_backward,
    "native_layer_norm_backward": norm_backward,
    "native_group_norm_backward": norm_backward,
    "_weight_norm_interface": weight_norm(*WEIGHT_NORM, v_at=0),
    "_weight_norm_interface_backward": weight_norm(*WEIGHT_NORM_BACKWARD, v_at=1),
    # softmax
    "_softmax": per_output(SOFTMAX),
    "_safe_softmax": per_output(SOFTMAX),
    "_log_softmax": per_output(SOFTMAX),
    "_softmax_backward_data": per_output(SOFTMAX_BACKWARD),
    "_log_softmax_backward_data": per_output(SOFTMAX_BACKWARD),
    # pooling and reductions: every pool's backward beside its forward (LocalResponseNorm
    # runs avg_pool3d and its backward)
    "max_pool2d_with_indices": pool,
    "max_pool3d_with_indices": pool,
    "max_pool2d": pool,
    "fractional_max_pool2d": pool,
    "fractional_max_pool3d": pool,
    "avg_pool2d": pool,
    "avg_pool3d": pool,
    "avg_pool2d_backward": pool_backward,
    "avg_pool3d_backward": pool_backward,
    **dict.fromkeys(MAX_POOL_BACKWARD, max_pool_backward),
    "_adaptive_avg_pool2d": adaptive_pool(2),
    "_adaptive_avg_pool3d": adaptive_pool(3),
    "adaptive_max_pool2d": adaptive_pool(2),
    "adaptive_max_pool3d": adaptive_pool(3),
    "_adaptive_avg_pool2d_backward": adaptive_pool_backward(2),
    "_adaptive_avg_pool3d_backward": adaptive_pool_backward(3),
    "adaptive_max_pool2d_backward": per_input(ELEMENTWISE),
    "adaptive_max_pool3d_backward": per_input(ELEMENTWISE),
    "sum": per_input(ELEMENTWISE),
    "mean": per_input(ELEMENTWISE),
    "amax": per_input(ELEMENTWISE),
    "amin": per_input(ELEMENTWISE),
    "max": per_input(ELEMENTWISE),
    "min": per_input(ELEMENTWISE),
    "argmax": per_input(ELEMENTWISE),
    # Boolean reductions, one compare per element as amax: torch's own check that a mask is
    # causal (a Transformer layer's _detect_is_causal_mask) calls aten.all on it
    "all": per_input(ELEMENTWISE),
    "any": per_input(ELEMENTWISE),
    "linalg_vector_norm": per_input(2),  # square and add
    "var": per_input(3),
    "var_mean": per_input(4),
    "std": per_input(3),
    "cumsum": per_input(ELEMENTWISE),
    "native_dropout": per_output(2),  # compare with the mask, scale
    "_prelu_kernel": per_output(ELEMENTWISE),  # the slope's multiply, as leaky ReLU
    "_prelu_kernel_backward": per_input(PRELU_BACKWARD),  # args[0]: the output's gradient
    "index_put": index_put,
    "scatter": scatter,
    "scatter_add": scatter_reduce,
    "scatter_reduce": scatter_reduce,
    "index_add": index_add,
    "col2im": col2im,
    "embedding_dense_backward": per_input(ELEMENTWISE),  # sums the gradients of each row
}

for _name, _n in INTERPOLATE.items():
    HANDLERS[_name] = per_output(2 * _n - 1)
    HANDLERS[f"{_name}_backward"] = per_input(2 * _n)  # args[0]: the output's gradient

# Nearest upsampling copies (no FLOPs, IGNORED); its backward adds each output's gradient into
# the input position it was copied from: one add per element of the output's gradient.
# Reflection and replication padding (Conv2d's padding_mode="reflect" or "replicate") copy
# alike, and their backward adds alike.
for _name in ("upsample_nearest", "_upsample_nearest_exact", "reflection_pad", "replication_pad"):
    for _dims in (1, 2, 3):
        HANDLERS[f"{_name}{_dims}d_backward"] = per_input(ELEMENTWISE)

# Element-wise ops and their backward: one FLOP per output element (in-place "_" forms too).
for _name in [
    "add",
    "sub",
    "rsub",
    "mul",
    "div",
    "neg",
    "abs",
    "reciprocal",
    "sqrt",
    "rsqrt",
    "pow",
    "exp",
    "log",
    "log1p",
    "square",
    "relu",
    "threshold",
    "clamp",
    "clamp_min",
    "clamp_max",
    "hardtanh",
    "leaky_relu",
    "elu",
    "gelu",
    "silu",
    "mish",
    "sigmoid",
    "tanh",
    "hardswish",
    "hardsigmoid",
    "softplus",
    "erf",
    "sign",
    "sgn",  # sign, as LPPool's backward calls it
    "maximum",
    "minimum",
    "where",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "logical_not",
    "masked_fill",
    "addcmul",
    "addcdiv",
    "lerp",
    "threshold_backward",
    "hardtanh_backward",
    "leaky_relu_backward",
    "elu_backward",
    "gelu_backward",
    "silu_backward",
    "mish_backward",
    "sigmoid_backward",
    "tanh_backward",
    "hardswish_backward",
    "hardsigmoid_backward",
    "softplus_backward",
    "native_dropout_backward",
]:
    HANDLERS[_name] = per_output(ELEMENTWISE)

IGNORED: frozenset[str] = frozenset(
    [
        "view",
        "_unsafe_view",
        "reshape",
        "t",
        "transpose",
        "transpose_",
        "permute",
        "expand",
        "squeeze",
        "unsqueeze",
        "select",
        "slice",
        "split",
        "split_with_sizes",
        "unsafe_split",
        "unsafe_split_with_sizes",
        "unsafe_chunk",
        "chunk",
        "unbind",
        "as_strided",
        "as_strided_",
        "alias",
        "detach",
        "unfold",
        "view_as_real",
        "view_as_complex",
        "clone",
        "copy_",
        "_to_copy",
        "contiguous",
        "cat",
        "stack",
        "constant_pad_nd",
        "reflection_pad1d",
        "reflection_pad2d",
        "reflection_pad3d",
        "replication_pad1d",
        "replication_pad2d",
        "replication_pad3d",
        "max_unpool2d",
        "max_unpool3d",
        "index",
        "index_select",
        "gather",
        "sort",  # compares and moves values: no FLOPs (fvcore, ptflops count none)
        "embedding",
        "roll",
        "flip",
        "repeat",
        "masked_select",
        "_pack_padded_sequence",
        "_nested_tensor_from_mask_left_aligned",  # a padding mask's layout checked: no arithmetic
        "select_backward",
        "slice_backward",
        "upsample_nearest1d",
        "upsample_nearest2d",
        "upsample_nearest3d",
        "_upsample_nearest_exact1d",
        "_upsample_nearest_exact2d",
        "_upsample_nearest_exact3d",
        "pixel_shuffle",
        "pixel_unshuffle",
        "channel_shuffle",
        "im2col",
        "empty",
        "empty_like",
        "empty_strided",
        "new_empty",
        "new_empty_strided",
        "resize_as_",  # torch.nn.CrossMapLRN2d's buffers sized to its input
        "zeros",
        "zeros_like",
        "new_zeros",
        "ones",
        "ones_like",
        "new_ones",
        "full",
        "full_like",
        "new_full",
        "fill_",
        "zero_",
        "arange",
        "scalar_tensor",
        "lift_fresh",
        "_local_scalar_dense",
        "bernoulli_",
        "rand",
        "rand_like",
        "randn",
        "randn_like",
        "uniform_",
        "normal_",
        "_efficientzerotensor",
        "tril",  # a copy with the elements above (below) a diagonal zeroed: causal masks
        "tril_",
        "triu",
        "triu_",
    ]
)

CONVOLUTIONS = frozenset({"convolution", "_convolution"})

ATTENTIONS = frozenset(name for name, handler in HANDLERS.items() if handler is attention)
"""The fused attention kernels (forward): each mixes every position of its sequence."""

MATMULS = frozenset(
    name
    for name, handler in HANDLERS.items()
    if handler in (matmul, add_matmul, vector_product, attention, attention_backward)
)
POOLS = frozenset(
    name
    for name, handler in HANDLERS.items()
    if handler in (pool, pool_backward, max_pool_backward)
)
NORMS = frozenset(
    name for name in HANDLERS if any(n in name for n in ("batch_norm", "layer_norm", "group_norm"))
)

MAX_POOLS = frozenset(
    {name.removesuffix("_backward") for name in MAX_POOL_BACKWARD}
    | {"adaptive_max_pool2d", "adaptive_max_pool3d"}
)
"""The max pools' kernels (forward), each returning the indices of its maxima beside its output."""

PUBLIC_OUTPUTS: dict[str, tuple[int, ...]] = {
    **dict.fromkeys(ATTENTIONS, (0,)),  # the logsumexp (CUDA's kernels: seeds, lengths too)
    **dict.fromkeys((n for n in NORMS if HANDLERS[n] is not norm_backward), (0,)),  # mean, rstd
    **dict.fromkeys(MAX_POOLS, (0,)),  # the indices
    "native_dropout": (0,),  # F.dropout in training: the mask
    "log_sigmoid_forward": (0,),  # F.logsigmoid: the buffer its backward reads
    # F.embedding_bag: offset2bag, bag_size, max_indices
    **dict.fromkeys(("_embedding_bag", "_embedding_bag_forward_only"), (0,)),
    "_linalg_det": (0,),  # torch.linalg.det, torch.det: the LU and pivots
    "_linalg_slogdet": (0, 1),  # sign and logabsdet: the LU and pivots
    "_linalg_solve_ex": (0,),  # torch.linalg.solve: the LU, pivots and info
    "_linalg_svd": (1,),  # torch.linalg.svdvals (matrix_norm, cond...): S, not U and Vh
    "_linalg_eigh": (0,),  # torch.linalg.eigvalsh: the eigenvalues
    "linalg_inv_ex": (0,),  # torch.linalg.inv, torch.inverse: the info
    "linalg_cholesky_ex": (0,),  # torch.linalg.cholesky: the info
    "linalg_lu_factor_ex": (0, 1),  # torch.linalg.lu_factor, torch.lu: the info
    # F.nll_loss, F.cross_entropy: the total weight; F.ctc_loss: log_alpha;
    # F.multilabel_margin_loss: is_target
    **dict.fromkeys(("nll_loss_forward", "nll_loss2d_forward", "_ctc_loss"), (0,)),
    "multilabel_margin_loss_forward": (0,),
}
"""Kernels that return more than the torch function running them does, and which of their
outputs (indices) it returns: the rest are saved for the kernel's backward or tell an error
(F.scaled_dot_product_attention, F.layer_norm, F.max_pool2d, torch.linalg.det return one
tensor; torch.linalg.svdvals the middle of its kernel's U, S, Vh), no activation of the
model's."""

CALL_OUTPUTS: dict[tuple[str, str], tuple[int, ...] | None] = {
    ("_linalg_svd", "linalg_svd"): None,  # U, S, Vh
    ("_linalg_svd", "svd"): None,  # torch.svd, Tensor.svd: U, S, V
    ("_linalg_eigh", "linalg_eigh"): None,  # eigenvalues and eigenvectors
    ("linalg_eig", "linalg_eigvals"): (0,),  # the eigenvalues, not the eigenvectors
    ("linalg_inv_ex", "linalg_inv_ex"): None,  # the *_ex forms return the info too
    ("linalg_cholesky_ex", "linalg_cholesky_ex"): None,
    ("linalg_lu_factor_ex", "linalg_lu_factor_ex"): None,
    ("_linalg_solve_ex", "linalg_solve_ex"): (0, 3),  # the result and info
}
"""Where the torch-level call (by `__name__`) returns other outputs of a kernel than
PUBLIC_OUTPUTS says: torch.linalg.svd all that svdvals leaves out, torch.linalg.eigvals
fewer than torch.linalg.eig."""


def public_outputs(name: str, call: str) -> tuple[int, ...] | None:
    """Which outputs (their indices) of the ATen operator `name` (`op_name`) are the model's
    own, run by the torch-level function named `call` ("" where none is seen); None: all.
    A max pool's indices are the model's where the call asks for them (F.max_pool2d(x, 2,
    return_indices=True) runs as F.max_pool2d_with_indices), as nn.MaxPool2d's are then."""
    if name in MAX_POOLS and call.endswith("_with_indices"):
        return None
    if (name, call) in CALL_OUTPUTS:
        return CALL_OUTPUTS[name, call]
    return PUBLIC_OUTPUTS.get(name)


def kind_of(name: str, args: Sequence[Any]) -> str:
    """The kind (dlperf.analytic.devices.KINDS) of an ATen call, by `op_name`.

    A convolution is depthwise when each group has one input channel (the weight is
    argument 1 of a convolution, 2 of its backward; `groups` argument 8 and 9); grouped
    ones with wider groups (ResNeXt, RegNet) run close to dense ones and count as such.
    """
    if name in CONVOLUTIONS:
        return "depthwise_conv" if args[8] > 1 and args[1].shape[1] == 1 else "conv"
    if name == "convolution_backward":
        depthwise = args[9] > 1 and args[2].shape[1] == 1
        return "depthwise_conv_backward" if depthwise else "conv_backward"
    if name in MATMULS:
        return "matmul"
    if name in POOLS:
        return "pool"
    return "norm" if name in NORMS else "other"


VIEWS: frozenset[str] = frozenset({"_unsafe_view"})
"""Ops that alias their input without saying so in their schema."""


def op_name(func: torch._ops.OpOverload) -> str:
    """'add_' -> 'add': an in-place op costs what its out-of-place form costs."""
    name = func.overloadpacket.__name__
    return str(name[:-1] if name.endswith("_") and name[:-1] in HANDLERS else name)


def cost_of(
    func: torch._ops.OpOverload,
    args: Sequence[Any],
    out: Any,
    kwargs: Any = None,
    *,
    as_real: bool = True,
) -> Cost | None:
    """The cost of one ATen call; None when the operator has no handler. Its handler is given
    the arguments in the schema's order: those given by keyword (scatter's reduce is keyword
    only) after the positional ones, the defaults of the others between them. On complex
    tensors the cost is in real operations (`in_real_arithmetic`), None for an operator with
    no complex rule; `as_real` False gives the count by shapes alone, as the peers make it."""
    if is_marker(func):
        return Cost(0, 0)
    if func.namespace != "aten":
        return None
    name = op_name(func)
    if name in IGNORED:
        return Cost(0, 0)
    handler = HANDLERS.get(name)
    if handler is None:
        return None
    if kwargs:
        rest = func._schema.arguments[len(args) :]
        args = [*args, *(kwargs.get(a.name, a.default_value) for a in rest)]
    shaped = handler(args, out)
    if not as_real or not touches_complex(args, out):
        return shaped
    return in_real_arithmetic(name, args, shaped)


# --- complex tensors: their arithmetic in real operations -----------------------------------

COMPLEX_MAC = 4
"""Real multiply-accumulates per complex one: (a + bi)(c + di) added to a sum is ac - bd and
ad + bc, 4 real products each added to its part (Gauss's trick takes 3 products and more adds;
counts of real arithmetic, fvcore-style, and this take the straightforward 4). A product op's
other FLOPs (a bias add) are complex adds, 2 real adds each."""
COMPLEX_ADD = 2
"""A complex add: one real add for each of the real and imaginary parts."""
COMPLEX_ELEMENTWISE: dict[str, int] = {
    "add": COMPLEX_ADD,
    "sub": COMPLEX_ADD,
    "rsub": COMPLEX_ADD,
    "neg": COMPLEX_ADD,
    "sum": COMPLEX_ADD,
    "mean": COMPLEX_ADD,
    "cumsum": COMPLEX_ADD,
    "mul": 6,  # (a + bi)(c + di): 4 multiplies, 2 adds
    "div": 11,  # ((ac + bd) + (bc - ad)i) / (c^2 + d^2): 6 multiplies, 3 adds, 2 divides
    "abs": 4,  # sqrt(a^2 + b^2): 2 multiplies, an add, a square root
}
"""Real FLOPs per element of the element-wise ops and reductions that have a complex rule (their
real cost is 1 per element); any other operator on complex tensors is reported, not counted."""
BY_REAL = 2
"""A complex tensor multiplied by a real one (or a real number), or divided by one: each part
once."""
MAC_HANDLERS = frozenset(
    {convolution, convolution_backward, matmul, add_matmul, vector_product, attention,
     attention_backward}
)  # fmt: skip
COMPLEX_COUNTED = (
    "complex arithmetic counted in real operations: a complex multiply-accumulate as 4 real MACs "
    "(4 multiplies, 4 adds; not Gauss's 3 multiplies), a complex add or subtract as 2 FLOPs, a "
    "multiply 6, a divide 11, abs 4, a multiply by a real number or divide by one 2; other "
    "operations on complex tensors not counted"
)
"""What `analyze --json` says under conventions.complex, and predict in a note, when the model
did arithmetic on complex tensors."""


def _is_complex(value: Any) -> bool:
    return isinstance(value, complex) or (isinstance(value, torch.Tensor) and value.is_complex())


def touches_complex(args: Sequence[Any], out: Any) -> bool:
    """Whether an ATen call reads or writes a complex tensor."""
    flat = [*args, *(out if isinstance(out, tuple | list) else [out])]
    return any(
        isinstance(t, torch.Tensor) and t.is_complex()
        for a in flat
        for t in (a if isinstance(a, tuple | list) else [a])
    )


def in_real_arithmetic(name: str, args: Sequence[Any], shaped: Cost) -> Cost | None:
    """The cost of an operator on complex tensors in real operations, from its count by shapes
    `shaped`: product ops' MACs x COMPLEX_MAC (their other FLOPs x COMPLEX_ADD), element-wise
    ops by COMPLEX_ELEMENTWISE; None for an operator with no complex rule."""
    if HANDLERS[name] in MAC_HANDLERS:
        macs = COMPLEX_MAC * shaped.macs
        return Cost(macs, 2 * macs + COMPLEX_ADD * (shaped.flops - 2 * shaped.macs))
    by_real = (name == "mul" and not all(_is_complex(a) for a in args[:2])) or (
        name == "div" and not _is_complex(args[1])
    )
    if by_real:
        return Cost(0, BY_REAL * shaped.flops)
    per_element = COMPLEX_ELEMENTWISE.get(name)
    return None if per_element is None else Cost(0, per_element * shaped.flops)


def is_view(func: torch._ops.OpOverload) -> bool:
    return func.is_view or func.overloadpacket.__name__ in VIEWS


MARKERS: frozenset[tuple[str, str]] = frozenset(
    {
        ("profiler", "_record_function_enter"),
        ("profiler", "_record_function_enter_new"),
        ("profiler", "_record_function_exit"),
    }
)
"""Operators outside ATen that a plain model's forward runs and that do no work on tensors:
the profiler's markers, which torch.profiler.record_function (torch.autograd.profiler's too)
and every nn.DataParallel's forward open and close (the whole of torch.ops.profiler). No
arithmetic, no bytes, no call: neither an operator without a handler nor one that works.
Other namespaces (torchvision's, quantized, a user's torch.library operators) compute, and
stay reported as not counted."""


def decomposable(func: torch._ops.OpOverload) -> bool:
    """Whether `func` is an ATen operator with no rule of its own (HANDLERS, IGNORED, a view)
    that torch defines by others (a CompositeImplicitAutograd kernel: conv2d, linear,
    batch_norm), to be counted as those. torch decomposes them before a dispatch mode sees
    them, except under torch.inference_mode(), which skips the autograd keys that do it: a
    forward's inference_mode block gave aten.conv2d, "not counted", and no MACs."""
    if func.namespace != "aten" or is_view(func):
        return False
    name = op_name(func)
    if name in HANDLERS or name in IGNORED:
        return False
    qualified = func._schema.name  # "aten::conv2d", as func.name() (untyped) gives it
    if func._overloadname != "default":
        qualified += f".{func._overloadname}"
    return bool(
        torch._C._dispatch_has_kernel_for_dispatch_key(qualified, "CompositeImplicitAutograd")
    )


def is_marker(func: torch._ops.OpOverload) -> bool:
    """Whether `func` is one of the `MARKERS`."""
    return (func.namespace, func.overloadpacket.__name__) in MARKERS
