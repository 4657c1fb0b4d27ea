"""Transfer learning: start a model from another network's weights, with its classifier head
new and sized for the data's classes, and optionally train the head alone.

The head is the model's last `nn.Linear` (torchvision's `fc`, `classifier[-1]`,
`heads.head`; dlperf's smallcnn `[10]` and CIFAR ResNets' `fc`); the backbone is everything
else. Pretrained weights fill the backbone; the head keeps its fresh initialisation. A first
convolution trained on another number of input channels is adapted the standard way: summed
over its input channels and spread evenly over the new ones (RGB into grey: the sum; grey
into RGB: repeated and divided by 3), so that it answers a grey image as before. Weights
whose every key carries a prefix the model's lack (`module.` of DDP, `_orig_mod.` of
torch.compile, `model.` of Lightning), or the other way round, are read with it replaced.
"""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from collections.abc import Collection, Mapping
from typing import Any

import torch
from torch import fx, nn

from dlperf.errors import UserError, raised_by_model
from dlperf.formatting import few

# How load_state_dict names the keys it refuses: `Missing key(s) in state_dict: "a", "b". `
_REFUSED_KEYS = re.compile(r"(Missing|Unexpected) key\(s\) in state_dict: (.*?)\.\s*$", re.M)
DISAGREE = (
    "make the model's state_dict() and load_state_dict() agree (an override of one needs "
    "its counterpart)"
)


def head_name(model: nn.Module) -> str:
    """The name of the classifier head: the `nn.Linear` whose output the model returns, as its
    forward traced by torch.fx shows (the scores may pass through functions and modules
    without weights on their way out: a softmax, a dropout, a reshape); for a forward fx
    cannot trace (Python control flow on its input), the last `nn.Linear` registered. A
    model whose scores come from another layer with weights (a convolution) is refused: its
    last registered `nn.Linear` sits inside the backbone, and transfer would re-initialise
    and train it while freezing the real classifier."""
    names = [name for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    if not names:
        raise UserError(
            f"{type(model).__name__} has no nn.Linear classifier head to replace",
            'transfer needs one; use model.transfer = "scratch"',
        )
    inner, prefix = _unwrapped(model)
    try:
        traced = _traced_head(inner)
    except Exception:  # fx cannot trace it (an if on a tensor's value): registration order
        return str(names[-1])
    if isinstance(traced, str):
        return prefix + traced
    other = "its nn.Linear " + few(names)
    comes = (
        "from no layer with weights"
        if traced is None
        else f"from {prefix}{traced[0]} ({traced[1]})"
    )
    raise UserError(
        f"{type(model).__name__} has no nn.Linear classifier head to replace: its output comes "
        f"{comes}, not from {other}",
        "transfer replaces the nn.Linear whose output the forward returns "
        '(return self.head(x)); or use model.transfer = "scratch"',
    )


def uncompiled(model: nn.Module) -> nn.Module:
    """The module inside torch.compile's OptimizedModule (its `_orig_mod`, however nested),
    else `model`: the network, its weights and its names as uncompiled. The one unwrapping of
    a compiled module (analyze's, export's and `_unwrapped`'s). A count of the wrapper ran
    dynamo under dlperf's global hooks (torch warned of them) and named every row
    `_orig_mod.`; an export of it failed with a dynamic batch. A module that is its own
    `_orig_mod` (a cycle, refused by the callers' check_no_cycle) ends the walk rather than
    looping in it."""
    passed = {id(model)}
    while isinstance(inner := getattr(model, "_orig_mod", None), nn.Module):
        if id(inner) in passed:
            break
        passed.add(id(inner))
        model = inner
    return model


def _unwrapped(model: nn.Module) -> tuple[nn.Module, str]:
    """The module whose forward computes `model`'s (inside torch.compile's OptimizedModule,
    DataParallel and DistributedDataParallel), and the prefix of its names in `model`'s."""
    prefix = ""
    while True:
        if (inner := uncompiled(model)) is not model:
            model, prefix = inner, f"{prefix}{_path(model, inner)}."
        elif isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
            model, prefix = model.module, f"{prefix}module."
        else:
            return model, prefix


def _path(model: nn.Module, inner: nn.Module) -> str:
    """The name of `inner` among `model`'s modules (`_orig_mod`, or `_orig_mod._orig_mod` for
    a wrapper of a wrapper): the prefix its state dict's keys carry in `model`'s. One held
    outside nn.Module's submodules (object.__setattr__) is named as torch.compile names it."""
    named = (name for name, module in model.named_modules() if module is inner)
    return next(named, "_orig_mod")


def _traced_head(model: nn.Module) -> str | tuple[str, str] | None:
    """From `model`'s forward traced by torch.fx: the name of the `nn.Linear` its output comes
    from, passing back through functions, methods and modules without weights of their own
    (the latest in the graph where several do); else the name and type of the layer with
    weights it comes from; None where it comes from neither. Raises where fx cannot trace
    (its tracer runs the forward on placeholders, never on tensors)."""
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a print() or a warning in the forward, at trace time
        graph = fx.Tracer().trace(model)
    order = {node: i for i, node in enumerate(graph.nodes)}
    heads: list[tuple[fx.Node, str]] = []
    layers: list[tuple[fx.Node, str]] = []
    todo = [node for node in graph.nodes if node.op == "output"]
    seen: set[fx.Node] = set()
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        if node.op in ("call_module", "get_attr"):
            # A layer called, or a Linear's weight read (F.linear(x, self.fc.weight, ...))
            owner = (
                str(node.target)
                if node.op == "call_module"
                else str(node.target).rpartition(".")[0]
            )
            layer = model.get_submodule(owner)
            if isinstance(layer, nn.Linear):
                heads.append((node, owner))
                continue
            if node.op == "get_attr":  # another tensor the model holds: no layer's output
                continue
            if any(True for _ in layer.parameters(recurse=False)):
                layers.append((node, owner))
                continue
        todo.extend(node.all_input_nodes)
    if heads:
        return max(heads, key=lambda h: order[h[0]])[1]
    if not layers:
        return None
    owner = max(layers, key=lambda h: order[h[0]])[1]
    return owner, type(model.get_submodule(owner)).__name__


def split_params(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """(backbone, head) parameters."""
    prefix = head_name(model) + "."
    backbone: list[nn.Parameter] = []
    head: list[nn.Parameter] = []
    for name, p in model.named_parameters():
        (head if name.startswith(prefix) else backbone).append(p)
    return backbone, head


def adapt_first_conv(weight: torch.Tensor, in_channels: int) -> torch.Tensor:
    """A conv weight (out, c, kh, kw) for `in_channels` inputs that answers a grey image (the
    same value in every channel) as the original does: summed over its input channels, spread
    evenly over the new ones (3 into 1: the sum; 1 into 3: repeated and divided by 3)."""
    return weight.sum(dim=1, keepdim=True).repeat(1, in_channels, 1, 1) / in_channels


def _other_channels(given: torch.Tensor, wanted: torch.Tensor) -> bool:
    """Whether two conv weights differ in their input channels alone."""
    same = given.dim() == wanted.dim() == 4 and given.shape[0] == wanted.shape[0]
    return same and given.shape[1] != wanted.shape[1] and given.shape[2:] == wanted.shape[2:]


def _shape(t: torch.Tensor) -> str:
    return "x".join(map(str, t.shape)) or "scalar"


def _listed(names: list[str], what: str) -> str:
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    return f"{len(names)} {what} ({shown})"


# Who saves a state dict with every key under one prefix of its own
_SAVED_UNDER = {
    "module.": "DistributedDataParallel or DataParallel",
    "_orig_mod.": "torch.compile",
    "model.": "a Lightning module",
}


def _prefixes(keys: Collection[str]) -> list[str]:
    """The empty prefix and each dotted one that all `keys` start with, shortest first."""
    parts = next(iter(keys), "").split(".")[:-1]
    found = [""]
    for end in range(1, len(parts) + 1):
        prefix = ".".join(parts[:end]) + "."
        if not all(key.startswith(prefix) for key in keys):
            break
        found.append(prefix)
    return found


def _saved(prefix: str) -> str:
    return repr(prefix) + (f" ({_SAVED_UNDER[prefix]})" if prefix in _SAVED_UNDER else "")


def _unprefixed(
    weights: Mapping[str, torch.Tensor], target: Collection[str], skipped: tuple[str, ...]
) -> tuple[Mapping[str, torch.Tensor], str | None]:
    """`weights` with the prefix every key shares replaced by the model's own (`module.` of a
    DDP-wrapped network read off; a compiled model's `_orig_mod.` put on) where their keys do
    not fit the model's and so renamed they all do, with a note saying so; else as given."""

    def fits(keys: Collection[str]) -> bool:
        given = {key for key in keys if not key.startswith(skipped)}
        return given == {key for key in target if not key.startswith(skipped)}

    if fits(weights.keys()):
        return weights, None
    for theirs in _prefixes(weights.keys()):
        for ours in _prefixes(target):
            renamed = {ours + key.removeprefix(theirs): v for key, v in weights.items()}
            if theirs != ours and fits(renamed.keys()):
                return renamed, _renamed(theirs, ours)
    return weights, None


def _renamed(theirs: str, ours: str) -> str:
    """The note on keys read with the prefix `theirs` replaced by `ours`."""
    if not ours:
        return f"every key of the weights starts with {_saved(theirs)}: loaded without it"
    if not theirs:
        return (
            f"every key of the model starts with {_saved(ours)}, none of the weights': loaded "
            "under it"
        )
    return (
        f"every key of the weights starts with {_saved(theirs)}, the model's with "
        f"{_saved(ours)}: loaded as {ours!r}"
    )


def _not_finite(name: str, value: torch.Tensor) -> str | None:
    """`name` holds NaN, inf or both, said so; None for a tensor that holds neither."""
    if not (value.is_floating_point() or value.is_complex()):
        return None  # an integer counter
    if bool(torch.isfinite(value).all()):
        return None
    nan, inf = bool(torch.isnan(value).any()), bool(torch.isinf(value).any())
    return f"{name} holds {' and '.join(w for w, held in (('NaN', nan), ('inf', inf)) if held)}"


def load_weights(
    model: nn.Module, weights: Mapping[str, torch.Tensor], source: str, keep_head: bool = False
) -> list[str]:
    """Load `weights` into every parameter and buffer of `model` but its head (and the head
    too with `keep_head`); notes on what was adapted. Keys missing on either side or of
    another shape fail by name, as do sparse tensors (load_state_dict's error on them blamed
    the model) and tensors holding NaN or inf (they would pass the run's dry checks, made
    before the weights are loaded, and fail its first step)."""
    target = model.state_dict()
    head = head_name(model) + "."
    conv = next((n for n, m in model.named_modules() if isinstance(m, nn.Conv2d)), None)
    classes = model.get_submodule(head[:-1]).out_features
    if keep_head:
        notes = [f"head {head[:-1]} kept from the weights ({classes} classes)"]
    else:
        notes = [f"head {head[:-1]} new, sized for {classes} classes"]
    skipped = () if keep_head else (head,)  # str.startswith(()) is False: nothing skipped
    weights, renamed = _unprefixed(weights, target.keys(), skipped)
    if renamed is not None:
        notes.append(renamed)
    merged = dict(target)
    broken, sparse = [], []
    missing, mismatched, misfits = [], [], []
    for key, value in target.items():
        if key.startswith(skipped):
            continue
        if key not in weights:
            missing.append(key)
            continue
        given = weights[key]
        if given.layout != torch.strided:  # load_state_dict's copy_() takes no sparse tensor
            sparse.append(key)
            continue
        if key == f"{conv}.weight" and _other_channels(given, value):
            notes.append(
                f"first conv {conv}: weights for {given.shape[1]} input channels summed and "
                f"spread over {value.shape[1]}"
            )
            given = adapt_first_conv(given, value.shape[1])
        if given.shape != value.shape:
            mismatched.append(f"{key} {_shape(given)} vs {_shape(value)}")
            misfits.append(key)
            continue
        held = _not_finite(key, given)  # as the file holds it, before any cast
        if held is not None:
            broken.append(held)
        merged[key] = given.to(value.dtype)
    unexpected = [k for k in weights if k not in target and not k.startswith(skipped)]
    problems = [
        _listed(names, what)
        for names, what in (
            (mismatched, "of another shape (weights vs model)"),
            (missing, "missing from the weights"),
            (unexpected, "not in the model"),
        )
        if names
    ]
    if problems:
        hint = "use the model.name, model.kwargs and data.image_size the weights were trained with"
        theirs = weights.get(f"{head}weight")
        if (
            not missing
            and not unexpected
            and all(key.startswith(head) for key in misfits)
            and theirs is not None
            and theirs.shape[1:] == target[f"{head}weight"].shape[1:]
        ):
            # Only the kept head's classes differ: the model is the weights' own
            hint = (
                f"the weights' head has {theirs.shape[0]} classes, the data {classes}: set "
                f'model.head = "new", or train on data of {theirs.shape[0]} classes'
            )
        raise UserError(
            f"model.weights {source} do not fit the model: " + "; ".join(problems), hint
        )
    if sparse:
        raise UserError(
            f"model.weights {source} holds sparse tensors ({few(sparse)}): the model's layers "
            "take dense ones",
            "save them dense: torch.save({k: v.to_dense() for k, v in weights.items()}, path)",
        )
    if broken:
        raise UserError(
            f"model.weights {source}: {few(broken)}",
            "a model started from them gives NaN at its first step: give weights saved before "
            "the training that wrote them diverged",
        )
    load_state(model, merged, f"model.weights {source} do not load into the model as built")
    return notes


def load_state(
    model: nn.Module, state: Mapping[str, Any], subject: str, hint: str = DISAGREE
) -> None:
    """`model.load_state_dict(state)`, for a `state` with the keys and shapes of the model's own
    state_dict() (its callers check that first): a refusal now is the model's state_dict()
    and load_state_dict() disagreeing (an override of one renaming every key), told in one
    line after `subject` with the keys each side has that the other lacks, and `hint`. An
    error the model's own code raises (in its own load_state_dict) goes on as it is."""
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        if raised_by_model(e):
            raise
        raise UserError(
            f"{subject}: its state_dict() and load_state_dict() disagree: {_refused(e)}", hint
        ) from None


def _refused(e: RuntimeError) -> str:
    """What load_state_dict's error names: the keys it wants and does not get, those it gets
    and does not take; otherwise its first particular (a shape its own override expects)."""
    found = dict((kind, keys.replace('"', "")) for kind, keys in _REFUSED_KEYS.findall(str(e)))
    said = []
    if "Missing" in found:
        said.append(
            f"load_state_dict() takes {_first(found['Missing'])}, which state_dict() does not give"
        )
    if "Unexpected" in found:
        said.append(
            f"state_dict() gives {_first(found['Unexpected'])}, which load_state_dict() does not "
            "take"
        )
    if said:
        return "; ".join(said)
    lines = [line.strip() for line in str(e).strip().splitlines()]
    return lines[1] if len(lines) > 1 else lines[0] if lines else type(e).__name__


def _first(keys: str) -> str:
    return few(keys.split(", "))


def freeze_backbone(model: nn.Module) -> None:
    """Feature extraction: only the head trains. With no backbone parameter needing a gradient
    (and inputs that never do), autograd records nothing before the head, so the backward pass
    stops there."""
    backbone, _ = split_params(model)
    for p in backbone:
        p.requires_grad_(False)


def set_train_mode(model: nn.Module) -> None:
    """`model.train()`, except that a module whose own weights or statistics are all frozen (a
    frozen backbone's batch norms) stays in eval mode, so frozen features stay fixed, running
    statistics included. A module with neither (dropout) trains as usual."""
    model.train()
    if all(p.requires_grad for p in model.parameters()):
        return
    for module in model.modules():
        params = list(module.parameters(recurse=False))
        buffers = list(module.buffers(recurse=False))
        if (params or buffers) and not any(p.requires_grad for p in params):
            module.eval()
