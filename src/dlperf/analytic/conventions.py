"""MAC conventions: what dlperf counts as a multiply-accumulate, and what the counters that
published tables come from count, so that a student can reproduce such a table.

dlperf's MACs are the weight products alone (convolutions, matrix products, attention);
bias adds, normalisation, pooling and element-wise ops are FLOPs only. The peers count more,
each in its own way, worked out from their code (docs/analyze.md gives the sources):

- torchinfo (`summary`'s "Mult-Adds"): every leaf module's parameters times its output
  positions: for a module whose class name has "Conv", (weight + bias) x N x output H x W;
  for any other, parameters named weight or bias x N (the output's first dimension), and
  other parameters with weight or bias in their name (RNNs) x N x its second dimension.
- ptflops 0.7.5 (its `pytorch` backend's module hooks, the one its CNN tables use, as with
  `backend_specific_config={"count_functional": False}`): convolutions (per output
  position, per input position when transposed: kernel x in_channels x out_channels /
  groups, plus one bias add per output), linear layers ((in_features + 1 with a bias) x
  out_features per row), 1 per output of ReLU, PReLU, ELU, LeakyReLU, ReLU6, GELU and
  nn.Upsample (of the first sample), 1 per input of pooling, 1 per input of batch, instance,
  group and layer norm (2 with `affine=True`; LayerNorm has no `affine`, so 1). Other
  modules count 0, subclasses of those above too: ptflops looks up `type(module)`. Its
  default also counts functional calls (F.relu, F.max_pool2d, ...) beside the module hooks,
  so that nn.ReLU and nn.MaxPool2d count twice; that is not reproduced.
- fvcore (`FlopCountAnalysis`, whose "flops" are MACs): convolutions and the matrix products
  of its op table without bias: the torch-level calls its JIT tracer records as aten::linear,
  matmul (`@` too), addmm, bmm and einsum, each by fvcore's own formula; not torch.mm, mv,
  dot, baddbmm, addmv, tensordot, an RNN or scaled_dot_product_attention; batch norm in
  eval 1 per element (2 with an affine weight), norms computing statistics 4 per element (5
  with an affine weight); nearest upsampling 1 and bilinear 4 per output; adaptive average
  pooling 1 per input; nothing else.

Each counts one forward pass; a layer's cost under each convention is kept beside dlperf's.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence
from math import prod
from typing import Any

import numpy as np
import torch
from torch import nn

MACS_CONVENTIONS = {
    "dlperf": "weight products only (convolutions, matrix products, attention); bias adds, "
    "normalisation, pooling and element-wise ops are in FLOPs only",
    "torchinfo": "torchinfo's Mult-Adds: each leaf layer's parameters, biases included, "
    "times its output positions (N x H x W for a convolution, N for other layers)",
    "ptflops": "ptflops (pytorch backend): convolution and linear products plus one per "
    "bias add; 1 per output of activations and upsampling, 1 per input of pooling, 1 per "
    "input of normalisation (2 with affine)",
    "fvcore": "fvcore: convolution and matrix products without bias (linear, matmul, addmm, "
    "bmm and einsum; not mm, mv, dot, baddbmm or addmv); normalisation 1-5 per "
    "element, upsampling 1 (nearest) or 4 (bilinear) per output, adaptive average pooling 1 "
    "per input; element-wise ops and max pooling 0",
}
"""Convention -> what its MACs count, as the table and `--json` say it."""

# ptflops hooks a module only when `type(module)` is a key of its MODULES_MAPPING
# (`is_supported_instance`): a subclass of a supported module (torchvision's LayerNorm2d,
# nn.UpsamplingNearest2d, a user's Conv2d) counts 0, so these are exact types, not bases.
_PTFLOPS_CONVS = {nn.Conv1d, nn.Conv2d, nn.Conv3d,
                  nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d}  # fmt: skip
_PTFLOPS_ACTIVATIONS = {nn.ReLU, nn.PReLU, nn.ELU, nn.LeakyReLU, nn.ReLU6, nn.GELU}
_PTFLOPS_POOLS = {
    nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d,
    nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d, nn.AdaptiveMaxPool3d,
    nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d,
}  # fmt: skip
_PTFLOPS_NORMS = {nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.InstanceNorm1d,
                  nn.InstanceNorm2d, nn.InstanceNorm3d, nn.GroupNorm, nn.LayerNorm}  # fmt: skip
PTFLOPS_NOT_REPRODUCED = {nn.RNN, nn.GRU, nn.LSTM, nn.RNNCell, nn.LSTMCell, nn.GRUCell,
                          nn.MultiheadAttention}  # fmt: skip
"""Modules whose experimental ptflops hooks dlperf does not reproduce (exact types, as
ptflops matches them)."""


def torchinfo_macs(module: nn.Module, out: torch.Tensor) -> int:
    """torchinfo's LayerInfo.calculate_macs for a leaf module and its (first) output."""
    shape = list(out.shape)
    macs = 0
    for name, p in module.named_parameters():
        if name in ("weight", "bias"):
            positions = prod(shape[:1] + shape[2:]) if "Conv" in type(module).__name__ else shape[0]
            macs += p.numel() * positions
        elif "weight" in name or "bias" in name:
            macs += prod(shape[:2]) * p.numel()
    return macs


def ptflops_macs(module: nn.Module, x: torch.Tensor | None, out: torch.Tensor) -> int:
    """ptflops' pytorch-backend hook for a module's exact type (0 for a type it has no hook
    for, subclasses of those it has included)."""
    kind = type(module)
    if kind in _PTFLOPS_CONVS and isinstance(module, nn.modules.conv._ConvNd) and x is not None:
        # a transposed convolution computes one kernel window per input position
        active = x.shape[0] * prod((x if module.transposed else out).shape[2:])
        per_position = prod(module.kernel_size) * module.in_channels * module.out_channels
        bias = out.numel() if module.bias is not None else 0
        return per_position // module.groups * active + bias
    if kind is nn.Linear and x is not None:
        bias = out.shape[-1] if module.bias is not None else 0
        return (x.shape[-1] * out.shape[-1] + bias) * prod(x.shape[:-1])
    if kind in _PTFLOPS_ACTIVATIONS:
        return out.numel()
    if kind is nn.Upsample:
        return out[0].numel()
    if kind in _PTFLOPS_POOLS and x is not None:
        return x.numel()
    if kind in _PTFLOPS_NORMS and x is not None:
        return x.numel() * (2 if getattr(module, "affine", False) else 1)
    return 0


def _fvcore_norm(args: Any, weight_at: int, stats: bool) -> int:
    affine = args[weight_at] is not None
    per_element = (5 if affine else 4) if stats else (2 if affine else 1)
    return int(per_element * args[0].numel())


def fvcore_extra(name: str, args: Any, out: Any) -> int:
    """What fvcore counts for an ATen call besides its weight products (dlperf's MACs)."""
    first = out[0] if isinstance(out, tuple | list) else out
    if name == "native_batch_norm":
        return _fvcore_norm(args, 1, stats=bool(args[5]))
    if name == "_native_batch_norm_legit":
        return _fvcore_norm(args, 1, stats=True)
    if name == "_native_batch_norm_legit_no_training":
        return _fvcore_norm(args, 1, stats=False)
    if name in ("native_layer_norm", "native_group_norm"):
        return _fvcore_norm(args, 2 if name == "native_layer_norm" else 1, stats=True)
    if name == "upsample_nearest2d":
        return int(first.numel())
    if name in ("upsample_bilinear2d", "grid_sampler_2d"):
        return int(4 * first.numel())
    return 0


def fvcore_function(name: str, args: Any) -> int:
    """What fvcore counts for a torch function call that ATen does not show as such:
    adaptive average pooling (module or functional) becomes `mean` when pooling to 1x1."""
    return int(args[0].numel()) if name == "adaptive_avg_pool2d" else 0


# fvcore's tracer (torch.jit.trace) records each torch-level call as the one ATen operator it
# names (`h @ w` as aten::matmul, torch.mm as aten::mm, F.linear as aten::linear), not the mm
# or bmm it runs as; its op table counts only some of them. So its products are counted where
# the torch-level call is seen (counting's TorchFunctionMode), and the ATen products the call
# runs as are not counted again.
FVCORE_COUNTED = "counted"
"""A torch-level call fvcore's op table counts (FVCORE_PRODUCTS), by fvcore's formula."""
FVCORE_CLOSED = "closed"
"""A torch-level call fvcore's tracer records as one operator its table does not count
(torch.mm, torch.mv, torch.dot, torch.baddbmm, tensordot, an RNN, scaled_dot_product_attention):
the products it runs as count 0."""
FVCORE_OPENED = "opened"
"""A Python function of torch.nn.functional (multi_head_attention_forward), whose body the
tracer records op by op but the TorchFunctionMode sees as one call: the mm, addmm and bmm it
runs as are counted, as the linear, matmul, addmm and bmm calls they come from."""
_FVCORE_RUN_AS = frozenset({"mm", "addmm", "bmm"})
_CONVOLUTIONS = frozenset({"convolution", "_convolution"})


def _arg(args: Sequence[Any], kwargs: dict[str, Any], at: int, name: str) -> Any:
    return args[at] if len(args) > at else kwargs[name]


def _fvcore_linear(args: Sequence[Any], kwargs: dict[str, Any]) -> int:
    # linear_flop_jit: the input's elements x the weight's first dimension
    x, w = _arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "weight")
    return int(prod(x.shape)) * int(w.shape[0])


def _fvcore_matmul(a: torch.Tensor, b: torch.Tensor) -> int:
    # matmul_flop_jit: the first operand's elements x the second's last dimension, whatever
    # the broadcast; a vector second operand fails its assert, counted here as a's products
    return int(prod(a.shape)) * (int(b.shape[-1]) if b.dim() >= 2 else 1)


def _fvcore_addmm(args: Sequence[Any], kwargs: dict[str, Any]) -> int:
    m1, m2 = _arg(args, kwargs, 1, "mat1"), _arg(args, kwargs, 2, "mat2")
    return int(m1.shape[0] * m1.shape[1] * m2.shape[1])


def _fvcore_bmm(args: Sequence[Any], kwargs: dict[str, Any]) -> int:
    a, b = _arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "mat2")
    n, c, t = a.shape
    return int(n * c * t * b.shape[-1])


def _fvcore_einsum(args: Sequence[Any], kwargs: dict[str, Any]) -> int:
    """einsum_flop_jit: two equations by formula, any other by numpy's einsum_path ("optimized
    FLOP count", as printed to 4 digits) halved. An equation in sublist form counts 0."""
    equation = args[0] if args else kwargs.get("equation")
    if not isinstance(equation, str):
        return 0
    operands = args[1] if len(args) == 2 and isinstance(args[1], list | tuple) else args[1:]
    shapes = [list(t.shape) for t in operands]
    equation = equation.replace(" ", "")
    letters = dict.fromkeys(c for c in equation if c.isalpha())
    equation = equation.translate({ord(c): 97 + i for i, c in enumerate(letters)})
    if equation == "abc,abd->acd":
        n, c, t = shapes[0]
        return int(n * c * t * shapes[-1][-1])
    if equation == "abc,adc->adb":
        n, t, g = shapes[0]
        return int(n * t * g * shapes[-1][1])
    arrays = [np.broadcast_to(np.zeros(()), shape) for shape in shapes]  # shapes, no storage
    path = np.einsum_path(equation, *arrays, optimize="optimal")[1]
    for line in path.split("\n"):
        if "optimized flop" in line.lower():
            return int(np.floor(float(line.split(":")[-1]) / 2))
    return 0


FVCORE_PRODUCTS: dict[str, Callable[[Sequence[Any], dict[str, Any]], int]] = {
    "linear": _fvcore_linear,
    "matmul": lambda args, kwargs: _fvcore_matmul(
        _arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "other")
    ),
    "__rmatmul__": lambda args, kwargs: _fvcore_matmul(args[1], args[0]),
    "addmm": _fvcore_addmm,
    "bmm": _fvcore_bmm,
    "einsum": _fvcore_einsum,
}
"""The torch-level calls (by __name__: torch.matmul, Tensor.matmul and `@` are all "matmul")
whose products fvcore's op table counts, each by its formula (fvcore/nn/jit_handles.py)."""


def fvcore_kind(func: Any) -> str:
    """How fvcore's tracer sees the products of the torch-level call `func`: FVCORE_COUNTED,
    FVCORE_OPENED or FVCORE_CLOSED."""
    if getattr(func, "__name__", "") in FVCORE_PRODUCTS:
        return FVCORE_COUNTED
    module = getattr(func, "__module__", None) or ""
    if isinstance(func, types.FunctionType) and module.startswith("torch.nn.functional"):
        return FVCORE_OPENED
    return FVCORE_CLOSED


def fvcore_products(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> int:
    """fvcore's count of the products of the torch-level call `func` (0 for one its op table
    does not count), from its arguments' shapes; 0 where its formula cannot read them."""
    formula = FVCORE_PRODUCTS.get(getattr(func, "__name__", ""))
    if formula is None:
        return 0
    try:
        return formula(args, kwargs)
    except (IndexError, KeyError, ValueError, AttributeError, TypeError):
        return 0  # arguments torch refused too, or fvcore's own assert


def fvcore_aten(name: str, shaped: int, call: str | None) -> int:
    """fvcore's count of the weight products of the ATen operator `name` (`shaped`: dlperf's
    count of them by shapes), run by a torch-level call of kind `call` (fvcore_kind's; None
    where no torch-level call runs it): a convolution's always (aten::_convolution); the mm,
    addmm and bmm of an opened function's body or of none; else 0 (counted at the call)."""
    if name in _CONVOLUTIONS:
        return shaped
    if call in (None, FVCORE_OPENED) and name in _FVCORE_RUN_AS:
        return shaped
    return 0
