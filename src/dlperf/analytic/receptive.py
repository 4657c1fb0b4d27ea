"""Receptive field of every feature map, followed operator by operator.

Per spatial axis a field is (size, jump, start) in input pixels, after Araujo et al.,
"Computing Receptive Fields of Convolutional Neural Networks", Distill 2019, and
Dang Ha The Hien's "A guide to receptive field arithmetic": pixel i spans [i, i+1), so
the input is (1, 1, 0.5); `start` is the centre of the first output unit's field. A
convolution or pooling window k (dilation d, stride s, padding p) gives

    k' = d(k-1) + 1,  size += (k'-1) jump,  start += ((k'-1)/2 - p) jump,  jump *= s.

A point-wise op joins its inputs' fields (their union, for residual adds and
concatenated branches); a 1x1 map broadcast over a larger one (a squeeze-and-excitation
gate) is a per-channel constant and is left out. Point-wise is what is known to keep each
position along H and W in place: torch's element-wise ops, normalisation (its statistics over
the positions are left out, as those over the batch are), new shapes that keep H and W, and
ops along other axes (a softmax or a flip of the channels); one along H or W (a softmax,
cumsum, sort, flip or roll of a row) ends the field, as any op not known to keep positions
does. Global pooling, a flatten, attention or any other op this module does not follow end
the field too: it becomes "undefined" with the op and module that ended it, and the field of
the last spatial layer is kept: the layer that made the map the ending op read (the one on
the way to the output, not the last op that had a field: circular padding slices its input
before it ends the field, in the next layer).

Zero (constant) padding is followed: it moves `start`, and a border unit's field reaches
past the image, as the arithmetic above has it. Padding that copies the map's own pixels to
its edges ends the field: circular padding wraps a border unit's field around to the
opposite edge, so that it is no window of the input (strictly, the whole input along that
axis), and reflection and replication padding are not followed. torch builds circular
padding from a new, larger tensor filled in place (aten.new_empty, then copies), which is
what this module recognises and names "circular padding".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakTensorKeyDictionary

from dlperf.analytic.ops import ATTENTIONS, op_name

Pair = tuple[float, float]


@dataclass(frozen=True)
class Field:
    size: Pair
    jump: Pair
    start: Pair

    def window(
        self,
        kernel: Sequence[int],
        stride: Sequence[int],
        padding: Sequence[int],
        dilation: Sequence[int],
    ) -> Field:
        size, jump, start = [], [], []
        for a in range(2):
            span = dilation[a] * (kernel[a] - 1)
            size.append(self.size[a] + span * self.jump[a])
            start.append(self.start[a] + (span / 2 - padding[a]) * self.jump[a])
            jump.append(self.jump[a] * stride[a])
        return Field((size[0], size[1]), (jump[0], jump[1]), (start[0], start[1]))

    def to_dict(self) -> dict[str, list[float]]:
        def clean(p: Pair) -> list[float]:
            return [int(v) if float(v).is_integer() else v for v in p]

        return {"size": clean(self.size), "jump": clean(self.jump), "start": clean(self.start)}


@dataclass(frozen=True)
class Ended:
    reason: str
    op: str | None = None
    """What ended the field, in words ("circular padding"), where the operator's own name
    would not say it (aten.new_empty); the reason then follows it and its module."""
    last: tuple[str, Field] | None = None
    """The layer whose map the field ended on, and that map's field."""

    def placed(self, name: str, module: str, last: tuple[str, Field] | None) -> Ended:
        """This end, said where it happened: operator `name` ("aten.mean") in `module`."""
        if self.op is not None:
            return Ended(f"{self.op} in {module} {self.reason}", last=last)
        return Ended(f"{self.reason}: {name} in {module}", last=last)


INPUT = Field((1, 1), (1, 1), (0.5, 0.5))


def union(fields: Sequence[Field]) -> Field | Ended:
    if len({f.jump for f in fields}) > 1:
        return Ended("branches with different strides are joined")
    size, start = [], []
    for a in range(2):
        lo = min(f.start[a] - f.size[a] / 2 for f in fields)
        hi = max(f.start[a] + f.size[a] / 2 for f in fields)
        size.append(hi - lo)
        start.append((lo + hi) / 2)
    return Field((size[0], size[1]), fields[0].jump, (start[0], start[1]))


def _pair(v: Any, default: Sequence[int], axes: int = 2) -> list[int]:
    v = list(v) if isinstance(v, Sequence) else [v]
    if not v:
        return list(default)
    return list(v * axes if len(v) == 1 else v)


KEEPS_POSITIONS = frozenset(
    {
        # element-wise, though torch does not tag them so
        "hardswish", "_prelu_kernel", "native_dropout", "bernoulli", "_to_copy", "copy",
        "alias", "detach", "lift_fresh", "lift_fresh_copy", "fill", "zero",
        "empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like",
        "new_empty", "new_zeros", "new_ones", "new_full",
        # along channels alone
        "channel_shuffle", "native_channel_shuffle",
        # a new shape: `_pointwise` checks that H and W are kept
        "view", "_unsafe_view", "expand", "repeat", "squeeze", "unsqueeze", "permute", "transpose",
        # normalisation: its statistics over the positions are left out, as over the batch
        "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
        "_native_batch_norm_legit_functional", "native_group_norm", "native_layer_norm",
    }
)  # fmt: skip
"""Operators that keep each position along H and W where it is, beyond those torch tags
point-wise and those along other axes than H and W (`_moves`)."""

MOVES = "not followed (it reorders or mixes positions along H or W)"
UNKNOWN = "not followed (not known to keep each position in place)"


def _axes(func: Any, args: Sequence[Any], kwargs: dict[str, Any], dims: int) -> set[int] | None:
    """The axes of a `dims`-dimensional input that `func` works along: its `dim` or `dims`
    (the default where not given; every axis where it is None or empty), a 3-D pool's window,
    an index's indexed axes. None where it names no axes."""
    name = func.overloadpacket.__name__
    if name == "index":
        return {a for a, t in enumerate(args[1]) if t is not None}
    if name in ("avg_pool3d", "max_pool3d", "max_pool3d_with_indices"):
        kernel = _pair(args[1], [1], 3)
        padding = _pair(args[3] if len(args) > 3 else [0], [0], 3)
        return {dims - 3 + a for a in range(3) if kernel[a] != 1 or padding[a] != 0}
    for i, arg in enumerate(func._schema.arguments):
        if arg.name in ("dim", "dims"):
            if i < len(args):
                given = args[i]
            else:
                given = kwargs.get(arg.name, arg.default_value if arg.has_default_value() else None)
            axes = [given] if isinstance(given, int) else list(given or [])
            return {a % dims for a in axes} if axes else set(range(dims))
    return None


def _through_own_mask(name: str, args: Sequence[Any]) -> bool:
    """Is this an index_put or masked_scatter through one boolean mask of the input's own shape
    (`y[y < 0] = 0`)? Each position written is then the input's own, as in `torch.where`."""
    if name == "index_put":
        mask = args[1][0] if len(args[1]) == 1 else None
    elif name == "masked_scatter":
        mask = args[1]
    else:
        return False
    return (
        isinstance(mask, torch.Tensor) and mask.dtype == torch.bool and mask.shape == args[0].shape
    )


def _moves(func: Any, args: Sequence[Any], kwargs: dict[str, Any], dims: int) -> str | None:
    """Why `func`, which keeps the spatial size, may not keep each position along H and W (the
    last two of `dims` axes) in place; None where it does."""
    name = op_name(func).removesuffix("_")
    if torch.Tag.pointwise in func.tags or name in KEEPS_POSITIONS:
        return None
    if _through_own_mask(name, args):
        return None
    axes = _axes(func, args, kwargs, dims)
    if axes is None:
        return UNKNOWN
    return MOVES if axes & {dims - 2, dims - 1} else None


def _keeps_axes(name: str, args: Sequence[Any], dims: int) -> bool:
    """Does a permute/transpose leave the height and width axes (the last two) where they
    are?"""
    last = [dims - 2, dims - 1]
    if name == "permute":
        return [d % dims for d in args[1]][-2:] == last
    return not {args[1] % dims, args[2] % dims} & set(last)


def _qualified(func: Any) -> str:
    """Operator `func` as a line names it, by its namespace ("aten.mean"): a user's own
    (torch.library's "ns::op") is no ATen operator."""
    return f"{func.namespace}.{op_name(func)}"


def _spatial(t: Any) -> bool:
    """An image batch (N, C, H, W), or one with its channels split in two (N, 1, C, H, W), as
    local response normalisation views them to pool over channels."""
    return isinstance(t, torch.Tensor) and t.dim() in (4, 5)


def _larger_map(x: torch.Tensor, out: torch.Tensor | None) -> bool:
    """Is `out` the map `x` with its spatial axes padded: what circular padding fills in?"""
    if out is None or not _spatial(out) or out.dim() != x.dim() or out.shape == x.shape:
        return False
    return out.shape[:2] == x.shape[:2] and all(
        o >= i for o, i in zip(out.shape[2:], x.shape[2:], strict=True)
    )


class FieldTracker:
    """Called by the counting engine with every forward op; remembers each map's field."""

    def __init__(self) -> None:
        self.fields: WeakTensorKeyDictionary = WeakTensorKeyDictionary()
        self.made: WeakTensorKeyDictionary = WeakTensorKeyDictionary()
        """Tensor -> (the module whose op made it, that op's number)."""
        self.ops = 0
        self.last_spatial: tuple[str, Field] | None = None

    def start(self, x: torch.Tensor) -> None:
        if _spatial(x):
            self.fields[x] = INPUT

    def result(self, outputs: Sequence[torch.Tensor]) -> dict[str, Any]:
        tracked = [self.fields.get(t) for t in outputs if isinstance(t, torch.Tensor)]  # type: ignore[no-untyped-call]
        state = tracked[0] if tracked else None
        last = state.last if isinstance(state, Ended) else self.last_spatial
        if isinstance(state, Field):
            return {"defined": True, **state.to_dict()}
        reason = state.reason if isinstance(state, Ended) else "the input is not an image"
        return {
            "defined": False,
            "reason": reason,
            "last_spatial_layer": last[0] if last else None,
            **(last[1].to_dict() if last else {}),
        }

    def op(
        self, func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any, module: str
    ) -> None:
        """Follow operator `func` (an OpOverload, ATen's or a user's own), which `module` ran."""
        inputs = [
            (t, self.fields[t])
            for t in tree_flatten(args)[0]
            if isinstance(t, torch.Tensor) and t in self.fields
        ]
        if not inputs:
            return
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        state = self._propagate(func, args, kwargs, inputs, outputs[0] if outputs else None)
        if isinstance(state, Ended) and all(state is not s for _, s in inputs):
            # The field ends here (not upstream): say where, and on which layer's map.
            state = state.placed(_qualified(func), module, self._made_last(inputs))
        self.ops += 1
        for t in outputs:
            self.fields[t] = state
            self.made[t] = (module, self.ops)
        if isinstance(state, Field):
            self.last_spatial = (module, state)

    def _made_last(
        self, inputs: list[tuple[torch.Tensor, Field | Ended]]
    ) -> tuple[str, Field] | None:
        """Of the inputs with a field, the one made last: its module and its field (None for
        the model's input itself)."""
        made = []
        for t, state in inputs:
            by = self.made.get(t)  # type: ignore[no-untyped-call]
            if isinstance(state, Field) and by is not None:
                made.append((by, state))
        if not made:
            return None
        (module, _), state = max(made, key=lambda m: m[0][1])
        return module, state

    def _propagate(
        self,
        func: Any,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        inputs: list[tuple[torch.Tensor, Field | Ended]],
        out: torch.Tensor | None,
    ) -> Field | Ended:
        name = op_name(func)
        x, field = inputs[0]
        if all(isinstance(state, Ended) for _, state in inputs):
            return field
        if name in ("convolution", "_convolution"):
            if isinstance(field, Ended):
                return field
            if args[1].dim() != 4 or args[6]:
                return Ended("not followed (a transposed or non-2-D convolution)")
            return field.window(
                args[1].shape[2:], _pair(args[3], [1]), _pair(args[4], [0]), _pair(args[5], [1])
            )
        if name in ("max_pool2d_with_indices", "max_pool2d", "avg_pool2d"):
            if isinstance(field, Ended):
                return field
            kernel = _pair(args[1], [1])
            stride = _pair(args[2] if len(args) > 2 else [], kernel)
            padding = _pair(args[3] if len(args) > 3 else [0], [0])
            dilation = _pair(args[4] if len(args) > 4 and "max" in name else [1], [1])
            return field.window(kernel, stride, padding, dilation)
        if name.startswith(("reflection_pad", "replication_pad")):
            return Ended("is not followed", op=f"{name.partition('_')[0]} padding")
        if name in ("new_empty", "new_empty_strided") and _larger_map(x, out):
            return Ended("wraps the field around the edges", op="circular padding")
        if not _spatial(out) or name in ATTENTIONS:  # a fused attention's (N, H, L, E) too
            return Ended("positions are mixed (global pooling, flatten or attention)")
        assert out is not None
        if out.shape[-2:] == (1, 1) and x.shape[-2:] != (1, 1):
            return Ended("global pooling mixes all positions")
        if name in ("_adaptive_avg_pool2d", "adaptive_max_pool2d"):
            return self._adaptive(field, x, out)
        if name == "slice" and args[1] % x.dim() >= x.dim() - 2:
            return self._slice(field, x, args)
        if name in ("permute", "transpose") and not _keeps_axes(name, args, x.dim()):
            return Ended("not followed (the layout changes)")
        if name.startswith("masked_scatter") and any(t is args[2] for t, _ in inputs):
            # the source's elements fill the mask's positions in order, not position by position
            return Ended(MOVES)
        if name == "constant_pad_nd":
            pad = list(args[1]) + [0] * 4
            return self._shift(field, (pad[2], pad[0]))
        return self._pointwise(func, args, kwargs, inputs, out)

    def _adaptive(self, field: Field | Ended, x: torch.Tensor, out: torch.Tensor) -> Field | Ended:
        if out.shape[2:] == (1, 1):
            return Ended("global pooling mixes all positions")
        if isinstance(field, Ended):
            return field
        ratios = [x.shape[2 + a] / out.shape[2 + a] for a in range(2)]
        if not all(r.is_integer() for r in ratios):
            return Ended("adaptive pooling with uneven windows is not followed")
        k = [int(r) for r in ratios]
        return field.window(k, k, [0, 0], [1, 1])

    def _slice(self, field: Field | Ended, x: torch.Tensor, args: Sequence[Any]) -> Field | Ended:
        if isinstance(field, Ended):
            return field
        axis = args[1] % x.dim() - (x.dim() - 2)
        begin = args[2] if len(args) > 2 and args[2] is not None else 0
        begin = begin + x.shape[axis + 2] if begin < 0 else begin
        step = args[4] if len(args) > 4 else 1
        start, jump = list(field.start), list(field.jump)
        start[axis] += begin * jump[axis]
        jump[axis] *= step
        return Field(field.size, (jump[0], jump[1]), (start[0], start[1]))

    def _shift(self, field: Field | Ended, pad_before: Sequence[int]) -> Field | Ended:
        if isinstance(field, Ended):
            return field
        start = [field.start[a] - pad_before[a] * field.jump[a] for a in range(2)]
        return Field(field.size, field.jump, (start[0], start[1]))

    def _pointwise(
        self,
        func: Any,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        inputs: list[tuple[torch.Tensor, Field | Ended]],
        out: torch.Tensor,
    ) -> Field | Ended:
        joined: list[Field] = []
        for t, state in inputs:
            gate = _spatial(t) and t.shape[-2:] == (1, 1) and out.shape[-2:] != (1, 1)
            if gate:
                continue
            if not _spatial(t) or t.shape[-2:] != out.shape[-2:]:
                return Ended(f"not followed ({_qualified(func)} changes the spatial size)")
            if isinstance(state, Ended):
                return state
            joined.append(state)
        if not joined:
            return Ended("positions are mixed")
        moves = _moves(func, args, kwargs, inputs[0][0].dim())
        return Ended(moves) if moves else union(joined)
