"""The counting engine: run a model once on the meta device and cost every ATen call.

Parameters live on the meta device (shapes, no storage, no arithmetic), so even the
largest torchvision model is analysed in seconds. A TorchDispatchMode sees every
operator the forward (and with `train`, the backward) runs, looks it up in
`dlperf.analytic.ops` and adds its cost to the innermost module running at that moment
(torch.utils.module_tracker follows modules through the backward too). Leaf modules get
a row each; a module whose own forward computes something (a residual add, `x @ W`,
`torch.cat` of branches) gets a row for that work. Rows are in execution order.

A module placed twice (the same nn.Linear twice in a Sequential, under two attribute names,
or in two parents) is one row, under its first name in `model.named_modules()` (its
parameters' names in `named_parameters()`, fvcore's canonical name, the label a measured
layer gets), where it first ran: its parameters once, and the MACs, FLOPs, bytes, operator
calls and activations of every call, forward and backward, as torch's FlopCounterMode
totals them per module; its output shape is its first call's. (torchinfo lists a row per
call instead, the parameters in the first.)

Parameters are counted in the rows, so the totals are the sum of the rows: a module's own
parameters go to its row when it starts, and a parameter a running module uses without
calling its owner (`F.linear(x, self.head.weight)`) to the row that uses it. Parameters
and submodules a forward makes on its first call (`self.w = nn.Parameter(...)`) are its
module's, claimed as that forward ends. Each nn.Parameter counts once, by identity, as
model.parameters() holds them: two over one storage count apart. Parameters of modules
that never ran (GoogLeNet's auxiliary classifiers in eval) are in no row and no total;
`Analysis.not_run` names those modules, and those that ran on other tensors than their own
parameters (torch.func.functional_call(module, other_params, ...)), with their own unused:
the rows and that list add up to model.parameters().

A forward that torch's own code cannot run on the meta device (pad_packed_sequence after
`pack_padded_sequence(..., enforce_sorted=False)` reads the sort's indices), or that meets a
tensor of the model's made on the CPU (`x + torch.arange(8)`, made without device=), or that
calls an operator of the user's own with no fake impl (torch.library), is counted
on real CPU tensors of random values instead, when the model is small enough, and says so
(`Analysis.real_tensors`), as is a forward under torch.autocast('cpu', ...) (autocast casts CPU
tensors only: on meta its regions would count at fp32) or torch.autocast(x.device.type, ...)
(no meta autocast); a forward that needs more arguments than the one input tensor is
refused before it is called, and a model's own forward reading values, each in one line. A
factory that fails to build on the meta device (it reads its weights' values as it builds, or
runs its model on a real tensor: a self-check, torch.jit.trace), or whose parametrization
torch cannot set up there (P.orthogonal of a non-square weight: its `base` stays None), builds
on real CPU tensors, as a run builds it (any other failure is raised at once: the factory is
called once), and is counted on meta as any other; a model holding torch.ao's quantized
modules, which have no meta kernels, or a torch.nn layer of no weights (a width of 0), is
refused in one line.

A model that overrides `__call__` (`return self.forward(x)`) runs no hook of its own: work no
module claims during the forward, and in the backward once the outputs' gradients are in, is
the model's own row, as it is of a model that does not.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import re
import sys
import threading
import traceback
import warnings
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from math import prod
from typing import Any

import torch
from torch import nn
from torch.autograd.graph import Node
from torch.nn import functional as F
from torch.nn.modules.module import (
    _global_forward_hooks_with_kwargs,
    register_module_forward_hook,
    register_module_forward_pre_hook,
)
from torch.nn.parameter import UninitializedParameter, is_lazy
from torch.nn.utils import parametrize
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten
from torch.utils.hooks import RemovableHandle
from torch.utils.module_tracker import ModuleTracker

from dlperf.analytic import ops
from dlperf.analytic.conventions import (
    FVCORE_CLOSED,
    MACS_CONVENTIONS,
    PTFLOPS_NOT_REPRODUCED,
    fvcore_aten,
    fvcore_extra,
    fvcore_function,
    fvcore_kind,
    fvcore_products,
    ptflops_macs,
    torchinfo_macs,
)
from dlperf.analytic.receptive import FieldTracker
from dlperf.errors import (
    UserError,
    error_text,
    missing_device,
    missing_forward,
    model_frames,
    out_of_memory,
    raised_by_model,
)
from dlperf.models.walk import named_modules, named_parameters
from dlperf.parsing import is_file_spec
from dlperf.precision import DTYPES, KeepShared, check_default_dtype, counted_as

ROOT = "(model)"
"""Row name of work done in the top-level module's own forward."""


@dataclass
class Layer:
    name: str
    type: str
    output_shape: list[int] | None = None
    params: int = 0
    bias_params: int = 0
    """Of `params`, those named *bias (the course tables count parameters without them)."""
    role: str = "other"
    """conv, pool, fc (a Linear), identity (a pooling that returns its input: torchvision's
    adaptive pool given the size it pools to) or other: the course tables count the outputs
    of the first three as activations."""
    macs: int = 0
    flops: int = 0
    bytes: int = 0
    """Bytes read and written by the layer's operators (views excluded)."""
    activations: int = 0
    """Elements of the layer's output."""
    activation_bytes: int = 0
    calls: int = 0
    """Operator calls that do work (views excluded): each costs dispatch time."""
    backward_macs: int = 0
    backward_flops: int = 0
    backward_bytes: int = 0
    backward_calls: int = 0
    kind_flops: Counter[str] = field(default_factory=Counter)
    """Forward FLOPs per operator kind (`ops.KINDS`), for the time model."""
    backward_kind_flops: Counter[str] = field(default_factory=Counter)
    peer_macs: Counter[str] = field(default_factory=Counter)
    """Forward MACs as each peer (torchinfo, ptflops, fvcore) counts them."""
    functional: Counter[str] = field(default_factory=Counter)
    """Calls of functional layers (F.conv2d, F.max_pool2d, F.linear) made by the row's own
    code, the row being no such layer (role other), by name: their outputs are activations
    of no row of their own (`Analysis.activations_note`)."""
    by_output: bool = False
    """Whether `functional`'s calls ran in a layer, whose activations are its output alone."""


INTERNAL = ("kind_flops", "backward_kind_flops", "peer_macs", "functional", "by_output")
"""Layer fields the time model reads that `analyze --json` leaves out."""
BACKWARD = ("backward_macs", "backward_flops", "backward_bytes", "backward_calls")


@dataclass
class NotRun:
    """A module that never ran in the counted pass, with its parameters that no row counts; or
    (`ran`) one that ran on other tensors than its own parameters (torch.func.functional_call),
    with those of its own that no row counts."""

    name: str
    type: str
    params: int
    bias_params: int
    ran: bool = False


ACTIVATIONS = {
    "all": "outputs of every row",
    "conv-pool-fc": "outputs of conv, pool and fc layers (not of a pool that returns its input)",
}
"""Which rows' outputs the activation totals count: every row's, or (as course tables count
them) those of convolution, pooling and fully connected layers only."""


@dataclass
class Analysis:
    model: str
    input: list[int]
    batch: int
    train: bool
    precision: str
    layers: list[Layer]
    params: int
    """Every parameter of the model, those of modules that never ran included."""
    trainable_params: int
    """Of the rows' parameters, those that need a gradient."""
    trainable_bias_params: int
    receptive_field: dict[str, Any]
    unsupported_ops: dict[str, int]
    not_run: list[NotRun] = field(default_factory=list)
    training_memory: dict[str, Any] | None = None
    classes: int | None = None
    """The classes the model was built for; None when its factory takes no num_classes."""
    classes_source: str = "the module as it was built"
    bias: bool = True
    """Whether parameter counts include biases."""
    activations: str = "all"
    """The rows whose outputs count as activations: a key of ACTIVATIONS."""
    macs_convention: str = "dlperf"
    """Whose MACs `macs` counts: a key of conventions.MACS_CONVENTIONS."""
    arguments: dict[str, Any] = field(default_factory=dict)
    """The factory's arguments (defaults filled in) besides num_classes and in_channels."""
    transfer: str = "scratch"
    """model.transfer: feature-extract counts the backbone frozen, only the head trainable."""
    kept: str | None = None
    """The model's own dtype (float64, float16 or bfloat16) where it was counted as built at
    fp32, not cast (`kept_dtype`); None where it was cast to the precision's."""
    complex_dtypes: list[str] = field(default_factory=list)
    """The complex dtypes (complex64, ...) of the tensors whose arithmetic was counted in real
    operations (ops.COMPLEX_COUNTED); empty for a model computing on real tensors only."""
    shared_storage: list[list[str]] = field(default_factory=list)
    """Names of the Parameters that share one storage (`dec.weight = nn.Parameter(enc.weight.t())`),
    a group each: counted apart, by identity, as model.parameters() counts them."""
    output_width: int | None = None
    """The last dimension of the model's output, where it returns one tensor of two or more
    dimensions (its scores: the classes it was built for); else None."""
    output_rank: int | None = None
    """The dimensions of the model's output, where it returns one tensor; else None."""
    classes_note: str | None = None
    """Why `classes` is the output's width, not the number the model was given: a model that
    does not size its output by num_classes; None where they agree."""
    real_tensors: str | None = None
    """Why the model was counted on real CPU tensors of random values, not on the meta device
    (torch's own function that reads tensor values, a tensor the model made on the CPU); None
    when counted on meta."""
    unregistered: str | None = None
    """A warning that the model keeps layers in a plain list, tuple or dict, unregistered:
    their MACs are counted, their parameters are not (registry.unregistered_note)."""
    model_notes: list[str] = field(default_factory=list)
    """What the model's file did to the process as it was imported or its factory ran, put
    back, one line each (models.registry.noting), for the caller to tell as run tells them."""

    def macs_of(self, layer: Layer) -> int:
        return (
            layer.macs
            if self.macs_convention == "dlperf"
            else layer.peer_macs[self.macs_convention]
        )

    def params_of(self, counted: Layer | NotRun) -> int:
        return counted.params - (0 if self.bias else counted.bias_params)

    def counts_activations(self, layer: Layer) -> bool:
        return self.activations == "all" or layer.role in ("conv", "pool", "fc")

    def totals(self) -> dict[str, Any]:
        def total(key: str) -> int:
            return sum(getattr(layer, key) for layer in self.layers)

        def activations(key: str) -> int:
            return sum(getattr(x, key) for x in self.layers if self.counts_activations(x))

        flops = total("flops")
        # Convolution operators, functional ones included, whichever module ran them.
        conv_flops = sum(
            layer.kind_flops["conv"] + layer.kind_flops["depthwise_conv"] for layer in self.layers
        )
        out: dict[str, Any] = {
            "params": sum(self.params_of(layer) for layer in self.layers),
            "trainable_params": self.trainable_params
            - (0 if self.bias else self.trainable_bias_params),
            "bias_params": total("bias_params"),
            "params_not_run": sum(self.params_of(m) for m in self.not_run),
            "macs": sum(self.macs_of(layer) for layer in self.layers),
            "flops": flops,
            "bytes": total("bytes"),
            "activations": activations("activations"),
            "activation_bytes": activations("activation_bytes"),
            "calls": total("calls"),
            "conv_flops_share": conv_flops / flops if flops else 0.0,
            "receptive_field": self.receptive_field,
        }
        if self.train:
            out |= {
                "backward_macs": total("backward_macs"),
                "backward_flops": total("backward_flops"),
                "backward_bytes": total("backward_bytes"),
                "backward_calls": total("backward_calls"),
                "step_flops": flops + total("backward_flops"),
                "training_memory": self.training_memory,
            }
        return out

    def functional_left_out(self) -> str | None:
        """The functional layers whose outputs the activation totals leave out, and where
        ("F.conv2d x1, F.linear x1 in (model)"); None where none is. A row's activations are
        its output (a layer's) or its operators' (a container's own), so those of F.conv2d,
        F.max_pool2d and F.linear go uncounted under conv-pool-fc, which counts conv, pool
        and linear modules' outputs; and under `all` where a layer runs two or more of them,
        its output standing for the last."""
        if self.activations == "all":
            rows = [r for r in self.layers if r.by_output and r.functional.total() >= 2]
        else:
            rows = [r for r in self.layers if r.role == "other" and r.functional]
        if not rows:
            return None
        calls = sum((r.functional for r in rows), Counter[str]())
        where = ", ".join(r.name for r in rows[:3])
        where += f" and {len(rows) - 3} more" if len(rows) > 3 else ""
        return f"{listed_ops(dict(sorted(calls.items())))} in {where}"

    def activations_note(self) -> str | None:
        """`functional_left_out` as a warning says it; None where nothing is left out."""
        left = self.functional_left_out()
        if left is None:
            return None
        counted = (
            "a layer's output alone"
            if self.activations == "all"
            else "the outputs of conv, pool and linear modules (conv-pool-fc)"
        )
        return (
            f"activations count {counted}: the outputs of {left} are not counted; written "
            "as nn modules (nn.Conv2d, nn.MaxPool2d, nn.Linear), they would be"
        )

    def unsupported_note(self) -> str | None:
        """What the counts leave out, and a count made on real tensors rather than the meta
        device, worth a warning; None when every operator counted on meta."""
        said = [x for x in (self.classes_note, self.unregistered) if x is not None]
        if self.real_tensors is not None:
            said.append(
                "counted on real CPU tensors of random values, not on the meta device: "
                + self.real_tensors
            )
        if self.unsupported_ops:
            said.append(
                f"not counted (no handler for these operators): {listed_ops(self.unsupported_ops)}"
            )
        return "; ".join(said) or None

    def tensors(self) -> str:
        """What the model was counted on: the meta device (shapes, no values), or real CPU
        tensors of random values and why."""
        if self.real_tensors is None:
            return "meta (shapes, no values)"
        return f"real CPU tensors of random values ({self.real_tensors})"

    def precision_counted(self) -> str:
        """What the count's precision describes: the precision's dtype, or the model's float64
        as built, and its complex tensors, which no precision casts."""
        said = kept_note(self.kept) if self.kept is not None else counted_as(self.precision)
        if not self.complex_dtypes:
            return said
        parts = {"complex32": "fp16", "complex64": "fp32", "complex128": "fp64"}
        kinds = ", ".join(
            f"{d} (two {parts.get(d, 'real')} numbers each)" for d in self.complex_dtypes
        )
        return f"{said}; complex tensors kept as built, not cast: {kinds}"

    def params_counted(self) -> str | None:
        """How parameters sharing one storage are counted, None where none share one."""
        if not self.shared_storage:
            return None
        shares = "; ".join(" and ".join(group) for group in self.shared_storage)
        return (
            "each nn.Parameter once, by identity, as model.parameters() counts them: these "
            f"share one storage and are counted apart, each in its module's row: {shares}"
        )

    def to_dict(self) -> dict[str, Any]:
        left_out = INTERNAL if self.train else INTERNAL + BACKWARD
        layers = []
        for layer in self.layers:
            row = {k: v for k, v in asdict(layer).items() if k not in left_out}
            row["params"] = self.params_of(layer)
            row["macs"] = self.macs_of(layer)
            if not self.counts_activations(layer):
                row["activations"] = row["activation_bytes"] = 0
            layers.append(row)
        shown = ("model", "arguments", "input", "batch", "transfer", "train", "precision",
                 "classes", "classes_source")  # fmt: skip
        return {
            **{key: getattr(self, key) for key in shown},
            "conventions": {
                "params": "with biases" if self.bias else "without biases",
                "activations": self.activations,
                "macs": self.macs_convention,
                "macs_counts": MACS_CONVENTIONS[self.macs_convention],
                "precision": self.precision_counted(),
                **({"complex": ops.COMPLEX_COUNTED} if self.complex_dtypes else {}),
                **({"tensors": self.tensors()} if self.real_tensors is not None else {}),
                **({"params_counted": shared} if (shared := self.params_counted()) else {}),
                **(
                    {"activations_not_counted": left}
                    if (left := self.functional_left_out())
                    else {}
                ),
            },
            "totals": self.totals(),
            "layers": layers,
            # "ran" only where true: a module that ran on other tensors than its own parameters
            "not_run": [
                {k: v for k, v in asdict(m).items() if k != "ran" or v}
                | {"params": self.params_of(m)}
                for m in self.not_run
            ],
            "unsupported_ops": self.unsupported_ops,
        }


# --- building a model without weights -------------------------------------------------------


# Counting hooks every module of the process (torch's global module hooks, ModuleTracker) and
# building on meta patches nn.Module itself: two at once would each see the other's modules,
# and a build's restore could put back the other's patch for good, so they take turns.
_ONE_COUNT = threading.RLock()


def listed_ops(unsupported_ops: dict[str, int]) -> str:
    """'aten._trilinear x2, aten.cdist x1': the operators no handler counted, with their calls,
    as analyze's warning and predict's totals both say them."""
    return ", ".join(f"{op} x{n}" for op, n in unsupported_ops.items())


@contextlib.contextmanager
def _weights_on_meta() -> Iterator[None]:
    """Move every parameter and buffer to the meta device as it is registered.

    Like accelerate's init_empty_weights: construction code still runs on the CPU (some
    of it reads tensor values, e.g. RegNet's width schedule), but weights never get
    storage and their initialisers do nothing.
    """

    # Tensors registered from one CPU storage (two buffers of one table) share one on meta
    # too: moved one at a time, each buffer's bytes counted apart.
    to_meta = KeepShared(lambda t: t.to("meta"))

    # `self`, as the methods they replace name it (a caller may pass it by keyword).
    def on_meta_parameter(self: nn.Module, name: str, param: nn.Parameter | None) -> None:
        if isinstance(param, UninitializedParameter):
            param = UninitializedParameter(param.requires_grad, device="meta", dtype=param.dtype)
        elif param is not None and not param.is_meta:  # on meta: a tied weight, kept the same
            param = nn.Parameter(to_meta(param), requires_grad=param.requires_grad)
        register_parameter(self, name, param)

    def on_meta_buffer(
        self: nn.Module, name: str, tensor: torch.Tensor | None, persistent: bool = True
    ) -> None:
        if isinstance(tensor, torch.Tensor) and not tensor.is_meta:
            tensor = to_meta(tensor)
        register_buffer(self, name, tensor, persistent)

    with _ONE_COUNT:  # the methods read, replaced and put back by one build at a time
        register_parameter = nn.Module.register_parameter
        register_buffer = nn.Module.register_buffer
        nn.Module.register_parameter = on_meta_parameter  # type: ignore[method-assign]
        nn.Module.register_buffer = on_meta_buffer  # type: ignore[method-assign]
        try:
            yield
        finally:
            nn.Module.register_parameter = register_parameter  # type: ignore[method-assign]
            nn.Module.register_buffer = register_buffer  # type: ignore[method-assign]


def default_input(name: str) -> list[int]:
    """The input a registered model is meant for (the paper's AlexNet: 3x227x227), else
    ImageNet size for torchvision's zoo and CIFAR size for dlperf's models and users' files."""
    from dlperf.models import list_models
    from dlperf.models.registry import registered_factory, registered_input

    meant = registered_input(name)
    if meant is not None:
        return meant
    if registered_factory(name) is not None:  # without importing torchvision (3 CPU-s a process)
        return [3, 32, 32]
    return [3, 224, 224] if name in list_models()["torchvision"] else [3, 32, 32]


FROM_KWARGS = "the factory's own (it takes **kwargs; read from the output's last dimension)"
"""Where the classes of a factory taking **kwargs, not given num_classes, come from: its output's
last dimension, as counted."""


def _factory_classes(
    fn: Callable[..., nn.Module],
    name: str,
    num_classes: int | None,
    default_source: str,
    option: str = "analyze.classes",
) -> tuple[int | None, str]:
    """The classes a factory builds for, and where that number comes from: the factory's
    own default unless `num_classes` (given as `option`) is given."""
    from dlperf.models.registry import factory_parameters

    params = factory_parameters(fn)
    # `def build(**kw)` is passed num_classes as any other factory is
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    if num_classes is not None:
        if "num_classes" not in params and not takes_any:
            factory = name.rpartition(":")[2]
            raise UserError(
                f"{option} {num_classes}: the factory {factory} takes no num_classes",
                f"leave {option} unset: the factory sizes its own head",
            )
        return num_classes, "--classes"
    if "num_classes" not in params and takes_any:
        return None, FROM_KWARGS  # read from the model's output once counted (`analyze`)
    if "num_classes" not in params:
        return None, "the model takes no num_classes"
    default = params["num_classes"].default
    if isinstance(default, int):
        return default, default_source
    return None, "set by the factory (it has no num_classes default)"


def refuse_unused_classes(name: str, num_classes: int, option: str) -> None:
    """Refuse the `num_classes` a user gave (as `option`) for model `name` (a model file's or
    dlperf's factory) whose factory takes no num_classes, in analyze's words: the model would
    be built, counted or exported for its own number of classes without a word. A model file
    is imported to read its factory's parameters."""
    from dlperf.models.registry import load_factory, registered_factory

    fn = load_factory(name) if is_file_spec(name) else registered_factory(name)
    if fn is not None:  # torchvision's builders all take num_classes
        _factory_classes(fn, name, num_classes, "", option)


def other_width(width: int | None, rank: int | None, classes: int) -> bool:
    """Whether an output of rank `rank` is [batch, `width`] scores of another number than
    `classes`."""
    return rank == 2 and width is not None and width != classes


def unused_classes(
    width: int | None, rank: int | None, classes: int, source: str, ignored: bool = False
) -> str | None:
    """What to say of a model built for `classes` classes (given by `source`) whose output,
    of rank `rank`, is [batch, `width`] scores of another number (`other_width`): the model
    sizes its own output (an nn.Identity head, a factory ignoring num_classes, one adding to
    it), as a run would find. That it does not use them is said only where known (`ignored`:
    `ignores_classes`). None where the output is `classes` wide, or no [batch, k] of scores."""
    if not other_width(width, rank, classes):
        return None
    said = (
        f"the model's output is [batch, {width}]: {width} scores, not the {classes} classes it "
        f"was given ({source})"
    )
    if ignored:
        return f"{said}, which it does not use"
    return f"{said}: a classifier ends in one score per class"


def ignores_classes(
    name: str, shape: Sequence[int], classes: int, width: int, kwargs: dict[str, Any]
) -> bool:
    """Whether model `name` (a model file's factory, dlperf's or torchvision's), built with
    `kwargs` for another number of classes than `classes`, still ends in `width` scores on
    `shape` images: its factory does not use num_classes. Asked only of a model whose output
    is of another width (`other_width`): a second build and forward, on the meta device, its
    prints, notes and warnings dropped (the first build said them). False where it cannot be
    told (that build or forward fails): no claim is made then."""
    from dlperf.models.registry import noting

    other = classes + 1 if classes + 1 != width else classes + 2
    try:
        with (
            noting(),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),  # where a factory's prints go
            warnings.catch_warnings(),
            torch.random.fork_rng(devices=[]),
            torch.compiler.set_stance("force_eager"),  # a compiled submodule compiles nothing
        ):
            warnings.simplefilter("ignore")
            model = build_model(name, shape, other, **kwargs)[0].to("meta").eval()
            with torch.no_grad():
                out = model(torch.zeros(DRY_PROBE, *shape, device="meta"))
    except Exception:  # anything at all: the factory's, the forward's, the meta device's
        return False
    return isinstance(out, torch.Tensor) and out.dim() == 2 and out.shape[-1] == width


DRY_PROBE = 2
"""The batch of `ignores_classes`' forward: two images, as batch norm takes in any mode."""


def _arguments(fn: Callable[..., nn.Module], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments a factory was called with, its defaults filled in, those the table's
    title already gives (num_classes, in_channels) left out."""
    from dlperf.models.registry import accepted, factory_parameters

    params = factory_parameters(fn)
    called = {n: p.default for n, p in params.items() if p.default is not inspect.Parameter.empty}
    called |= accepted(fn, kwargs)  # a model file's factory is given only what it takes
    return {k: v for k, v in called.items() if k not in ("num_classes", "in_channels")}


def build_model(
    name: str, input_shape: Sequence[int], num_classes: int | None = None, **kwargs: Any
) -> tuple[nn.Module, int | None, str, dict[str, Any]]:
    """`create_model` with weights on the meta device, with the classes it is built for,
    where that number comes from (`num_classes`, else the factory's own default, else 1000
    for torchvision's zoo) and the factory's arguments."""
    from dlperf.models import create_model
    from dlperf.models.registry import build_from_factory, load_factory, registered_factory

    if is_file_spec(name):
        with _weights_on_meta():  # what the file builds as it is imported too
            fn = load_factory(name)
        classes, source = _factory_classes(fn, name, num_classes, "the factory's default")
        sized = {"num_classes": num_classes} if num_classes is not None else {}
        given = {**sized, "in_channels": input_shape[0], **kwargs}
        model = _on_meta_else_real(lambda: build_from_factory(fn, name, given))
        return model, classes, source, _arguments(fn, kwargs)
    registered = registered_factory(name)
    if registered is not None:
        default = "default for dlperf's models"
        classes, source = _factory_classes(registered, name, num_classes, default)
        arguments = _arguments(registered, kwargs)
    else:
        source = "--classes" if num_classes is not None else "default for torchvision models"
        classes, arguments = num_classes or 1000, dict(kwargs)
    model = _on_meta_else_real(
        lambda: create_model(name, num_classes=classes, in_channels=input_shape[0], **kwargs)
    )
    return model, classes, source, arguments


def _on_meta_else_real(build: Callable[[], nn.Module]) -> nn.Module:
    """`build()` with its weights on the meta device; where that fails, on real CPU tensors
    instead, as a run builds it: seeded, the global generator left as it was. A build fails on
    meta for reasons of its own, too many to list: it reads its weights' values (rescaling its
    init by the largest weight, torch.ao's quantize_dynamic), runs its model on a real tensor
    (a self-check forward, torch.jit.trace). The real build says whether the factory works, and
    where it does not, its error is the one a run gives. The count is made on the meta device
    either way (analyze_module moves the model there). Only an error the meta device explains
    (`_meta_explains`) is retried: any other is the factory's own, raised once, so that what it
    did before it failed (a print, a download of pretrained weights) is not done twice."""
    with warnings.catch_warnings():
        # a zero-width layer's init: refused in one line once built (_refuse_zero_size)
        warnings.filterwarnings("ignore", _ZERO_INIT, UserWarning)
        try:
            with _weights_on_meta():
                model = build()
        except Exception as e:
            if not _meta_explains(e):
                raise
        else:
            with nesting_told(model):  # its walk of the modules, as deep as they nest
                ran = _parametrizations_run(model)
            if ran:
                return model
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            return build()


def _parametrizations_run(model: nn.Module) -> bool:
    """Whether the parametrizations (torch.nn.utils.parametrize) of `model`, built on the meta
    device, compute their tensors there, unless for a reason of their own. torch's
    register_parametrization passes over a NotImplementedError of a parametrization's
    right_inverse: P.orthogonal(nn.Linear(64, 10)) completes its weight to an orthogonal
    `base` by torch.geqrf, which has no Meta kernel, so on meta its base stayed None and each
    forward failed inside torch ("unsupported operand type(s) for @: 'NoneType' and
    'Tensor'"), blamed on the input. Such a failure (`_meta_explains`) builds it for real."""
    for module in model.modules():
        lists = module.parametrizations if parametrize.is_parametrized(module) else None
        for name in lists.keys() if isinstance(lists, nn.ModuleDict) else ():
            try:
                with torch.no_grad():
                    getattr(module, name)
            except Exception as e:
                if _meta_explains(e):
                    return False
    return True


_ZERO_INIT = "Initializing zero-element tensors is a no-op"
"""torch.nn.init's warning for a layer of no weights (nn.Conv2d(3, 0, 3))."""


def _refuse_zero_size(model: nn.Module, command: str) -> None:
    """Refuse in one line a torch.nn layer holding a parameter of no elements (a width or
    channel count of 0 in model.kwargs): the meta device counts it, 0 MACs, where torch's CPU
    kernels refuse to run it."""
    for where, module in model.named_modules():
        if not type(module).__module__.startswith("torch.nn."):
            continue
        for pname, p in module.named_parameters(recurse=False):
            if not is_lazy(p) and p.numel() == 0:
                raise UserError(
                    f"layer {where or ROOT} ({_type_name(module)}) has a parameter of no "
                    "elements, "
                    f"{pname} of shape {list(p.shape)}: torch cannot run such a layer, and "
                    f"{command} would count it as 0",
                    "check the model's sizes: model.kwargs may set a width or channel count to 0",
                )


# torch's words for an operation the meta device cannot do: "cannot be called on meta tensors",
# "Cannot copy out of meta tensor", "can't convert meta device type tensor to numpy", "Tensor on
# device meta is not on the expected device cpu", "register_meta ... data-independent",
# "Could not run ... with arguments from the 'Meta' backend".
_NAMES_META = re.compile(r"\bmeta\b|_meta\b|'Meta'", re.IGNORECASE)


def _meta_explains(e: BaseException) -> bool:
    """Whether building on the meta device may be why `e` was raised: its message, or that of
    an error it wraps (a factory's error told in one line by models.registry), names the meta
    device, or torch's own code raised it (a check meeting a meta tensor: "cond must be a
    bool, but got a Tensor" of torch.jit.trace on meta weights). A file the factory cannot
    read, a download of pretrained weights that fails (OSErrors), the model's own `raise`,
    an error of another library fail the same on real tensors."""
    seen: set[int] = set()
    error: BaseException | None = e
    original = e
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if _NAMES_META.search(error_text(error)):  # a factory's own __str__ may raise
            return True
        original = error
        error = error.__cause__ or error.__context__
    if isinstance(original, OSError) or raised_by_model(original):
        return False
    frames = [frame for frame, _ in traceback.walk_tb(original.__traceback__)]
    if not frames:
        return False
    module = str(frames[-1].f_globals.get("__name__", ""))
    return module.split(".")[0] == "torch" and not module.startswith("torch.hub")


# --- counting ---------------------------------------------------------------------------------


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


# Matrix products whose operands torch's kernels want in one dtype, while their meta kernels
# accept any mix: a float64 input meeting bf16 weights counted, and then failed when measured.
_ONE_DTYPE = frozenset({"mm", "addmm", "bmm", "baddbmm", "addmv", "mv", "dot", "vdot"})


def _same_dtypes(func: Any, args: Any) -> None:
    """Refuse, as torch off the meta device does, a matrix product of operands of several
    floating dtypes."""
    name = ops.op_name(func)
    if name not in _ONE_DTYPE:
        return
    if name in ("addmm", "baddbmm", "addmv"):  # the added term after the product's operands
        args = (*args[1:], args[0])
    dtypes = list(
        dict.fromkeys(t.dtype for t in _tensors(args) if t.is_floating_point() or t.is_complex())
    )
    if len(dtypes) > 1:
        got = " and ".join(str(d).removeprefix("torch.") for d in dtypes[-2:])
        raise RuntimeError(f"mat1 and mat2 must have the same dtype, but got {got}")


class _CountingMode(TorchDispatchMode):  # type: ignore[no-untyped-call]
    def __init__(
        self,
        model: nn.Module,
        tracker: ModuleTracker,
        fields: FieldTracker | None,
        command: str = "analyze",
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.tracker = tracker
        self.command = command
        self.fields = fields
        # Every name of a module placed twice (in two parents, twice in one, under two
        # attribute names): torch's ModuleTracker may give it any of them
        self.modules = dict(model.named_modules(remove_duplicate=False))
        self.names: dict[nn.Module, str] = {}
        """Each module's row name: its first (`canonical`)."""
        for name, module in self.modules.items():
            self.names.setdefault(module, name)
        self.rows: dict[str, Layer] = {}
        self.unsupported: Counter[str] = Counter()
        self.complex_dtypes: set[torch.dtype] = set()
        """Complex dtypes of the tensors whose arithmetic was counted in real operations."""
        self.claimed: set[int] = set()
        """ids of the parameters a row counts: each is counted once (tied weights)."""
        self.model = model
        self.by_id = {id(p): (n, p) for n, p in model.named_parameters()}
        """The model's parameters before the forward, by identity: each once, as
        model.parameters() holds them (a tied weight under its first name)."""
        self.by_storage: dict[int, list[tuple[str, nn.Parameter]]] = {}
        """The same by storage: two Parameters over one (`nn.Parameter(enc.weight.t())`) are
        two parameters, each counted in its own row."""
        for named in self.by_id.values():
            self.by_storage.setdefault(named[1].untyped_storage()._cdata, []).append(named)
        self.ran: set[str] = set()
        """The modules whose forward started: none of them is listed as never run."""
        self.layers = {m for m in self.names if _is_layer(m)}
        owners = {m for m in self.names if next(m.parameters(recurse=False), None) is not None}
        self.starting = owners | self.layers
        """The modules that get a row when they start: layers, and owners of parameters."""
        self.trainable = Counter[bool]()
        """Trainable parameters the rows count, biases (True) and others."""
        self.outside_is_root = False
        """Whether an operation no module claims is the model's own: during the forward, and in
        the backward once the outputs' gradients are in (before then: the loss's). A model whose
        `__call__` is overridden (`return self.forward(x)`) runs no module hook of its own."""
        self.nodes: dict[Node, str] = {}
        """The innermost module whose forward made each autograd node: the row of the backward
        work the node does."""
        self.entered: dict[nn.Module, list[set[Node]]] = {}
        """The gradient nodes of each running module's inputs (a module in a forward of its
        own: a list), empty once no forward runs."""
        self.fvcore_call: str | None = None
        """How fvcore's tracer sees the products of the torch-level call running now
        (conventions.fvcore_kind, set by _FunctionCalls); None where none runs."""
        self.call = ""
        """The name of the torch-level call running now (set by _FunctionCalls), "" where
        none runs: which of its ATen kernel's outputs it returns (`ops.public_outputs`)."""

    def claim(self, row: Layer, params: Iterable[tuple[str, nn.Parameter]]) -> None:
        for name, p in params:
            if id(p) not in self.claimed:
                self.claimed.add(id(p))
                row.params += p.numel()
                row.bias_params += p.numel() if _is_bias(name) else 0
                self.trainable[_is_bias(name)] += p.numel() if p.requires_grad else 0

    def row(self, name: str) -> Layer:
        if name not in self.rows:
            module = self.modules[name]
            role = _role(module) if _is_leaf(module) else "other"
            self.rows[name] = Layer(name or ROOT, _type_name(module), role=role)
            # Direct parameters only: a leaf holds all of its own, a container's rows
            # would otherwise repeat its children's.
            self.claim(self.rows[name], self.own_parameters(module))
        return self.rows[name]

    def own_parameters(self, module: nn.Module) -> list[tuple[str, nn.Parameter]]:
        """`module`'s direct parameters that are the model's, or nn.Parameters its forward
        made: not the tensors torch.func.functional_call puts in their place for a call (the
        slices vmap gives of stacked weights), which are no parameters of the model."""
        own = module.named_parameters(recurse=False)
        return [(n, p) for n, p in own if id(p) in self.by_id or isinstance(p, nn.Parameter)]

    def functional_layer(self, name: str, func: Any, args: Any) -> None:
        """Note in row `name` a call of a functional layer (F.conv2d) that the row is not (an
        nn.Conv2d's own call is its output): an activation no row counts as its own. A
        matrix product with a weight of the model (`x @ self.w`, torch.mm) is an fc layer;
        one of two activations (attention's q @ k) is none."""
        called = getattr(func, "__name__", "")
        if called in MATRIX_PRODUCTS:
            if not any(self.is_weight(t) for t in _tensors(args)):
                return
            shown = MATRIX_PRODUCTS[called]
        elif FUNCTIONAL_LAYERS.fullmatch(called):
            shown = f"F.{called.removesuffix('_with_indices')}"
        else:
            return  # no row made here: rows stand in the order their work starts
        row = self.row(name)
        if row.role == "other":
            row.functional[shown] += 1
            hooked = bool(self.tracker.parents - {"Global"})  # else each op's output counts
            row.by_output = hooked and _is_layer(self.modules[name])

    def is_weight(self, t: torch.Tensor) -> bool:
        """Whether `t` is a parameter of the model, or a view of one (`self.w.t()`)."""
        return any(x is not None and id(x) in self.by_id for x in (t, t._base))

    def claim_used(self, row: Layer, args: Any) -> None:
        """Count parameters of modules that were not called, used by `row`'s operator."""
        used = (self.parameter_of(t) for t in _tensors(args))
        self.claim(row, (named for named in used if named is not None))

    def parameter_of(self, t: torch.Tensor) -> tuple[str, nn.Parameter] | None:
        """The parameter that `t` is, or is a view of (`self.enc.weight.t()`): by identity
        first, the view's base, else by storage (`.data`, `.detach()`), where no parameter of
        that storage is counted yet. By storage alone, a transposed use of enc.weight counted
        dec.weight, a Parameter of its own over enc.weight's storage, in enc's row."""
        for tensor in (t, t._base):
            if tensor is not None and id(tensor) in self.by_id:
                return self.by_id[id(tensor)]
        sharing = self.by_storage.get(t.untyped_storage()._cdata, [])
        if not sharing or any(id(p) in self.claimed for _, p in sharing):
            return None
        return sharing[0]

    def shared_storage(self) -> list[list[str]]:
        """The names of the Parameters that share a storage, each group in the model's order
        (`[["enc.weight", "dec.weight"]]`): counted apart, by identity."""
        return [[n for n, _ in group] for group in self.by_storage.values() if len(group) > 1]

    def adopt(self) -> None:
        """Name the submodules a forward made (`self.head = nn.Linear(...)` on the first
        call) as the model names them, in the rows and in the tracker, which knows only those
        it saw when their parent started, and names any other by its class alone."""
        root = self.tracker._get_mod_name(self.model)  # type: ignore[no-untyped-call]
        for name, module in self.model.named_modules(remove_duplicate=False):
            if name in self.modules:
                continue
            self.modules[name] = module
            self.names.setdefault(module, name)
            self.tracker._known_modules[module] = f"{root}.{name}"
            if _is_layer(module):
                self.layers.add(module)
            if _is_layer(module) or next(module.parameters(recurse=False), None) is not None:
                self.starting.add(module)

    def claim_made(self, module: nn.Module) -> None:
        """Count in `module`'s row the parameters its forward made (`self.w =
        nn.Parameter(...)` on the first call, as a lazy layer does), as its forward ends: a
        row claims its module's own parameters when it starts, before these existed."""
        name = self.names.get(module)
        if name is None:
            return
        own = self.own_parameters(module)
        made = [(n, p) for n, p in own if id(p) not in self.by_id and id(p) not in self.claimed]
        if made:
            self.claim(self.row(name), made)

    def current(self) -> str | None:
        """The innermost running module (its name in `named_modules`), None outside the model.
        In the backward: the module whose forward made the autograd node at work. Not the
        tracker's innermost there: it holds a module as running until its input's gradient is
        complete, so two modules reading one input both run, and set order picked one."""
        if self.tracker.is_bw and not self.entered:  # no forward recomputed in the backward
            node = torch._C._current_autograd_node()
            if node is not None and node in self.nodes:
                return self.nodes[node]
        names = self.tracker.parents - {"Global"}
        if not names:
            return "" if self.outside_is_root else None
        return self.canonical(max(names, key=lambda n: n.count(".")).partition(".")[2])

    def canonical(self, name: str) -> str:
        """The row name of the module the tracker calls `name`: a module placed twice is one
        row, under its first name, whichever name the tracker knows it by (it names one by
        its last parent, and a second place in one parent by the first)."""
        module = self.modules.get(name)
        return name if module is None else self.names[module]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if ops.decomposable(func):  # inference mode's conv2d: counted as the ops it runs
            with self:  # they come back here, each counted (torch's FlopCounterMode does so)
                decomposed = func.decompose(*args, **(kwargs or {}))
            if decomposed is not NotImplemented:
                return decomposed
        try:
            _same_dtypes(func, args)
            out = func(*args, **(kwargs or {}))
        except Exception as e:
            _RAISED_INSIDE.error = e  # what a TorchScript model's interpreter drops (error_line)
            raise
        name = self.current()
        if name is None:  # the seed of the backward (the loss), not the network's work
            return out
        if self.fields is not None and not self.tracker.is_bw:
            self.fields.op(func, args, kwargs or {}, out, name or ROOT)
        if ops.is_view(func) or ops.is_marker(func):  # no work: no cost, bytes or call
            return out
        cost = ops.cost_of(func, args, out, kwargs)
        shaped = cost  # as the peers count it: by shapes, complex or not
        if ops.touches_complex(args, out):
            shaped = ops.cost_of(func, args, out, kwargs, as_real=False)
            if cost is not None and cost != (0, 0):
                self.complex_dtypes |= {t.dtype for t in _tensors((args, out)) if t.is_complex()}
        if cost is None:
            # an operator counted on real tensors, with no rule for complex ones, says so
            on = " on complex tensors" if shaped is not None else ""
            self.unsupported[f"{func.namespace}.{func.overloadpacket.__name__}{on}"] += 1
            cost = ops.Cost(0, 0)
        row = self.row(name)
        if not self.tracker.is_bw:
            self.claim_used(row, args)
        moved = sum(_nbytes(t) for t in _tensors((args, out)))
        kind = ops.kind_of(ops.op_name(func), args)
        if self.tracker.is_bw:
            row.backward_macs += cost.macs
            row.backward_flops += cost.flops
            row.backward_bytes += moved
            row.backward_calls += 1
            row.backward_kind_flops[kind] += cost.flops
            return out
        row.macs += cost.macs
        peer = shaped.macs if shaped is not None else 0
        row.peer_macs["fvcore"] += fvcore_aten(ops.op_name(func), peer, self.fvcore_call)
        row.peer_macs["fvcore"] += fvcore_extra(ops.op_name(func), args, out)
        row.flops += cost.flops
        row.bytes += moved
        row.calls += 1
        row.kind_flops[kind] += cost.flops
        if self.counts_ops(name) and not func._schema.is_mutable:
            # A container's own op output is an activation; a layer's is its module output.
            # Of a kernel, the outputs its function returns (F.layer_norm: not mean and rstd).
            every, public = _tensors(out), ops.public_outputs(ops.op_name(func), self.call)
            produced = every if public is None else [every[i] for i in public if i < len(every)]
            row.activations += sum(t.numel() for t in produced)
            row.activation_bytes += sum(_nbytes(t) for t in produced)
            row.output_shape = list(produced[0].shape) if produced else row.output_shape
        return out

    def counts_ops(self, name: str) -> bool:
        """Whether row `name`'s activations are its operators' outputs: a container's, or the
        model's own work (no module running), whose hook (a layer's output) never runs."""
        unhooked = not self.tracker.parents - {"Global"}
        return unhooked or not _is_layer(self.modules[name])

    def returned(self, out: torch.Tensor) -> None:
        """The running row's output shape is `out`'s where its operators' outputs are its
        activations: a call's result that a view made of its last operator's output (torch's
        attention squeezes the batch dimension it gave its kernel), as a layer's would be."""
        name = self.current()
        if name is not None and name in self.rows and self.counts_ops(name):
            self.rows[name].output_shape = list(out.shape)

    def layer_hooks(self) -> list[RemovableHandle]:
        """Give every layer, and every module with parameters of its own, a row when it starts
        (execution order); a layer's row gets its output at the end.

        The hooks are global, for every module, and act on the model's: a TorchScript
        submodule refuses hooks of its own but runs the global ones.
        """

        def started(module: nn.Module, args: Any) -> None:
            if module not in self.names:  # made by a running forward, or not the model's
                self.adopt()
            name = self.names.get(module)
            if name is None:
                return
            self.ran.add(name)
            if module in self.starting:
                self.row(name)

        def finished(module: nn.Module, args: Any, out: Any) -> None:
            self.claim_made(module)
            # a checkpoint's recompute in the backward makes no forward activation
            if module not in self.layers or self.tracker.is_bw:
                return
            row = self.row(self.names[module])
            produced = _layer_outputs(module, out)
            row.activations += sum(t.numel() for t in produced)
            row.activation_bytes += sum(_nbytes(t) for t in produced)
            # A layer called twice: its first call's, where its row stands
            if row.output_shape is None:
                row.output_shape = list(produced[0].shape) if produced else None
            given = _tensors(args)
            x = given[0] if given else None
            if row.role == "pool" and x is not None and _returns_its_input(module, x, produced):
                row.role = "identity"
            if produced and _is_leaf(module):  # the peers count leaves only
                row.peer_macs["torchinfo"] += torchinfo_macs(module, produced[0])
                row.peer_macs["ptflops"] += ptflops_macs(module, x, produced[0])

        return [
            register_module_forward_pre_hook(started),
            register_module_forward_hook(finished),
        ]

    def node_hooks(self) -> list[RemovableHandle]:
        """Give each autograd node a forward makes the innermost module that made it: the nodes
        from a module's outputs back to its inputs', where no submodule claimed them first
        (a submodule's forward ends before its parent's)."""

        def grad_fns(tree: Any) -> set[Node]:
            return {t.grad_fn for t in _tensors(tree) if t.grad_fn is not None}

        def entered(module: nn.Module, args: Any) -> None:
            # Before the forward: an in-place operation gives its input a node of the module's.
            self.entered.setdefault(module, []).append(grad_fns(args))

        def left(module: nn.Module, args: Any, kwargs: Any, out: Any) -> None:
            running = self.entered[module]
            inputs = running.pop() | grad_fns(kwargs)
            if not running:
                del self.entered[module]
            name = self.names.get(module)
            if name is None:  # not the model's
                return
            inside = f"{name}." if name else ""
            todo, seen = list(grad_fns(out) - inputs), set(inputs)
            while todo:
                node = todo.pop()
                seen.add(node)
                owner = self.nodes.setdefault(node, name)
                if owner != name and not owner.startswith(inside):
                    continue  # made before this forward, by a module outside it
                todo += [n for n, _ in node.next_functions if n is not None and n not in seen]

        leaving = register_module_forward_hook(left, with_kwargs=True)
        # torch's handle removes the hook but not its with_kwargs flag, by which torch then
        # believes a global hook is registered for the rest of the process (a caller's every
        # torch.compile(module) warned of it): the flag goes with the hook
        leaving.extra_dict_ref += (weakref.ref(_global_forward_hooks_with_kwargs),)
        return [register_module_forward_pre_hook(entered), leaving]

    def not_run(self) -> list[NotRun]:
        """The outermost modules whose parameters no row counts: a module under which no
        module ran and no parameter is counted stands for its submodules; one whose
        submodules ran in part (a ReLU with no parameters too) is named for its own
        uncounted parameters only, its submodules each for theirs. A module that ran is named
        for its own parameters that no row counts (`ran`): it ran on others in their place
        (torch.func.functional_call), its row counting those."""
        found: list[NotRun] = []
        counted = set(self.claimed)
        whole: list[str] = []
        for name, module in self.modules.items():
            if any(name.startswith(f"{outer}.") for outer in whole):
                continue
            if name in self.ran:
                own = module.named_parameters(recurse=False)
                unused = [(n, p) for n, p in own if id(p) not in counted]
                if unused:
                    counted |= {id(p) for _, p in unused}
                    found.append(_not_run(name, module, unused, ran=True))
                continue
            subtree = list(module.named_parameters())
            if all(id(p) in counted for _, p in subtree):
                continue
            # a member without parameters that ran (a ReLU) says the container ran in part
            below = f"{name}." if name else ""
            ran_below = any(ran.startswith(below) for ran in self.ran)
            if not ran_below and all(id(p) not in counted for _, p in subtree):
                whole.append(name)
                left = subtree
            else:
                own = module.named_parameters(recurse=False)
                left = [(n, p) for n, p in own if id(p) not in counted]
                if not left:
                    continue
            counted |= {id(p) for _, p in left}
            found.append(_not_run(name, module, left))
        return found


def _not_run(
    name: str, module: nn.Module, left: list[tuple[str, nn.Parameter]], ran: bool = False
) -> NotRun:
    params = sum(p.numel() for _, p in left)
    bias = sum(p.numel() for n, p in left if _is_bias(n))
    return NotRun(name or ROOT, _type_name(module), params, bias, ran)


def _returns_its_input(module: nn.Module, x: torch.Tensor, out: list[torch.Tensor]) -> bool:
    """An adaptive pool asked for the size it is given (VGG's 7x7 to 7x7 at 224 px)."""
    adaptive = (nn.modules.pooling._AdaptiveAvgPoolNd, nn.modules.pooling._AdaptiveMaxPoolNd)
    return isinstance(module, adaptive) and len(out) >= 1 and out[0].shape == x.shape


class _FunctionCalls(TorchFunctionMode):
    """Sees torch-level calls, above ATen, for the counts fvcore makes there: its tracer
    records `h @ w` as aten::matmul and torch.mm as aten::mm, which both run as ATen's mm, and
    its op table counts the first alone. A call's products are counted here by fvcore's
    formula, and the ATen operators it runs as know the kind of call running them. The calls
    a call makes are not seen (torch hides them from the mode it is in)."""

    def __init__(self, counting: _CountingMode) -> None:
        super().__init__()
        self.counting = counting

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        counting = self.counting
        # CPU autocast casts only CPU tensors, which ATen's dispatch no longer tells (autocast
        # is off by then): on meta its regions would count at fp32
        if torch.is_autocast_enabled("cpu") and any(t.is_meta for t in _tensors((args, kwargs))):
            raise AutocastOnMeta(counting.command)
        name = counting.current()
        if name is not None:
            counting.functional_layer(name, func, (args, kwargs))
        before, counting.fvcore_call = counting.fvcore_call, fvcore_kind(func)
        called, counting.call = counting.call, getattr(func, "__name__", "")
        try:
            out = func(*args, **kwargs)
        finally:
            counting.fvcore_call, counting.call = before, called
        # after the call: arguments torch refuses are told in torch's words
        extra = fvcore_function(getattr(func, "__name__", ""), args)
        extra += fvcore_products(func, args, kwargs)
        if name is not None and extra:
            counting.row(name).peer_macs["fvcore"] += extra
        return out


_FLASH = 1
"""torch's number for its flash-attention kernel (sdp::SDPBackend::flash_attention), as
torch._fused_sdp_choice returns it."""


def _cpu_stand_in(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor of `t`'s shape and dtype, with a stride of 1 along its last dimension
    where `t` has one, over a single row of storage: what torch's choice of attention kernel
    reads of a tensor."""
    row = t.shape[-1] if t.stride(-1) == 1 else 1
    return torch.empty(row, dtype=t.dtype).expand(t.shape)


def _fused_on_meta(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor | None:
    """F.scaled_dot_product_attention of meta tensors run as torch runs it on a CPU: its fused
    flash kernel where torch picks that kernel for the same call there, else None (the math
    path, the only one torch takes on meta). They save different memory for the backward:
    the math path the B·H·L·S probabilities, the fused kernel a B·H·L logsumexp."""
    with _disable_current_modes():  # the choice is no work of the model's
        q, k, v = (_cpu_stand_in(t) for t in (query, key, value))
        mask = None if attn_mask is None else _cpu_stand_in(attn_mask)
        choice = torch._fused_sdp_choice(
            q, k, v, mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
        )
    if choice != _FLASH or (is_causal and attn_mask is not None):
        return None  # the math path; which refuses that pair, as the CPU's kernel does
    # What torch's scaled_dot_product_attention does around the kernel (attention.cpp).
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        keep, drop = (
            torch.scalar_tensor(v, dtype=query.dtype, device=query.device)
            for v in (0.0, float("-inf"))
        )
        attn_mask = torch.where(attn_mask, keep, drop)
    unbatched = query.dim() == 3
    if unbatched:
        query, key, value = (t.unsqueeze(0) for t in (query, key, value))
        while attn_mask is not None and attn_mask.dim() < 4:
            attn_mask = attn_mask.unsqueeze(0)
    out: torch.Tensor = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale
    )[0]
    return out.squeeze(0) if unbatched else out


@contextlib.contextmanager
def _attention_as_on_cpu(counting: _CountingMode) -> Iterator[None]:
    """F.scaled_dot_product_attention of meta tensors run as a CPU runs it (`_fused_on_meta`),
    nn.MultiheadAttention's included (it calls the module's function). Replaced for one count
    (within _ONE_COUNT), as the module hooks are: a torch function mode would not see the
    call nested in F.multi_head_attention_forward. Other tensors pass through. fvcore's
    tracer sees one aten::scaled_dot_product_attention, which it does not count, whichever
    kernel or products it runs as."""
    sdpa = F.scaled_dot_product_attention

    def as_on_cpu(query: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        before, counting.fvcore_call = counting.fvcore_call, FVCORE_CLOSED
        try:
            out = _fused_on_meta(query, *args, **kwargs) if query.is_meta else None
            if out is None:
                return sdpa(query, *args, **kwargs)
            if query.dim() == 3:  # unbatched: the kernel's output was 4-d
                counting.returned(out)
            return out
        finally:
            counting.fvcore_call = before

    F.scaled_dot_product_attention = as_on_cpu
    try:
        yield
    finally:
        F.scaled_dot_product_attention = sdpa


def _is_leaf(module: nn.Module) -> bool:
    return next(module.children(), None) is None


WHOLE_LAYERS = (nn.MultiheadAttention,)
"""Modules with submodules that count as one layer: MultiheadAttention reads its out_proj's
weight without calling it, so its row, like a leaf's, has its output, not every tensor it
computes inside."""


def _is_layer(module: nn.Module) -> bool:
    return _is_leaf(module) or isinstance(module, WHOLE_LAYERS)


def _layer_outputs(module: nn.Module, out: Any) -> list[torch.Tensor]:
    """A layer's output tensors; of MultiheadAttention the attention output alone (the
    averaged attention weights beside it are returned for inspection)."""
    if isinstance(module, nn.MultiheadAttention):
        return _tensors(out[0])
    return _tensors(out)


def _type_name(module: nn.Module) -> str:
    """A module's class name; of a TorchScript module, that of the class it was scripted
    from (its own class is RecursiveScriptModule)."""
    if isinstance(module, torch.jit.ScriptModule):
        return str(module.original_name)
    return type(module).__name__


def _is_bias(name: str) -> bool:
    """`bias`, and MultiheadAttention's `in_proj_bias`, `bias_k`, `bias_v`."""
    return "bias" in name.rpartition(".")[2]


ROLES: tuple[tuple[type[nn.Module] | tuple[type[nn.Module], ...], str], ...] = (
    (nn.modules.conv._ConvNd, "conv"),
    (
        (
            nn.modules.pooling._MaxPoolNd,
            nn.modules.pooling._AvgPoolNd,
            nn.modules.pooling._AdaptiveAvgPoolNd,
            nn.modules.pooling._AdaptiveMaxPoolNd,
            nn.modules.pooling._LPPoolNd,
            # subclass nn.Module directly, not one of the bases above
            nn.FractionalMaxPool2d,
            nn.FractionalMaxPool3d,
        ),
        "pool",
    ),
    (nn.Linear, "fc"),
)


FUNCTIONAL_LAYERS = re.compile(
    r"conv(_transpose)?[123]d|linear|(max|avg|lp|adaptive_avg|adaptive_max|fractional_max)_pool[123]d"
    r"(_with_indices)?"
)
"""The torch-level functions the layers of ROLES call (their names as a torch function mode
sees them: F.max_pool2d with return_indices as max_pool2d_with_indices)."""

MATRIX_PRODUCTS = {
    "matmul": "x @ w",
    "__matmul__": "x @ w",
    "__rmatmul__": "x @ w",
    "mm": "torch.mm",
    "addmm": "torch.addmm",
    "bmm": "torch.bmm",
}
"""The matrix products an fc layer may be written as, by the name a note gives them: an fc
layer where one operand is a weight of the model (`Counting.functional_layer`)."""


def _role(module: nn.Module) -> str:
    cls: Any = type(module)
    if isinstance(module, torch.jit.ScriptModule):
        # torch.nn's class of the name it was scripted from (a user's class has no role)
        cls = getattr(nn, _type_name(module), cls)
    if not isinstance(cls, type):
        return "other"
    return next((role for kind, role in ROLES if issubclass(cls, kind)), "other")


def _switch(model: nn.Module, train: bool) -> None:
    """model.train(train), as nn.Module's switches a module and calls train(mode) on each child,
    without its recursion (a model nested 1,202 deep ran out of Python's recursion limit in
    it): a module that keeps nn.Module's train() is switched here and its children after it;
    one that overrides train() is called, and its override switches its own."""
    stack = [model]
    seen: set[int] = set()
    while stack:
        module = stack.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        # Looked up on the module: torch.export's GraphModule sets a train() of its own on it
        if getattr(module.train, "__func__", None) is not nn.Module.train:
            module.train(train)
            continue
        module.training = train
        stack.extend(child for child in module._modules.values() if child is not None)


def switch_mode(model: nn.Module, train: bool, command: str) -> None:
    """`model.train(train)`; a model that cannot switch (a torch.export GraphModule, whose
    train() raises NotImplementedError, or an override `def train(self)` taking no mode) is
    one line naming the fix, while an exception the model's own code raises goes on as it
    is, to be told with the model's frames. A model that train(False) leaves with a module in
    training mode (an override ignoring the mode) is refused: it would be counted, dry-checked
    and, in a run, validated and tested with dropout on, silently (`refuse_still_training`).
    A RecursionError (an override's own recursive switch of a deep model) goes on as it is,
    for the caller to tell as the model's nesting (`refuse_too_deep`), not as its train()'s."""
    try:
        _switch(model, train)
    except RecursionError:
        raise
    except Exception as e:
        if raised_by_model(e):
            raise
        kind, first = error_line(e)
        said = f"{kind}: {first}" if first else kind
        if isinstance(model, torch.fx.GraphModule) and isinstance(e, NotImplementedError):
            raise UserError(
                "the model is a torch.export GraphModule (torch.export.export(...).module()), "
                f"which cannot switch between train and eval mode as {command} does ({said})",
                "return the nn.Module from the factory, not its export (a run's model is "
                "exported with `dlperf export`)",
            ) from None
        if isinstance(e, TypeError):
            raise UserError(
                f"the model's train() does not take the mode: {command} calls "
                f"model.train({train}) ({said})",
                "take it as nn.Module does: def train(self, mode=True), passing mode on to "
                "super().train(mode)",
            ) from None
        raise UserError(
            f"the model's train({train}) fails: {said}",
            "train(mode) must switch the model as nn.Module's does",
        ) from None
    if not train:
        refuse_still_training(model)


def refuse_still_training(model: nn.Module) -> None:
    """Refuse `model` where a module of it is in training mode after model.train(False): the
    first in the model's order (the highest, whose train() override is the likely cause).
    Only eval mode is checked: a train(True) that keeps a frozen module in eval mode (a frozen
    backbone's batch norm) is a sound way to train."""
    on = [(where, m) for where, m in named_modules(model) if m.training]
    if not on:
        return
    where, module = on[0]
    others = f" and {len(on) - 1} more of its modules" if len(on) > 1 else ""
    raise UserError(
        f"the model's train(False) left {where or ROOT} ({_type_name(module)}){others} in "
        "training mode: a model evaluated so keeps dropout on (batch norm on each batch's "
        "statistics), and its accuracy would change from run to run",
        "pass the mode on in a train() override: def train(self, mode=True): return "
        "super().train(mode)",
    )


def refuse_too_deep(model: nn.Module) -> None:
    """Called on a RecursionError: raise the one line naming `model`'s nesting
    (models.registry.too_deep, as `dlperf run`'s checks say it) where that is why it ran out
    of Python's recursion limit; return where it nests too shallow for that (a forward that
    recurses of itself, told as before)."""
    from dlperf.models.registry import too_deep

    refused = too_deep(model, "the model")
    if refused is not None:
        raise refused from None


@contextlib.contextmanager
def nesting_told(model: nn.Module) -> Iterator[None]:
    """The block with a RecursionError told as `model`'s nesting (`refuse_too_deep`): torch
    walks a model's modules (named_modules, .to()) and calls them by recursion, frames at each
    level, so nn.Sequential(m, nn.ReLU()) nested in a loop ran out of the limit in a walk (a
    traceback) or in the forward (told as the input's fault)."""
    try:
        yield
    except RecursionError:
        refuse_too_deep(model)
        raise


def materialize_lazy(model: nn.Module, x: torch.Tensor, command: str = "analyze") -> None:
    """Lazy modules (smallcnn's LazyLinear) take their shapes from one uncounted forward."""
    if any(isinstance(m, nn.modules.lazy.LazyModuleMixin) for m in model.modules()):
        with torch.no_grad():
            run_forward(model, x, command)  # an input too large or too small is the user's


@contextlib.contextmanager
def _distributions_unchecked() -> Iterator[None]:
    """A model may return a torch.distributions object, whose argument checks read values:
    on meta tensors there are none."""
    before = torch.distributions.Distribution._validate_args
    torch.distributions.Distribution.set_default_validate_args(False)
    try:
        yield
    finally:
        torch.distributions.Distribution.set_default_validate_args(before)


def _outputs(out: Any) -> list[torch.Tensor]:
    """The tensors a model returned: of a distribution, its parameters."""
    if isinstance(out, torch.distributions.Distribution):
        return [t for t in vars(out).values() if isinstance(t, torch.Tensor)]
    return _tensors(out)


def sum_backward(out: Any) -> None:
    """The backward of the simplest loss, the sum of every output that needs a gradient;
    none when nothing trains (no parameters, or all frozen)."""
    losses = [t.sum() for t in _outputs(out) if t.requires_grad]
    if losses:
        torch.autograd.backward(sum(losses[1:], losses[0]))


# What torch says when code reads the values of a meta tensor (`if x.mean() > 0`, .item(),
# .tolist(), nonzero, boolean masks): the forward is fine, counting on shapes alone is not.
_READS_VALUES = ("cannot be called on meta tensors", "no data!", "data-independent")

TENSOR_MAX_BYTES = 2**63
"""What no tensor reaches: torch sizes a storage in a signed 64-bit count of bytes."""
_OVERFLOWED = re.compile(r"Storage size calculation overflowed with sizes=\[([\d, ]*)\]")

API = "dlperf.analyze"
"""`command` where the Python API counts (dlperf.api.analyze): a fix names its arguments
(dtype=, train=False), not the command's options and config keys, which it has none of."""


def _told(command: str, cli: str, api: str) -> str:
    """An option as a fix names it to whoever counts: `cli`, the command's flag or config key;
    `api`, the argument of dlperf.analyze, when `command` is API."""
    return api if command == API else cli


def _smaller(command: str) -> str:
    return _told(
        command,
        "give a smaller --batch or --input (analyze.batch, analyze.input)",
        "give a smaller batch or input_size",
    )


def refuse_too_large(
    batch: int, input_shape: Sequence[int], dtype: torch.dtype, command: str
) -> None:
    """Refuse an input of `batch` samples of `input_shape` in `dtype` past TENSOR_MAX_BYTES:
    each number passes its own check, their product may not."""
    elements = batch * prod(input_shape)
    if elements * dtype.itemsize >= TENSOR_MAX_BYTES:
        sizes = " x ".join(str(n) for n in (batch, *input_shape))
        label = "batch x C x H x W" if len(input_shape) == 3 else "batch x input"
        raise UserError(
            f"{label} = {sizes} = {elements:,} elements is more than a tensor can "
            "hold (2^63 bytes)",
            _smaller(command),
        )


def _overflowed(first: str, x: torch.Tensor, command: str) -> UserError | None:
    """The line for an intermediate of the forward past what a tensor can hold, from torch's
    words (`first`) for it; None for any other error."""
    found = _OVERFLOWED.search(first)
    if found is None:
        return None
    sizes = [int(n) for n in found[1].split(",") if n.strip()]
    return UserError(
        f"an intermediate of {prod(sizes):,} elements ({sizes}) in the forward of input "
        f"{list(x.shape)} is more than a tensor can hold (2^63 bytes)",
        _smaller(command),
    )


def _machinery(module: str) -> bool:
    """Whether code of `module` is torch's dispatch machinery (torch._ops, its meta kernels,
    torch.overrides, torch/__init__'s checks, dynamo's wrappers), or this module's counting
    modes: frames that pass an operation on, not the code that called it."""
    if module == __name__:
        return True
    parts = module.split(".")
    return parts[0] == "torch" and (
        len(parts) == 1 or module == "torch.overrides" or any(p.startswith("_") for p in parts)
    )


@contextlib.contextmanager
def _warnings_where_made() -> Iterator[None]:
    """Show a warning torch raises in C++ during a count (padding='same' with an even kernel)
    at the code that called torch, as a run shows it: Python names the innermost Python frame
    running then, the counting mode's own call of the operator."""
    show = warnings.showwarning

    def shown_where_made(message: Any, category: Any, filename: str, lineno: int,
                         file: Any = None, line: str | None = None) -> None:  # fmt: skip
        if filename == __file__:
            frame = sys._getframe(1)
            while frame.f_back is not None and frame.f_code.co_filename != __file__:
                frame = frame.f_back  # out of the warnings module, to the frame it names
            while frame.f_back is not None and _machinery(frame.f_globals.get("__name__", "")):
                frame = frame.f_back
            filename, lineno, line = frame.f_code.co_filename, frame.f_lineno, None
        show(message, category, filename, lineno, file, line)

    warnings.showwarning = shown_where_made
    try:
        yield
    finally:
        warnings.showwarning = show


_GLOBAL_HOOKS_WARNING = re.escape("Using `torch.compile(module)` when there are global hooks")
"""The start of the warning a torch.compile'd module gives on each call while any global module
hook is registered (torch/_dynamo/eval_frame.py)."""


@contextlib.contextmanager
def _own_hooks_unwarned() -> Iterator[None]:
    """torch.compile's warning of global module hooks kept off during a count: a compiled
    submodule (`self.body = torch.compile(block)`) gave it on each call, in torch's words and
    naming contextlib.py, for hooks the user never registered: the count's own, which give its
    OptimizedModule, having no weights of its own, no row."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", _GLOBAL_HOOKS_WARNING, UserWarning)
        yield


def _value_reader(e: BaseException) -> tuple[str, str] | None:
    """The function whose operation read a meta tensor's values when `e` was raised: the
    innermost frame outside torch's machinery, as (module, qualified name)."""
    found = None
    for frame, _ in traceback.walk_tb(e.__traceback__):
        module = str(frame.f_globals.get("__name__", ""))
        if not _machinery(module):
            found = (module, frame.f_code.co_qualname)
    return found


class NeedsRealTensors(UserError):
    """A sound forward that the meta device cannot run: `analyze_module` counts such a model on
    real CPU tensors instead. `cause` says why, in the words of a refusal; `why` is what
    `Analysis.real_tensors` says; `fix` the hint where the model is too large for real tensors
    (None: a smaller input, or a smaller variant)."""

    def __init__(self, cause: str, why: str, command: str, fix: str | None = None) -> None:
        self.cause = cause
        self.why = why
        self.fix = fix
        super().__init__(
            cause, f"{command} counts such a model on real CPU tensors when it is small enough"
        )


class TorchReadsValues(NeedsRealTensors):
    """torch's own code (not the model's) read a meta tensor's values: pad_packed_sequence
    after pack_padded_sequence(..., enforce_sorted=False) indexes its lengths with the sort's
    indices."""

    def __init__(self, module: str, function: str, said: str, command: str) -> None:
        self.function = f"torch's own {function} ({module})"
        self.said = said
        super().__init__(
            f"{self.function} reads tensor values ({said}), which the meta device {command} "
            "runs the model on has not",
            f"{self.function} reads tensor values",
            command,
        )


# What torch says when an operation meets a meta tensor and a CPU one (not a CPU scalar, which
# goes with any device): `x + torch.arange(8)` in a forward, the tensor made without device=.
_DEVICES_MIXED = re.compile(
    r"on device (cpu|meta) is not on the expected device (cpu|meta)"
    r"|Expected all tensors to be on the same device"
)
ON_INPUTS_DEVICE = (
    "make it where the input is: torch.arange(n, device=x.device), torch.ones(..., "
    "device=x.device); a tensor made in __init__: self.register_buffer(name, tensor)"
)


class AutocastOnMeta(NeedsRealTensors):
    """The model's forward runs under torch.autocast('cpu', ...), which casts CPU tensors only:
    counted on the meta device, its regions would come out at fp32 (activation bytes twice a
    bf16 forward's), so it is counted on real CPU tensors, as a CPU forward runs it."""

    def __init__(self, command: str) -> None:
        super().__init__(
            f"the model's forward runs under torch.autocast('cpu', ...), which the meta "
            f"device {command} counts on does not apply",
            "its forward runs under torch.autocast('cpu', ...): its autocast regions are "
            "counted at their dtype, as a CPU forward runs them",
            command,
            _told(
                command,
                "count it with --precision set to its autocast dtype (bf16), as its autocast "
                "regions run, with a smaller analyze.batch or analyze.input",
                "count it with dtype set to its autocast dtype ('bf16'), as its autocast "
                "regions run, with a smaller batch or input_size",
            ),
        )


class MadeOnCpu(NeedsRealTensors):
    """The model's forward combines its meta input with a tensor made on the CPU: one made in
    the forward without device= (torch.arange(8), torch.ones(...)), or a plain tensor
    attribute, which .to() does not move. It trains on the CPU, where that is the input's
    device too, and the counts on real CPU tensors are its own; on a GPU it would fail."""

    def __init__(self, where: str, said: str, command: str) -> None:
        super().__init__(
            f"{where} uses a tensor made on the CPU (without device=, or a tensor attribute "
            f"that is not a buffer) with the meta tensors {command} runs the model on ({said})",
            f"{where} uses a tensor made on the CPU, not on its input's device (on a GPU that "
            "fails): make it with device=x.device, or register it as a buffer",
            command,
            ON_INPUTS_DEVICE,
        )


# What torch says when an operator of the user's own (torch.library's define and impl, or a
# @torch.library.custom_op) has no kernel for the meta device: "ns::op: attempted to run this
# operator with Meta tensors, but there was no fake impl or Meta kernel registered", and a
# custom_op's "There was no fake impl registered for <CustomOpDef(ns::op)>". torch's own
# operators without a Meta kernel (aten::_ctc_loss.Tensor) meet the same fallback.
_NO_FAKE = re.compile(
    r"^(?P<op>[\w.]+::[\w.]+): attempted to run this operator with Meta tensors"
    r"|no fake impl registered for <CustomOpDef\((?P<custom>[\w.]+::[\w.]+)\)>"
)


class NoFakeImpl(NeedsRealTensors):
    """An operator with no fake impl (no Meta kernel): the input is fine, a run trains the
    model on the CPU, and the operator itself is not counted ("not counted: ns.op") where the
    rest is counted on real CPU tensors. A user's own gets registering one as the fix; torch's
    own (aten::_ctc_loss meets the same fallback) is not the user's to register."""

    def __init__(self, op: str, command: str) -> None:
        users = not op.startswith("aten::")
        lacks = (
            f"the operator {op} has no fake impl (Meta kernel)"
            if users
            else f"torch's own operator {op} has no Meta kernel"
        )
        super().__init__(
            f"{lacks} for the meta device {command} runs the model on",
            lacks,
            command,
            f"register a fake impl for it (torch.library.register_fake('{op}'), or "
            "@op.register_fake for a custom_op), which the meta device runs"
            if users
            else None,
        )


def _models_function(e: BaseException) -> str:
    """The model's function running where `e` was raised: the innermost frame outside torch and
    this module ("Net.forward"); "the model's forward" where there is none."""
    found = "the model's forward"
    for frame, _ in traceback.walk_tb(e.__traceback__):
        module = str(frame.f_globals.get("__name__", ""))
        if module.split(".")[0] != "torch" and module != __name__:
            found = frame.f_code.co_qualname
    return found


def needs_more_than_one(model: nn.Module) -> tuple[str, list[str], str | None] | None:
    """Where `model(x)` cannot run for its forward's signature alone (`forward(self, x,
    mask)`): its forward as the arguments it requires ("forward(x, mask)", "forward(x, *,
    mask)", "forward()"), the names it requires beyond the first, and the name of its first
    keyword-only argument where it takes none by position (`forward(self, *, x)`: shown with
    its keyword-only defaults, "forward(*, x=None)", its required ones all in the second).
    None where one tensor can be its argument, or the signature cannot tell: a forward
    pre-hook may give the others, an overridden __call__ may never call forward, a
    TorchScript method has no signature."""
    hooks = model._forward_pre_hooks or torch.nn.modules.module._global_forward_pre_hooks
    if hooks or type(model).__call__ is not nn.Module.__call__:
        return None
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        return None
    kind = inspect.Parameter
    positional = [p for p in params if p.kind in (kind.POSITIONAL_ONLY, kind.POSITIONAL_OR_KEYWORD)]
    required = [p.name for p in positional if p.default is kind.empty]
    keywords = [p.name for p in params if p.kind is kind.KEYWORD_ONLY and p.default is kind.empty]
    takes_one = bool(positional) or any(p.kind is kind.VAR_POSITIONAL for p in params)
    if takes_one and len(required) <= 1 and not keywords:
        return None
    keyword_only = [p for p in params if p.kind is kind.KEYWORD_ONLY]
    if not takes_one and keyword_only:
        # Its input can be given by keyword only: the defaults shown too, as the user wrote
        # them (`x=None` is the fix a forward needing a second argument is given).
        written = [p.name if p.default is kind.empty else f"{p.name}={p.default!r}" for p in
                   keyword_only]  # fmt: skip
        return f"forward(*, {', '.join(written)})", keywords, keyword_only[0].name
    shown = ", ".join(required + (["*", *keywords] if keywords else []))
    return f"forward({shown})", required[1:] + keywords, None


def refuse_more_than_one(model: nn.Module, fed: str) -> None:
    """Refuse, in one line, a model whose forward needs more than the one tensor dlperf feeds
    it (`fed`: "analyze feeds it one, the input tensor"), or takes it by keyword only, before
    calling it: the TypeError of the call names no shape, but was told as the input's fault."""
    found = needs_more_than_one(model)
    if found is None:
        return
    shown, others, by_keyword = found
    if by_keyword is not None:
        # dlperf calls model(x): a default for it (`x=None`) would not help, only a position
        if len(others) <= 1:
            raise UserError(
                f"the model's {shown} takes its input by keyword only: {fed}, by position",
                f"make it positional: def forward(self, {by_keyword})",
            )
        rest = ", ".join(f"{name}=None" for name in others[1:])
        raise UserError(
            f"the model's {shown} needs {len(others)} arguments, by keyword only: {fed}, by "
            "position",
            f"make the input positional and give the others a default: def forward(self, "
            f"{others[0]}, *, {rest})",
        )
    needed = len(others) + (shown != "forward()")
    if not others:
        raise UserError(
            f"the model's {shown} takes no argument: {fed}",
            "let it take the input: def forward(self, x)",
        )
    names = " and ".join(others)
    raise UserError(
        f"the model's {shown} needs {needed} arguments: {fed}",
        f"give {names} a default ({others[0]}=None), or wrap the model in a module whose "
        f"forward(x) makes {names} and calls it",
    )


TORCHSCRIPT_FAILED = "The following operation failed in the TorchScript interpreter."
"""The first line of an error raised in a TorchScript model: its TorchScript traceback
follows, and the real error ("RuntimeError: mat1 and mat2 shapes ...") comes last."""
_ERROR_LINE = re.compile(r"([A-Za-z_][\w.]*(?:Error|Exception)): (.+)")


_RAISED_INSIDE = threading.local()
"""`error`: the exception an operator last raised in the counting mode (None once a forward
starts): the TorchScript interpreter passes one raised in Python on without its message."""


def error_line(e: BaseException) -> tuple[str, str]:
    """What `e` says, as its type's name and the first line of its message; of an error
    raised in the TorchScript interpreter, the type and line of the real error it ends with
    (where that was raised in the counting mode, which the interpreter leaves with no words:
    that error's)."""
    # error_text: a model's own exception whose __str__ raises is still told as its own
    lines = [line.strip() for line in error_text(e).strip().splitlines() if line.strip()]
    if not lines:
        return type(e).__name__, ""
    if lines[0] == TORCHSCRIPT_FAILED:
        found = next((m for line in reversed(lines) if (m := _ERROR_LINE.fullmatch(line))), None)
        if found is not None:
            return found[1].rpartition(".")[2], found[2].removeprefix(f"{found[1]}: ")
        inside = getattr(_RAISED_INSIDE, "error", None)
        if inside is not None and inside is not e:
            return error_line(inside)
    return type(e).__name__, lines[0]


# What torch says when the input's shape does not fit the model (its rank, channels or size, or
# a batch of one in batch norm's training): analyze.input and analyze.batch can fix those alone.
_SHAPE_ERRORS = re.compile(
    r"shapes cannot be multiplied|same reduction dim|size mismatch|must match the (existing )?size"
    r"|broadcast a dimension|channel dimensions|to have \d+ channels|kernel size"
    r"|output size is too small|expected more than 1 value|\b\d+D\b|is invalid for input of size"
    r"|sizes of tensors must match|must be equal to input_size|expected size"
    r"|expected input with shape|should contain \d+ elements|dimension out of range"
    r"|negative dimension|values to unpack|input dimension|divisible by num_groups"
    r"|embedding dimension|input size",
    re.IGNORECASE,
)


def run_forward(model: nn.Module, x: torch.Tensor, command: str = "analyze") -> Any:
    """`model(x)`; torch refusing the input's shape or dtype is told as the user's input, in
    one line, while an exception the model's own code raises goes on as it is (the CLI tells
    it with the model's frames). On the meta device, the model's forward reading tensor
    values is one line naming `command`; torch's own code reading them is TorchReadsValues, a
    CPU tensor of the model's meeting `x` is MadeOnCpu, an operator of the user's own without
    a fake impl is NoFakeImpl (all counted on real tensors by `analyze_module`)."""
    _RAISED_INSIDE.error = None
    try:
        with _distributions_unchecked(), warnings.catch_warnings():
            # what makes one is refused below, with its own line
            warnings.filterwarnings("ignore", NESTED_PROTOTYPE, UserWarning)
            return model(x)
    except Exception as e:
        if isinstance(e, NeedsRealTensors):  # raised by the counting mode itself (autocast)
            raise
        if isinstance(e, RecursionError):  # its nesting's, not the input's (nesting_told)
            refuse_too_deep(model)
        if out_of_memory(e):  # the machine's (a memory limit), not the input's: said as such
            raise
        if "NestedTensorImpl" in error_text(e):  # torch's assertion (meta) or sizes (CPU)
            raise UserError(
                f"the model's forward makes a nested tensor (torch.nested.nested_tensor), "
                f"which {command} cannot count: torch gives one of the default (strided) "
                "layout no meta device and no sizes",
                f"make it with layout=torch.jagged, which {command} counts",
            ) from None
        kind, first = error_line(e)
        said = f"{kind}: {first}"
        if x.is_meta and _AUTOCAST_ON_META in first:
            raise NeedsRealTensors(
                f"{_models_function(e)} enters torch.autocast on its input's device, and the "
                f"meta device {command} runs the model on has no autocast ({said})",
                "its torch.autocast(x.device.type, ...) has no meta device: counted under CPU "
                "autocast, as a CPU forward runs it",
                command,
            ) from None
        if x.is_meta and any(marker in first for marker in _READS_VALUES):
            reader = _value_reader(e)
            if reader is not None and reader[0].startswith("torch."):
                raise TorchReadsValues(*reader, said, command) from None
            raise UserError(
                f"the model's forward reads tensor values ({said}): "
                f"{command} runs it on the meta device, which has shapes and no values",
                f"{command} counts a forward whose operations follow from shapes alone: "
                "branch on shapes or settings, not on values, to count it",
            ) from None
        if x.is_meta and _DEVICES_MIXED.search(first) and "meta" in first and "cpu" in first:
            raise MadeOnCpu(_models_function(e), said, command) from None
        if x.is_meta and (fakeless := _NO_FAKE.search(first)) is not None:
            raise NoFakeImpl(fakeless["op"] or fakeless["custom"], command) from None
        too_large = _overflowed(first, x, command)
        if too_large is not None:
            raise too_large from None
        if (missing := missing_forward(e, "the model")) is not None:
            raise missing from None
        if raised_by_model(e):
            raise
        if isinstance(e, OSError):
            raise _read_failed(e, said) from None
        if (elsewhere := missing_device(e, "the model", str(x.device))) is not None:
            raise elsewhere from None
        other = other_dtype(model, x.dtype) if "type" in first.lower() else None
        if other is not None:
            dtype, which = other
            precisions = {str(d).removeprefix("torch."): p for p, d in DTYPES.items()}
            at = precisions.get(dtype) if x.dtype == torch.float32 else None
            fed = str(x.dtype).removeprefix("torch.")
            raise UserError(
                f"the model's {which} are {dtype}, but {command} feeds it {fed} input ({said})",
                _dtype_fix(dtype, at, command),
            ) from None
        refused = _autograd_refusal(first, said, command)
        if refused is not None:
            raise refused from None
        fed = str(x.dtype).removeprefix("torch.")
        half = {d: p for p, d in DTYPES.items() if d != torch.float32}
        if _SHAPE_ERRORS.search(first):
            fix = _told(
                command,
                "check analyze.input (C,H,W) and analyze.batch",
                "check input_size (C, H, W) and batch",
            )
            fix += " (batch norm in training needs 2 or more)"
        elif x.dtype in half:
            # Not what a run feeds it: a run at this precision keeps float32 weights and
            # images under autocast, where a forward computing partly in float32 (x.float())
            # trains. Which of its operators failed, said above, is the model's to tell.
            fix = (
                f"{command} at {half[x.dtype]} casts the weights and the input to {fed}, where "
                f"a run at {half[x.dtype]} keeps them float32 and autocasts operator by "
                "operator (a forward computing partly in float32, x.float(), trains there): "
                "count it at fp32"
            )
        else:  # not the shape: what the forward is given is the point
            fix = (
                f"{command} feeds the model what a run feeds it, one {fed} tensor of images "
                "(batch, C, H, W): its forward must take that"
            )
        raise UserError(f"the model rejects input {list(x.shape)}: {said}", fix) from None


NESTED_PROTOTYPE = re.escape("The PyTorch API of nested tensors is in prototype stage")
"""The start of torch's UserWarning as a nested tensor of the default (strided) layout is made
(torch.nested.nested_tensor): of torch's API, not the user's code, where dlperf refuses the
tensor in its own line (analyze cannot count it; run and export take dense scores only)."""

_AUTOCAST_ON_META = "unsupported autocast device_type 'meta'"
"""torch's words for `torch.autocast(x.device.type, ...)` entered with a meta input."""


def _read_failed(e: OSError, said: str) -> UserError:
    """The line for a forward whose code (numpy's np.load, open) failed to read or write a
    file: the model's, never the input's, the file named."""
    import os

    fix = "check the files the model's forward reads"
    if e.filename is not None and not os.path.isabs(os.fsdecode(e.filename)):
        fix = (
            f"a relative path is read from the directory dlperf runs in ({os.getcwd()}): "
            "give the forward an absolute path, or run dlperf where the file is"
        )
    return UserError(f"the model's forward failed on a file: the model raised {said}", fix)


# torch's words for a forward that autograd refuses while gradients are on (a training step's
# forward): the input is not at fault, and its shape no fix.
_INFERENCE_TENSORS = "inference tensor"  # "Inference tensors cannot be saved for backward",
# "Inplace update to inference tensor outside InferenceMode is not allowed"
_LEAF_IN_PLACE = "a leaf Variable that requires grad is being used in an in-place operation"


def forward_alone(command: str, done: str = "counted") -> str:
    """What a refusal of the training step adds to its fix: the forward alone can still be
    `done`."""
    how = _told(command, "leave out --train, or analyze.train", "train=False")
    return f"its forward alone is still {done}: {how}"


def _autograd_refusal(first: str, said: str, command: str) -> UserError | None:
    """The error for a forward torch refused with `first` (`said`: with its type) for what
    autograd cannot do while the training step's gradients are on, its fix named; None for
    any other. `dlperf run` refuses such a model in its dry backward ("cannot be trained")."""
    if _INFERENCE_TENSORS in first.lower():
        return UserError(
            "the model's forward makes tensors under torch.inference_mode(), which autograd "
            f"cannot save for the backward: its training step cannot be counted ({said})",
            "use torch.no_grad() in forward instead of torch.inference_mode(), or .clone() "
            f"what the block makes before the layers that train use it; {forward_alone(command)}",
        )
    if _LEAF_IN_PLACE in first:
        return UserError(
            "the model's forward changes a trained parameter in place, which autograd refuses "
            f"while gradients are on: its training step cannot be counted ({said})",
            "change it under torch.no_grad() (with torch.no_grad(): self.w.add_(...)), or "
            f"freeze it (requires_grad_(False)); {forward_alone(command)}",
        )
    return None


IN_PLACE = "modified by an inplace operation"
"""autograd's words for a tensor the backward needs, changed in place after it was saved."""


CUSTOM_GRADIENTS = re.compile(r"returned an (invalid gradient|incorrect number of gradients)")
"""autograd's words for gradients a custom torch.autograd.Function's backward returned wrong:
"Function BadBackward returned an invalid gradient at index 0 - got [1, 10] but expected shape
compatible with [2, 10]", "function BadBackward returned an incorrect number of gradients"."""


UNFED_HOOK = re.escape("Full backward hook is firing when gradients are computed with respect to")
"""The start of torch's warning (torch/utils/hooks.py) as a backward reaches a module with a
full backward hook (register_full_backward_hook) none of whose inputs needs a gradient (the
first layer's, fed the images): torch calls the hook with grad_input None."""


def run_backward(out: Any, done: str = "counted", command: str = "analyze") -> None:
    """`sum_backward`; torch refusing to run it (an operation with no derivative, as
    torch.special.zeta; complex weights on meta tensors) is one line, "the model's backward
    cannot be `done`" (counted on the meta device by analyze, measured by predict --measure),
    while an exception the model's own code raises (its autograd Function's backward) goes on
    as it is, to be told with the model's frames. torch's warning of a full backward hook
    whose inputs need no gradient (UNFED_HOOK) is kept off: it is of dlperf's inputs."""
    try:
        with warnings.catch_warnings():
            # The count's and the measurement's inputs need no gradient, as a run's images
            # need none: a run's dry backward tells a user's hook of that (dry_backward)
            warnings.filterwarnings("ignore", UNFED_HOOK, UserWarning)
            sum_backward(out)
    except Exception as e:
        # In a backward the tensors are gradients, not the input: what raises in the model
        # file's code (its autograd Function's backward, a torch op there) is the model's
        if raised_by_model(e) or model_frames(e):
            raise
        text = error_text(e).strip()  # a library's exception whose __str__ raises
        first = text.splitlines()[0] if text else ""
        # torch's own plea to report its message, not the reason
        first = first.split("  (Could this error message be improved?")[0].rstrip()
        said = f"{type(e).__name__}: {first}" if first else type(e).__name__
        fix = forward_alone(command, done)
        if IN_PLACE in first or CUSTOM_GRADIENTS.search(first):  # as a run's dry backward says it
            fix = f"{backward_hint(first)}; {fix}"
        raise UserError(f"the model's backward cannot be {done}: {said}", fix) from None


def backward_hint(error: str) -> str:
    """The fix for a backward that failed with torch's `error`."""
    if CUSTOM_GRADIENTS.search(error):  # autograd checking what a custom Function returned
        return (
            "the model's torch.autograd.Function backward must return one gradient per input "
            "of its forward, each of that input's shape (None for one that needs none)"
        )
    if "modified by an inplace operation" in error:
        return (
            "use the out-of-place form of the operation autograd names (y = y.relu() "
            "for y.relu_(), y = y + 1 for y += 1)"
        )
    if "derivative for" in error and "not implemented" in error:
        return (
            "torch has no derivative for that operation: compute it another way, or only from "
            "tensors that need no gradient (frozen, or .detach()ed first)"
        )
    if "inference tensor" in error.lower():  # "Inference tensors cannot be saved for backward"
        return (
            "use torch.no_grad() in forward instead of torch.inference_mode(), or .clone() what "
            "its block makes before the layers that train use it"
        )
    if "a leaf Variable that requires grad is being used in an in-place operation" in error:
        return (
            "the forward changes a trained parameter in place: do it under torch.no_grad() "
            "(with torch.no_grad(): self.w.mul_(...)), or freeze it (requires_grad_(False))"
        )
    if "does not require grad and does not have a grad_fn" in error:
        return (
            "the forward turned gradients off for what follows it (torch.no_grad, "
            "torch.set_grad_enabled(False), .detach()): compute the scores with them on"
        )
    return "every operation from the parameters to the scores must have a backward in torch"


def untrainable(
    model: nn.Module, what: str, then: str = "", weights: bool = True
) -> UserError | None:
    """The refusal of `model` (`what`, as the user named it) where it has no parameter to
    train, in `dlperf run`'s words: all frozen, or none at all; `then` ends its fix, which
    offers model.weights with feature extraction where the caller has them (`weights`). None
    where one trains."""
    params = list(model.parameters())
    then = f"; {then}" if then else ""
    if params and not any(p.requires_grad for p in params):
        # Weights it has, frozen (requires_grad=False): the fix is not to add any. Feature
        # extraction needs model.weights (config.experiment), so it is offered with them.
        count = sum(p.numel() for p in params)
        extract = (
            "; or, with model.weights, leave them unfrozen and set model.transfer = "
            '"feature-extract", which freezes all but a new head'
        )
        return UserError(
            f"model {what} has {count:,} parameters, all frozen (requires_grad=False): "
            "training would change none",
            "unfreeze those that should train, the head's at least (p.requires_grad_(True))"
            f"{extract if weights else ''}{then}",
        )
    if not params:
        return UserError(
            f"model {what} has no parameters to train",
            f"give it at least one layer with weights (nn.Linear, nn.Conv2d ...){then}",
        )
    return None


def refuse_no_gradient(
    model: nn.Module, out: Any, needing: list[torch.Tensor], name: str, command: str
) -> None:
    """Refuse to count the training step of model `name` where nothing trains: no trainable
    parameter (all frozen, or none: a run refuses it so, in these words), or outputs (`out`)
    that carry no gradient (`needing`, those that do, is empty): integer scores, a forward
    under torch.no_grad or .detach()ed. Its backward does nothing, so the step counted was the
    forward alone, with gradient and optimizer memory, of a model a run refuses to train."""
    # The API counts the caller's own module, built and frozen by the caller: no model.weights
    refused = untrainable(model, f"'{name}'", forward_alone(command), command != API)
    if refused is not None:
        raise refused
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    scores = _outputs(out)
    if needing or not scores:
        return
    kinds = [t.dtype for t in scores if not (t.is_floating_point() or t.is_complex())]
    if kinds:
        returned = f"returns {kinds[0]} values, which carry no gradient"
        fix = "return the scores as floating values, as its layers compute them (no .long()"
    else:
        # frozen layers give no gradient either (F: a run names them): said where there are
        frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
        returned = "returns scores that carry no gradient"
        fix = "return the scores as its layers compute them (no .detach()"
        if frozen:
            named = ", ".join(frozen[:3]) + (", ..." if len(frozen) > 3 else "")
            fix = f"unfreeze the layers on the way to them ({named} are frozen), and {fix}"
    raise UserError(
        f"the model {returned}, though it has {trainable:,} trainable parameters: its training "
        "step has no backward to count, and a run refuses to train it",
        f"{fix}, torch.no_grad or .numpy() on the way); {forward_alone(command)}",
    )


class _SavedTensors(torch.autograd.graph.saved_tensors_hooks):
    """Sums the distinct storages autograd saves for the backward, weights excluded. Autograd
    checks no version of a tensor saved through hooks, so these check it as autograd does: a
    tensor the backward needs, changed in place after it was saved (`nn.ReLU(inplace=True)`
    after a sigmoid), fails the backward with autograd's own words, as it fails a run's."""

    def __init__(self, model: nn.Module) -> None:
        weights = {t.untyped_storage()._cdata for t in (*model.parameters(), *model.buffers())}
        seen: set[int] = set(weights)
        self.bytes = 0

        def pack(t: torch.Tensor) -> tuple[torch.Tensor, int, str]:
            storage = t.untyped_storage()
            if storage._cdata not in seen:
                seen.add(storage._cdata)
                self.bytes += storage.nbytes()
            made = (
                ""
                if t.grad_fn is None
                else f", which is output {t.output_nr} of {t.grad_fn.name()}"
            )
            return t, t._version, made

        def unpack(saved: tuple[torch.Tensor, int, str]) -> torch.Tensor:
            t, version, made = saved
            if t._version != version:
                dtype = str(t.dtype).removeprefix("torch.")
                raise RuntimeError(
                    "one of the variables needed for gradient computation has been modified by "
                    f"an inplace operation: [{dtype} {list(t.shape)}]{made}, is at version "
                    f"{t._version}; expected version {version} instead"
                )
            return t

        super().__init__(pack, unpack)


def _storages_bytes(tensors: Iterable[torch.Tensor], held: set[int]) -> int:
    """The bytes of the distinct storages `tensors` hold, each once, none of those in `held`
    (storage numbers, to which theirs are added)."""
    total = 0
    for t in tensors:
        if t.layout != torch.strided:  # a sparse tensor has no one storage: its dense size
            total += _nbytes(t)
            continue
        storage = t.untyped_storage()
        if storage._cdata not in held:
            held.add(storage._cdata)
            total += storage.nbytes()
    return total


def _training_memory(model: nn.Module, saved: int) -> dict[str, Any]:
    # Weights and buffers (batch norm's running statistics, a registered lookup table) as the
    # device holds them: each distinct storage once (two Parameters over one, a tied weight's
    # transpose, are one weight in memory, with two gradients), a buffer viewing a parameter's
    # storage none of its own.
    held: set[int] = set()
    weights = _storages_bytes(model.parameters(), held)
    buffers = _storages_bytes(model.buffers(), held)
    grads = sum(_nbytes(p) for p in model.parameters() if p.requires_grad)
    state = {"sgd_momentum": grads, "adam": 2 * grads}
    return {
        "weights_bytes": weights,
        "buffers_bytes": buffers,
        "gradients_bytes": grads,
        "optimizer_state_bytes": state,
        "saved_activations_bytes": saved,
        "total_bytes": {opt: weights + buffers + grads + s + saved for opt, s in state.items()},
    }


def kept_note(dtype: str) -> str:
    """What a count of a model kept in its own `dtype` ("float64") at fp32 describes."""
    return f"fp32 input; the model's own {dtype} weights kept, not cast (as a run at fp32)"


KEPT_FLOAT64 = kept_note("float64")

_HALVES = (torch.float16, torch.bfloat16)


def kept_dtype(model: nn.Module, precision: str) -> torch.dtype | None:
    """The dtype of `model`'s own that a count or a measurement at `precision` keeps rather than
    casting the model to the precision's, None where it casts: at fp32, float64 of a model
    holding float64 weights or buffers (built with `self.double()`), float16 or bfloat16 of one
    holding such parameters (`.half()`). A run at fp32 trains such a model as it is (it casts
    nothing), and its forward may cast its input to match; its input stays fp32, as a run feeds
    it. Cast to fp32, a .half() model was counted as if it were one, which a run refuses."""
    if precision != "fp32":
        return None
    if any(t.dtype == torch.float64 for t in (*model.parameters(), *model.buffers())):
        return torch.float64
    return next((p.dtype for p in model.parameters() if p.dtype in _HALVES), None)


def kept_as_built(model: nn.Module, precision: str) -> bool:
    """Whether a count or a measurement at `precision` leaves `model` in its own dtypes
    (`kept_dtype`) rather than casting it to the precision's."""
    return kept_dtype(model, precision) is not None


def other_dtype(model: nn.Module, fed: torch.dtype) -> tuple[str, str] | None:
    """Where `model`'s floating parameters are not of the dtype it is `fed`: their dtype
    ("float64") and how they are named in a refusal ("parameters", or the first of them where
    some are of `fed`); None where all are of `fed`. analyze's and run's refusals alike."""
    floating = [
        (n, p) for n, p in named_parameters(model) if p.is_floating_point() or p.is_complex()
    ]
    other = [(n, p) for n, p in floating if p.dtype != fed]
    if not other:
        return None
    dtype = str(other[0][1].dtype).removeprefix("torch.")
    return dtype, "parameters" if len(other) == len(floating) else f"parameters ({other[0][0]})"


def _dtype_fix(dtype: str, precision: str | None, command: str) -> str:
    """The fix for a model whose `dtype` parameters refuse a float32 input: built in float32,
    the input cast in forward, or (half precisions) the count made at their precision."""
    drop = {"float64": ".double()", "float16": ".half()", "bfloat16": ".bfloat16()"}
    fix = f"build it in float32 (drop {drop.get(dtype, f'the cast to {dtype}')})"
    if dtype in drop:  # a default dtype torch.set_default_dtype takes: run's fix names it
        fix += " and leave torch's default dtype float32 (no torch.set_default_dtype)"
    fix += ", or cast the input in forward: x.to(dtype of the weights)"
    if precision is not None:
        at = _told(command, f"--precision {precision} (analyze.precision)", f"dtype={precision!r}")
        fix += f", or count it at {precision}: {at}"
    return fix


def to_precision(model: nn.Module, precision: str, device: torch.device | str) -> nn.Module:
    """`model` on `device` in what a count or a measurement at `precision` describes: cast to
    the precision's dtype, or as built where `kept_as_built`. Complex weights and buffers are
    never cast (nn.Module.to(dtype) would keep their real part alone): a run casts nothing."""
    dtype = None if kept_as_built(model, precision) else DTYPES[precision]  # fp32 casts nothing

    def convert(t: torch.Tensor) -> torch.Tensor:
        moved = t.to(device=device)
        return moved.to(dtype) if dtype is not None and moved.is_floating_point() else moved

    # Tensors sharing a storage (a tied weight's transpose, a buffer viewing a parameter) keep
    # sharing one: each cast alone got its own, counted twice, and the tie was lost.
    shared = KeepShared(convert, [*model.parameters(), *model.buffers()])
    cast: nn.Module = model._apply(shared)  # type: ignore[no-untyped-call]
    return cast


REAL_TENSORS_MAX_BYTES = 256 * 2**20
"""The most bytes of weights, buffers and input a model whose meta run torch's own code
refuses (NeedsRealTensors) is counted with on real CPU tensors instead."""


def _real_bytes(model: nn.Module, x: torch.Tensor) -> tuple[int, int]:
    """The bytes of `model`'s parameters and buffers (each storage once: `_on_cpu` makes
    them as they share), and of `x`, once on the CPU."""
    held = [t for t in (*model.parameters(), *model.buffers()) if not is_lazy(t)]
    return _storages_bytes(held, set()), _nbytes(x)


def _on_cpu(model: nn.Module) -> None:
    """Give a meta model's parameters and buffers storage on the CPU, in place, each shared one
    shared still (tied weights): random floating values, torch.nn's own layers initialised as
    they initialise themselves (batch norm's running variance 1), integers and booleans 0.
    Lazy parameters not yet materialised stay lazy, on the CPU."""
    made: dict[int, torch.Tensor] = {}

    def values(t: torch.Tensor) -> torch.Tensor:
        data = torch.empty_like(t, device="cpu")
        random = data.is_floating_point() or data.is_complex()
        return data.normal_(0.0, 0.1) if random else data.zero_()

    # tensors sharing a storage on meta (a buffer viewing a parameter) share one on the CPU
    shared = KeepShared(values, [*model.parameters(), *model.buffers()])

    def real(t: torch.Tensor) -> torch.Tensor:
        if id(t) not in made:
            if is_lazy(t):  # an UninitializedParameter or UninitializedBuffer
                lazy: Any = type(t)
                made[id(t)] = lazy(t.requires_grad, device="cpu", dtype=t.dtype)
            else:
                data = shared(t.detach())
                param = isinstance(t, nn.Parameter)
                made[id(t)] = nn.Parameter(data, t.requires_grad) if param else data
        return made[id(t)]

    for module in model.modules():
        for name, p in list(module._parameters.items()):
            if p is not None:
                setattr(module, name, real(p))  # through __setattr__: an RNN's flat weights
        for name, b in list(module._buffers.items()):
            if b is not None:
                setattr(module, name, real(b))
        reset = getattr(module, "reset_parameters", None)
        if type(module).__module__.startswith("torch.nn.") and callable(reset):
            reset()


@contextlib.contextmanager
def _callers_modes_off() -> Iterator[None]:
    """Gradients on and inference mode off, whatever the caller's (torch.no_grad(),
    torch.inference_mode(), torch.set_grad_enabled(False) around dlperf.analyze), for a count
    and the build it counts: in them a training step counted no backward, inference mode's
    dispatch skipped the decompositions that are counted (every convolution unsupported, no
    MACs), and a model built in it holds inference tensors. Both modes are thread-local."""
    with torch.inference_mode(False), torch.enable_grad():
        yield


@_callers_modes_off()
def analyze_module(
    model: nn.Module,
    input_shape: Sequence[int],
    batch: int = 1,
    train: bool = False,
    precision: str = "fp32",
    name: str = "model",
    command: str = "analyze",
) -> Analysis:
    """Count one forward (with `train`: forward and backward) of `model` at batch `batch`.

    The model is moved to the meta device (its weights' values are dropped) and cast to the
    precision's dtype, unless `kept_as_built`; complex weights stay complex (`to_precision`).
    A forward that the meta device cannot run though it is sound (NeedsRealTensors: torch's own
    code reading values, a CPU tensor of the model's meeting the input) is counted on real
    CPU tensors of random values instead (seeded, the global generator left as it was), when
    weights and input come to at most REAL_TENSORS_MAX_BYTES; `Analysis.real_tensors` then
    says why. `command` names the command in a refusal. A model nested too deep for Python's
    recursion limit is one line naming its depth (`nesting_told`). A torch.compile'd model
    is counted as the module inside (`uncompiled`).
    """
    from dlperf.models.transfer import uncompiled

    model = uncompiled(model)
    with nesting_told(model):
        return _analyze_module(model, input_shape, batch, train, precision, name, command)


def _analyze_module(
    model: nn.Module,
    input_shape: Sequence[int],
    batch: int,
    train: bool,
    precision: str,
    name: str,
    command: str,
) -> Analysis:
    from dlperf.models.registry import refuse_no_forward, unregistered_note

    _refuse_quantized(model, command)
    refuse_no_forward(model, "the model")
    unregistered = unregistered_note(model)
    _refuse_zero_size(model, command)
    # before counting's own hooks, which would hide the forward's signature
    refuse_more_than_one(model, f"{command} feeds it one, the input tensor")
    dtype = DTYPES[precision]
    refuse_too_large(batch, input_shape, dtype, command)
    kept = kept_dtype(model, precision)
    model = to_precision(model, precision, "meta")
    # A model copied or built in the caller's inference mode holds inference tensors, which
    # autograd refuses to save for the backward; plain copies of them count the same. All are
    # copied then (on meta, at no cost), each storage once: tensors sharing one still do.
    tensors = [t for t in (*model.parameters(), *model.buffers()) if not is_lazy(t)]
    if any(t.is_inference() for t in tensors):
        copies = KeepShared(lambda t: t if is_lazy(t) else t.clone(), tensors, whole=True)
        model._apply(copies)  # type: ignore[no-untyped-call]
    x = torch.empty(batch, *input_shape, device="meta", dtype=dtype)
    counted = Analysis(
        model=name, input=list(input_shape), batch=batch, train=train, precision=precision,
        layers=[], params=0, trainable_params=0, trainable_bias_params=0, receptive_field={},
        unsupported_ops={},
        kept=None if kept is None else str(kept).removeprefix("torch."),
        unregistered=unregistered,
    )  # fmt: skip
    try:
        return _count(counted, model, x, command)
    except NeedsRealTensors as e:
        refused = e
    weights, given = _real_bytes(model, x)
    if weights + given > REAL_TENSORS_MAX_BYTES:
        mib = 2**20
        fix = refused.fix or (
            _told(
                command, "a smaller analyze.batch or analyze.input", "a smaller batch or input_size"
            )
            + " fits"
            if weights <= REAL_TENSORS_MAX_BYTES
            else "its weights alone are over that: count a smaller variant"
            + _told(command, " (model.kwargs)", "")
        )
        raise UserError(
            f"{refused.cause}, and the model is too large to count on real CPU tensors "
            f"instead: {weights / mib:.1f} MiB of weights and {given / mib:.1f} MiB of input, "
            f"over {REAL_TENSORS_MAX_BYTES / mib:.0f} MiB",
            fix,
        ) from None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        try:
            _on_cpu(model)
        except Exception as e:
            raise UserError(
                f"{refused.cause}, and its weights cannot be moved to the CPU to count it "
                f"there: {type(e).__name__}: {error_text(e)}"
            ) from None
        counted.real_tensors = refused.why
        with _ONE_COUNT, _composite_rnns():  # the switch is the process's: one count's
            return _count(counted, model, torch.rand(batch, *input_shape, dtype=dtype), command)


@contextlib.contextmanager
def _composite_rnns() -> Iterator[None]:
    """oneDNN off for a count on real CPU tensors, put back after. With it on, torch runs an
    nn.LSTM on the CPU as one fused kernel (`aten.mkldnn_rnn_layer` and its backward: a float
    input, or a packed one whose sequences are all as long, as at batch 1), which no handler
    counts: the LSTM was 0 MACs. Off, it runs as torch's composite of matrix products and gates,
    the one the meta device runs, so its MACs and FLOPs are the meta count's. Every other
    operator is seen as the same ATen call either way (oneDNN is a convolution's kernel below
    it). The switch is the process's: taken under _ONE_COUNT, so that two counts do not put
    each other's back; another thread computing meanwhile runs torch's other kernels."""
    enabled = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(False)  # not torch.backends.mkldnn.flags: it warns of TF32
    try:
        yield
    finally:
        torch._C._set_mkldnn_enabled(enabled)


QUANTIZED = ("torch.ao.nn.quantized.", "torch.ao.nn.intrinsic.quantized.")
"""The packages of torch.ao's quantized modules (dynamic ones included; reference modules,
which compute in float, are not): int8 kernels with no meta implementation, weights packed
where no parameter holds them."""


def _refuse_quantized(model: nn.Module, command: str) -> None:
    """Refuse a model holding a quantized module (quantize_dynamic's Linear) in one line: its
    operators cannot run on the meta device, nor would its packed weights count as params."""
    for where, module in model.named_modules():
        package = type(module).__module__
        if package.startswith(QUANTIZED) and ".reference" not in package:
            kind = f"{package.partition('.modules')[0]} {type(module).__name__}"
            raise UserError(
                f"{where or ROOT} ({kind}) is a quantized module, which {command} cannot count: "
                "its int8 operators have no meta-device kernel and its packed weights are no "
                "parameters",
                "count the float model, as built before quantize_dynamic: the same products",
            )


def _count(counted: Analysis, model: nn.Module, x: torch.Tensor, command: str) -> Analysis:
    """`counted` (what `analyze_module` was asked to count) with the count of `model` for the
    input `x`, on x's device, in the model's dtypes; one count at a time in a process."""
    with _ONE_COUNT:
        return _count_alone(counted, model, x, command)


def _count_alone(counted: Analysis, model: nn.Module, x: torch.Tensor, command: str) -> Analysis:
    materialize_lazy(model, x, command)
    train = counted.train
    switch_mode(model, train, command)
    fields = FieldTracker()
    fields.start(x)
    tracker = ModuleTracker()
    # The tracker names a module by its parents from the first it sees: the model's own name
    # first, for a model whose overridden __call__ runs its layers but no hook of its own.
    tracker._get_mod_name(model)  # type: ignore[no-untyped-call]
    mode = _CountingMode(model, tracker, fields, command)
    hooks = mode.layer_hooks() + mode.node_hooks()
    memory = None
    try:
        with tracker, _warnings_where_made(), _own_hooks_unwarned():
            saved = _SavedTensors(model)  # saves nothing without a gradient
            grad = contextlib.nullcontext() if train else torch.no_grad()
            with mode, _FunctionCalls(mode), _attention_as_on_cpu(mode), saved, grad:
                mode.outside_is_root = True
                out = run_forward(model, x, command)
                mode.claim_made(model)  # one whose overridden __call__ runs no hook of its own
                mode.outside_is_root = False
                mode.entered.clear()  # a module whose forward raised, the model catching it
            scores = _outputs(out)
            fields_result = fields.result(scores)
            width = scores[0].shape[-1] if len(scores) == 1 and scores[0].dim() >= 2 else None
            if train:
                mode.fields = None
                # The simplest loss; its own backward runs outside every module, uncounted,
                # until the gradients of the model's outputs are in.
                outputs = [t for t in scores if t.requires_grad]
                refuse_no_gradient(model, out, outputs, counted.model, command)
                if outputs:
                    hooks.append(
                        torch.autograd.graph.register_multi_grad_hook(
                            outputs, lambda _: setattr(mode, "outside_is_root", True), mode="any"
                        )
                    )
                with mode:
                    run_backward(out, command=command)
                memory = _training_memory(model, saved.bytes)
    finally:
        for handle in hooks:
            handle.remove()
    return replace(
        counted,
        layers=list(mode.rows.values()),
        params=sum(p.numel() for p in model.parameters()),
        trainable_params=mode.trainable.total(),
        trainable_bias_params=mode.trainable[True],
        receptive_field=fields_result,
        unsupported_ops=dict(sorted(mode.unsupported.items())),
        not_run=mode.not_run(),
        training_memory=memory,
        complex_dtypes=sorted(str(d).removeprefix("torch.") for d in mode.complex_dtypes),
        output_width=width,
        output_rank=scores[0].dim() if len(scores) == 1 else None,
        shared_storage=mode.shared_storage(),
    )


@_callers_modes_off()  # the model's build too
def analyze(
    name: str,
    input_shape: Sequence[int] | None = None,
    batch: int = 1,
    train: bool = False,
    precision: str = "fp32",
    num_classes: int | None = None,
    bias: bool = True,
    activations: str = "all",
    *,
    macs_convention: str = "dlperf",
    transfer: str = "scratch",
    model_kwargs: dict[str, Any] | None = None,
    command: str = "analyze",
    tell: Callable[[str], None] | None = None,
) -> Analysis:
    """Analyse a model by registry/torchvision name or "file.py:factory", built with
    `model_kwargs`; `bias`, `activations` and `macs_convention` choose what the parameter,
    activation and MAC counts include. With `transfer` "feature-extract" the backbone is
    frozen as a run would freeze it (no weights needed): only the head is trainable.
    `command` (analyze, predict) names the command counting in a refusal. `tell`, where
    given, is told each of the model file's notes (`model_notes`) once the model is built,
    before it is counted, as a run tells them before its checks: said after the count, they
    were lost with a refusal they explain (float64 weights, from the file's
    torch.set_default_dtype)."""
    from dlperf.models.registry import check_automatic, noting, without_automatic

    check_options(batch, train, precision, activations, macs_convention, command)
    check_default_dtype()  # the model is built in it
    kwargs = model_kwargs or {}
    given = kwargs.get("num_classes")
    # No data to size the head from: model.kwargs.num_classes is the number, unless
    # analyze.classes gives another (check_automatic refuses that, and a non-integer).
    from_kwargs = num_classes is None and type(given) is int
    num_classes = given if from_kwargs else num_classes
    if num_classes is not None and num_classes < 1:
        raise UserError(f"analyze.classes: must be at least 1, got {num_classes}")
    if "num_classes" in kwargs and not from_kwargs:
        said = "not a whole number" if num_classes is None else f"analyze.classes is {num_classes}"
        hint = "give the number of classes once, as analyze.classes or model.kwargs.num_classes"
        check_automatic(kwargs, "num_classes", num_classes or 0, said, hint)
    shape = list(input_shape) if input_shape else default_input(name)
    said = f"the input {shape} has {shape[0]} channel{'s' if shape[0] != 1 else ''}"
    hint = "drop model.kwargs.in_channels: analyze takes it from analyze.input (C,H,W)"
    check_automatic(kwargs, "in_channels", shape[0], said, hint)
    # Collected, not warned: a RuntimeWarning raised inside the factory's call (python -W
    # error) failed it as "factory ... failed", for a change dlperf had already put back
    with noting() as notes:
        model, classes, source, arguments = build_model(
            name, shape, num_classes, **without_automatic(kwargs)
        )
    notes = list(dict.fromkeys(notes))  # once each: a meta build retried for real
    if tell is not None:
        for said in notes:
            tell(said)
    source = "model.kwargs" if from_kwargs else source
    with nesting_told(model):  # freeze_backbone walks its modules
        if transfer == "feature-extract":
            from dlperf.models.transfer import freeze_backbone

            freeze_backbone(model)
        a = count_model(
            model, shape, batch, train, precision, name, bias, activations, macs_convention, command
        )
    ignored = (
        classes is not None
        and other_width(a.output_width, a.output_rank, classes)
        and ignores_classes(name, shape, classes, a.output_width or 0, without_automatic(kwargs))
    )
    note = (
        None
        if classes is None
        else unused_classes(a.output_width, a.output_rank, classes, source, ignored)
    )
    if classes is None and source == FROM_KWARGS:
        classes = a.output_width
    elif note is not None:
        a.classes_note = note
        unused = ", unused" if ignored else ""
        classes, source = a.output_width, f"its output's width; it was given {classes}{unused}"
    a.classes, a.classes_source, a.arguments, a.transfer = classes, source, arguments, transfer
    a.model_notes = notes
    return a


def check_options(
    batch: int,
    train: bool,
    precision: str,
    activations: str,
    macs_convention: str,
    command: str = API,
) -> None:
    """Refuse counting options that `count_model` cannot honour, before a model is built; a
    fix names them as `command` does (by default, the API that calls this)."""
    if batch < 1:
        raise UserError(f"analyze.batch: must be at least 1, got {batch}")
    if precision not in DTYPES:
        raise UserError(
            f"analyze.precision: unknown precision '{precision}'", f"use {', '.join(DTYPES)}"
        )
    if activations not in ACTIVATIONS:
        raise UserError(
            f"analyze.activations {activations!r}: use {' or '.join(ACTIVATIONS)}",
            "conv-pool-fc counts the outputs of convolution, pooling and linear layers only",
        )
    if macs_convention not in MACS_CONVENTIONS:
        raise UserError(
            f"analyze.macs_convention {macs_convention!r}: use {', '.join(MACS_CONVENTIONS)}"
        )
    if train and macs_convention != "dlperf":
        raise UserError(
            f"analyze.macs_convention {macs_convention}: the peers count a forward pass only",
            _told(command, "leave out analyze.train", "train=False")
            + ", or count the training step with the dlperf convention",
        )


def count_model(
    model: nn.Module,
    shape: Sequence[int],
    batch: int,
    train: bool,
    precision: str,
    name: str,
    bias: bool,
    activations: str,
    macs_convention: str,
    command: str = API,
) -> Analysis:
    """`analyze_module` with the options `check_options` passed: `bias`, `activations` and
    `macs_convention` choose what the parameter, activation and MAC counts include; a
    convention whose counts of one of `model`'s modules are not reproduced is refused.
    `command` names the caller in a refusal: by default the API, which calls this with the
    caller's own module (the CLI's commands count through `analyze`)."""
    from dlperf.models.transfer import uncompiled

    model = uncompiled(model)  # its modules named as analyze_module names its rows
    with nesting_told(model):  # the walks below, before analyze_module's own
        _refuse_unreproduced(model, macs_convention)
    a = analyze_module(model, shape, batch, train, precision, name, command)
    a.bias, a.activations, a.macs_convention = bias, activations, macs_convention
    return a


def _refuse_unreproduced(model: nn.Module, macs_convention: str) -> None:
    """Refuse a convention (not dlperf's) whose counts of one of `model`'s modules are not
    reproduced: a TorchScript submodule, or one of ptflops' experimental hooks."""
    if macs_convention != "dlperf":
        scripted = [
            (n, m) for n, m in model.named_modules() if isinstance(m, torch.jit.ScriptModule)
        ]
        if scripted:
            where, module = scripted[0]
            raise UserError(
                f"analyze.macs_convention {macs_convention}: how {macs_convention} counts the "
                f"TorchScript submodule {where or ROOT} ({_type_name(module)}) is not reproduced",
                "count it with the dlperf convention, or build the model without torch.jit.script",
            )
    if macs_convention == "ptflops":
        kept = [type(m).__name__ for m in model.modules() if type(m) in PTFLOPS_NOT_REPRODUCED]
        if kept:
            raise UserError(
                f"analyze.macs_convention ptflops: its experimental hooks for {kept[0]} are not "
                "reproduced",
                "use the dlperf, torchinfo or fvcore convention for this model",
            )
