"""Checks that a model and its data go together, made before anything is recorded or exported,
so that a mismatch is one line of bad input rather than a failure mid-run."""

from __future__ import annotations

import contextlib
import copy
import os
import re
import sys
import traceback
import warnings
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from dlperf.analytic.counting import (
    NESTED_PROTOTYPE,
    UNFED_HOOK,
    backward_hint,
    refuse_more_than_one,
    switch_mode,
    untrainable,
)
from dlperf.data.sources import too_few_classes
from dlperf.engine.checkpoint import check_loadable
from dlperf.errors import (
    MemoryRanOut,
    UserError,
    error_text,
    in_model_file,
    missing_device,
    missing_forward,
    model_frames,
    out_of_memory,
    raised_by_model,
)
from dlperf.formatting import few, ran_out
from dlperf.image_modes import channels_last
from dlperf.models.registry import note, too_deep, torch_defaults_kept
from dlperf.models.transfer import DISAGREE, load_state

if TYPE_CHECKING:
    from dlperf.data import ImageData


DRY_BATCH = 2  # images in the dry forward
# A batch the dry forward did not see, for a forward that holds the batch at DRY_BATCH
# (x.reshape(2, -1)); more than DRY_BATCH, as batch norm in training takes no fewer.
OTHER_BATCH = DRY_BATCH + 1
# What every trainer's forward is given, said where a model's forward needs more.
FED = "dlperf feeds it one tensor, a batch of images"
# torch's warning for a backward through an operation without one (a quantized layer's)
NO_KERNEL = "an autograd kernel was not registered"


class TooDeep(UserError):
    """A model nested too deep for Python's recursion limit (models.registry.too_deep): what
    its forward failed with is no sign of the images' shape or dtype, to be told so."""


class ReadFailed(UserError):
    """A model's forward failed to read a file (or reach a host) of its own: what it failed
    with is no sign of the images' shape or dtype, to be told so."""


def _read_failed(e: OSError, what: str) -> ReadFailed:
    """The one line for the OSError `e` that `what`'s forward met in a library it called
    (numpy's np.load of a missing file): the file, the model's line that asked for it, and
    where a relative name is looked for."""
    line = next(
        (
            f"{Path(frame.f_code.co_filename).name}:{number}"
            for frame, number in reversed(list(traceback.walk_tb(e.__traceback__)))
            if in_model_file(frame)
        ),
        None,
    )
    at = f" (at {line})" if line else ""
    if e.filename is None:
        return ReadFailed(f"the forward of {what} failed{at}: {type(e).__name__}: {error_text(e)}")
    name = os.fspath(e.filename)
    where = (
        "put the file there"
        if os.path.isabs(name)
        else (
            f"a relative name is read from the working directory, {os.getcwd()}: run from where "
            "the file is, or open it by a path made from the model file's own (__file__)"
        )
    )
    return ReadFailed(
        f"the forward of {what} failed to read {name}{at}: {e.strerror or type(e).__name__}", where
    )


def refuse_too_deep(model: nn.Module, what: str) -> None:
    """Raise TooDeep for `model` (`what` names it) where its nesting is why it ran out of
    Python's recursion limit (called on a RecursionError); return otherwise."""
    refused = too_deep(model, what)
    if refused is not None:
        raise TooDeep(refused.message, refused.hint) from None


# What a model's forward was said to have changed in the process (Kept), each said once a
# model: the dry checks' forwards, the training steps and the evaluation each put it back.
# By id, dropped as the model goes: a module may be unhashable (a dataclass's __eq__).
_TOLD: dict[int, set[str]] = {}


def _told(model: nn.Module) -> set[str]:
    key = id(model)
    if key not in _TOLD:
        _TOLD[key] = set()
        weakref.finalize(model, _TOLD.pop, key, None)
    return _TOLD[key]


@dataclass(frozen=True)
class Kept:
    """torch's process-wide settings that a model's forward may change for good (a call, not a
    with-block), as they were before it: its default dtype and device, its thread count, and
    anomaly detection and deterministic algorithms (each with its second switch: check_nan,
    warn_only). Left so, the dry checks' next images were made in the forward's float64 (and
    the model refused as rejecting the images), the training steps ran on the forward's threads
    while the run stored run.threads, and every later step's backward (and a --jobs 1 sweep's
    later points) ran under anomaly mode, many times slower, timed as the run's own; an API
    caller's process kept them. Cheap to take at each step (microseconds: getters, no tensor).
    Gradients turned off are the callers' to refuse (dry_backward, TrainStep)."""

    dtype: torch.dtype
    device: torch.device
    threads: int
    anomaly: tuple[bool, bool]  # torch.autograd.set_detect_anomaly(mode, check_nan)
    deterministic: tuple[bool, bool]  # torch.use_deterministic_algorithms(mode, warn_only)

    @classmethod
    def now(cls) -> Kept:
        return cls(
            torch.get_default_dtype(),
            torch.get_default_device(),
            torch.get_num_threads(),
            (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
            (
                torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled(),
            ),
        )

    def put_back(self, model: nn.Module) -> None:
        """Each setting a forward of `model` changed put back, and said (`note`: a run's
        reporter through models.registry.noting, else a RuntimeWarning) once for the model."""
        if Kept.now() == self:
            return
        path = _source(model)
        notes = torch_defaults_kept(path, "in its forward", self.dtype, self.device, "the model")
        threads = torch.get_num_threads()
        if threads != self.threads:
            torch.set_num_threads(self.threads)
            notes.append(
                f"the model set torch's thread count to {threads} in its forward; put back to "
                f"{self.threads} after each forward (which itself runs on {threads}): set "
                "run.threads rather than calling torch.set_num_threads in forward"
            )
        notes += self._switches_put_back()
        told = _told(model)
        for said in notes:
            if said not in told:
                told.add(said)
                note(said, path)

    def _switches_put_back(self) -> list[str]:
        """Anomaly detection and deterministic algorithms put back where a forward switched
        them, one note each: the forward that switched them runs under them, its backward and
        every later forward do not."""
        notes = []
        anomaly = (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled())
        if anomaly != self.anomaly:
            torch.autograd.set_detect_anomaly(*self.anomaly)
            notes.append(
                f"the model turned torch's anomaly detection {_on(anomaly[0])} in its forward; "
                f"put back {_on(self.anomaly[0])} after each forward: it slows every training "
                "step, and the run's timings with it (to debug a NaN, use it in a script of "
                "your own)"
            )
        deterministic = (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
        )
        if deterministic != self.deterministic:
            torch.use_deterministic_algorithms(
                self.deterministic[0], warn_only=self.deterministic[1]
            )
            notes.append(
                f"the model turned torch's deterministic algorithms {_on(deterministic[0])} in "
                f"its forward; put back {_on(self.deterministic[0])} after each forward, as the "
                "process had them"
            )
        return notes


def _on(value: bool) -> str:
    return "on" if value else "off"


def _source(model: nn.Module) -> Path:
    """The file `model`'s class is defined in (a RuntimeWarning's), or its module's name."""
    module = type(model).__module__
    return Path(getattr(sys.modules.get(module), "__file__", None) or module)


@contextlib.contextmanager
def kept(model: nn.Module, what: str = "the model") -> Iterator[None]:
    """The block (a forward of `model`, `what`) with torch's settings put back after it (Kept),
    and, where it returned, the model refused if it grew in it (`check_not_grown`). The first
    forward in evaluation mode has what it made noted (for `refuse_made_in_eval`)."""
    before = Kept.now()
    # Its parameters' names before its first forward, where this is it in evaluation mode
    had = None if id(model) in _FIRST or model.training else set(dict(model.named_parameters()))
    try:
        yield
    finally:
        before.put_back(model)
    check_not_grown(model, what)
    if had is not None:
        made = tuple(n for n, _ in model.named_parameters() if n not in had)
        if made:
            key = id(model)
            _MADE_IN_EVAL[key] = made
            weakref.finalize(model, _MADE_IN_EVAL.pop, key, None)


class Grown(UserError):
    """A model whose forward registered parameters or buffers after its first call: one line
    of its own, which no caller of a dry forward turns into a blame on the images or the
    batch size."""


# The fix for a model that grows as it runs, said by the dry checks and by training alike.
IN_INIT = (
    "create every layer in __init__; for one sized by the input, nn.LazyLinear or nn.LazyConv2d"
)

# The fix for a model whose forward converts its parameters (self.double())
RETYPED = (
    "leave the parameters' dtype to dlperf: no .double(), .half() or .to(dtype) on the model "
    "in forward (cast the input to the layer's instead); set run.precision for half precision"
)


@dataclass(frozen=True)
class Held:
    """What a model's checkpoint holds of it, as a forward may change it: its parameters by
    name, each the tensor itself (a forward that makes `self.w = nn.Parameter(...)` again
    makes another under the old name, which no optimizer holds), and its persistent buffers'
    names (a buffer is reassigned by design, `self.count = self.count + 1`, and a
    non-persistent one, a cache, is no part of the state_dict that export loads). And the
    parameters' dtypes: a forward's self.double() swaps each one's data in place, the same
    tensor, and the run stored as fp32 trained on in float64 into a float64 checkpoint."""

    parameters: dict[str, torch.Tensor]
    buffers: tuple[str, ...]
    dtypes: dict[str, torch.dtype]

    @classmethod
    def of(cls, model: nn.Module) -> Held:
        buffers = tuple(
            f"{prefix}.{name}" if prefix else name
            for prefix, module in model.named_modules()
            for name, _ in module.named_buffers(recurse=False)
            if name not in getattr(module, "_non_persistent_buffers_set", ())
        )
        parameters: dict[str, torch.Tensor] = dict(model.named_parameters())
        return cls(parameters, buffers, {n: p.dtype for n, p in parameters.items()})

    def changed(self, model: nn.Module) -> str | None:
        """How `model` differs from what it held: "registered new parameters (extra.weight,
        extra.bias)", "removed parameters (extra.weight)", "registered new buffers (seen)",
        "changed the dtype of parameters (l.weight torch.float32 -> torch.float64)", or
        several joined by "and"; None when nothing. A layer deleted in a forward left a
        checkpoint no rebuild fits, blamed on a nondeterministic factory, as one added did."""
        now = Held.of(model)
        made = [n for n, p in now.parameters.items() if self.parameters.get(n) is not p]
        retyped = self.retyped(model)
        registered = [n for n in now.buffers if n not in self.buffers]
        removed = [n for n in (*self.parameters, *self.buffers) if n not in now.parameters]
        removed = [n for n in removed if n not in now.buffers]
        said = [
            f"{verb} {kind} ({few(names, 4)})"
            for verb, kind, names in (
                ("registered new", "parameters", made),
                ("registered new", "buffers", registered),
                ("removed", "parameters or buffers", removed),
                ("changed the dtype of", "parameters", retyped),
            )
            if names
        ]
        return " and ".join(said) or None

    def only_retyped(self, model: nn.Module, changed: str) -> bool:
        """Whether `changed`, this Held's `changed(model)`, is a dtype change alone."""
        return changed == f"changed the dtype of parameters ({few(self.retyped(model), 4)})"

    def retyped(self, model: nn.Module) -> list[str]:
        """The parameters of `model` it held whose dtype has changed since, each "fc.weight
        torch.float32 -> torch.float64" (a parameter made anew is `changed`'s "registered")."""
        return [
            f"{n} {self.dtypes[n]} -> {p.dtype}"
            for n, p in model.named_parameters()
            if self.parameters.get(n) is p and p.dtype != self.dtypes[n]
        ]


# Each model's Held after its first dry forward, by id as _TOLD is. A layer its first forward
# makes (sized by the input it sees) is in the network every rebuild makes as its own checks
# run (export, --resume, a distill teacher), and is in the optimizer, built after them.
_FIRST: dict[int, Held] = {}
# The parameters each model's first forward made where it ran in evaluation mode (the dry
# checks' first does), by id as _FIRST is: taken as a lazy layer's by check_not_grown, but one
# made for evaluation alone (if not self.training: self.extra = ...) never trains, and every
# evaluation's scores pass through its initial weights (dry_backward refuses it).
_MADE_IN_EVAL: dict[int, tuple[str, ...]] = {}


def check_not_grown(model: nn.Module, what: str) -> None:
    """Refuse `model` (`what`) where a dry forward after its first registered parameters or
    persistent buffers: a network that grows as it runs is not the one its factory builds,
    so its checkpoint fitted no rebuild of it ("its factory builds a different network on each
    call", export said), and what it makes once the optimizer is built never trains; or
    where one changed its parameters' dtype (self.double()), told in its own words: the run
    trained on in that dtype while stored at its run.precision. The first call only takes note
    of what the model holds."""
    key = id(model)
    if key not in _FIRST:
        _FIRST[key] = Held.of(model)
        weakref.finalize(model, _FIRST.pop, key, None)
        return
    held = _FIRST[key]
    changed = held.changed(model)
    if changed is None:
        return
    if held.only_retyped(model, changed):
        raise Grown(
            f"the forward of {what} {changed} after its first call: a run trains the model as "
            "its factory builds it, in float32, and is stored at its run.precision, which "
            "such a model's weights and timings are not",
            RETYPED,
        )
    raise Grown(
        f"the forward of {what} {changed} after its first call: a network that changes as "
        "it runs is not the one its factory builds, so no export or --resume could load "
        "its checkpoint, and what it adds after the optimizer is built never trains",
        IN_INIT,
    )


def dry_forward(
    model: nn.Module,
    shape: Sequence[int],
    rejects: str,
    device: torch.device | None = None,
    training: bool = False,
    batch: int = DRY_BATCH,
    memory_format: torch.memory_format = torch.contiguous_format,
    what: str = "the model",
) -> object:
    """One forward of `batch` (two) zero images of `shape` (in `memory_format`, the run's), in eval
    mode and without gradients: sizes lazy layers (neither the optimizer nor the exporter can
    use uninitialised parameters) and turns a model that rejects the shape (torch refusing it)
    into the error "`rejects`: first line of the cause"; an exception the model's own code
    raises (a `raise` in its file, a class it defines) goes on as it is, for the CLI to tell
    with the model's frames, exit 1, as analyze does. Returns what the model returned.
    `training`: in training mode, on a model sized by a forward before, its buffers (batch-norm
    statistics) put back after; left in eval mode. A forward that needs more than the images
    (forward(self, x, mask)) is refused before it is called: its TypeError is not the images'
    fault. The images are float32 whatever torch's default dtype, and what the forward changes
    in the process is put back after it (`kept`). A model nested too deep for Python's
    recursion limit is TooDeep (`what` names it), not the images' fault either."""
    try:
        return _dry_forward(model, shape, rejects, device, training, batch, memory_format, what)
    except RecursionError:  # walking its modules, before the forward
        refuse_too_deep(model, what)
        raise


def _dry_forward(
    model: nn.Module,
    shape: Sequence[int],
    rejects: str,
    device: torch.device | None,
    training: bool,
    batch: int,
    memory_format: torch.memory_format,
    what: str,
) -> object:
    refuse_more_than_one(model, FED)
    saved = [(b, b.clone()) for b in model.buffers()] if training else []
    switch_mode(model, training, "dlperf")
    zeros = torch.zeros(batch, *shape, device=device, dtype=torch.float32)
    if zeros.dim() == 4:  # the run's memory format, as the trainer feeds its batches
        zeros = zeros.contiguous(memory_format=memory_format)
    try:
        with torch.no_grad(), warnings.catch_warnings(), kept(model, what):
            # torch.utils.checkpoint (reentrant) warns of an input without gradients, as
            # none has any here: the training steps, with gradients, are what it is for
            warnings.filterwarnings("ignore", NO_GRAD_INPUTS, UserWarning)
            # torch's of the API: scores of a nested tensor are refused in their own line
            warnings.filterwarnings("ignore", NESTED_PROTOTYPE, UserWarning)
            return model(zeros)
    except Grown:  # it returned, and grew: its own line
        raise
    except Exception as e:  # a user's forward fails in any way: TypeError for a signature
        if isinstance(e, RecursionError):  # its nesting's, on the way through torch or its own
            refuse_too_deep(model, what)
        if (missing := missing_forward(e, what)) is not None:
            raise missing from None
        if raised_by_model(e):
            raise
        if isinstance(e, OSError):  # a file or a connection of the model's: never the images'
            raise _read_failed(e, what) from None
        if (elsewhere := missing_device(e, what, str(device or "cpu"))) is not None:
            raise elsewhere from None
        first = first_line(e)
        # torch's own errors say what they are, and a TorchScript model's last line names it
        if not isinstance(e, RuntimeError) and not error_text(e).startswith(TORCHSCRIPT):
            first = f"{type(e).__name__}: {first}"
        if out_of_memory(e):
            count = {1: "one", 2: "two"}.get(batch, str(batch))
            images = f"{count} {tuple(shape)} image{'s' * (batch != 1)}"
            raise _no_memory(f"in a forward of {images} on {device or 'cpu'}", e, first) from None
        raise UserError(f"{rejects}: {first}") from None
    finally:
        with torch.no_grad():
            for buffer, value in saved:
                buffer.copy_(value)
        model.eval()


# torch.utils.checkpoint's warning for a forward without gradients (the dry forward's)
NO_GRAD_INPUTS = "None of the inputs have requires_grad=True"
# How torch begins an error raised inside a TorchScript model; the error itself is its last line
TORCHSCRIPT = "The following operation failed in the TorchScript interpreter"


def _no_memory(where: str, e: BaseException, first: str) -> MemoryRanOut:
    """`formatting.ran_out` `where` ("in a forward of two (3, 32, 32) images on cpu"): "a smaller
    model or input" missed the limit to raise where one is set."""
    return ran_out(where, e, first, "a smaller model or input, or a device with more memory")


def first_line(e: BaseException) -> str:
    """The line of torch's error `e` that says what failed: its first, or for an error raised
    inside a TorchScript model (whose first line says only that) its last."""
    lines = error_text(e).strip().splitlines() or [""]  # a library's __str__ may raise
    if not lines[0].startswith(TORCHSCRIPT):
        return lines[0]
    # "RuntimeError: mat1 and mat2 ...", or "builtins.ValueError: ..." for a `raise` in it
    return lines[-1].removeprefix("builtins.").removeprefix("RuntimeError: ")


def refuse_compiling(model: nn.Module, what: str) -> None:
    """`model` (`what`), which run.compile asks to compile, must not be a TorchScript model
    (torch.jit.script or torch.jit.trace): torch.compile refuses one in a traceback."""
    if isinstance(model, torch.jit.ScriptModule):
        raise UserError(
            f"run.compile: a TorchScript model cannot be compiled (model {what} is a "
            f"{type(model).__name__})",
            "set run.compile = false, or return the module without torch.jit.script or "
            "torch.jit.trace",
        )


def check_run_form(
    model: nn.Module,
    shape: Sequence[int],
    what: str,
    device: torch.device | None = None,
    compiled: bool = False,
    channels_last: bool = False,
) -> None:
    """`model` (`what`), through the dry checks at DRY_BATCH, must also take what the run gives
    it, said here before anything is recorded rather than after, from its first step: a
    batch of another size (OTHER_BATCH: a forward that holds the batch at DRY_BATCH, as in
    x.reshape(2, -1), passes those checks alone), torch.compile where run.compile asks
    (`compiled`: torch compiles no TorchScript model), and the channels-last memory format
    where run.channels_last asks (`channels_last`: a .view after a convolution fails in it).
    With `channels_last`, the model is left in that format, as the trainer sets it anyway."""
    if compiled:
        refuse_compiling(model, what)
    fixed = (
        f"take the batch from the input: x.view(x.size(0), -1) or x.flatten(1), not "
        f"x.view({DRY_BATCH}, -1)"
    )
    refused = f"model {what} takes a batch of {DRY_BATCH} images but not of {OTHER_BATCH}"
    try:
        output = dry_forward(model, shape, refused, device, batch=OTHER_BATCH, what=f"model {what}")
    except (Grown, MemoryRanOut):  # their own lines and hints
        raise
    except UserError as e:
        raise UserError(e.message, e.hint or fixed) from None
    if isinstance(output, torch.Tensor) and output.shape[:1] != (OTHER_BATCH,):
        raise UserError(
            f"model {what} returns shape {list(output.shape)} for a batch of {OTHER_BATCH} "
            f"images; expected one row of scores per image, [{OTHER_BATCH}, classes]",
            fixed,
        )
    if channels_last and len(shape) == 3:
        # Module.to converts 4-D and 5-D tensors alike, and a 5-D one (a Conv3d's weight)
        # cannot take channels_last: torch's RuntimeError was a traceback.
        held = (*model.named_parameters(), *model.named_buffers())
        five = next((name for name, t in held if t.dim() == 5), None)
        if five is not None:
            raise UserError(
                f"model {what}: its {five} is 5-D, and run.channels_last's memory format holds "
                "4-D tensors only",
                "set run.channels_last = false",
            )
        model.to(memory_format=torch.channels_last)
        refused = f"model {what} fails in run.channels_last's memory format"
        try:
            dry_forward(
                model,
                shape,
                refused,
                device,
                memory_format=torch.channels_last,
                what=f"model {what}",
            )
        except (Grown, MemoryRanOut):
            raise
        except UserError as e:
            raise UserError(
                e.message,
                "set run.channels_last = false, or use .reshape(...) where its forward has "
                ".view(...) (a view cannot span the channels-last strides)",
            ) from None


LARGEST_TRIED = 512  # the largest side `misfit` tries a model at


def misfit(
    model: nn.Module,
    shape: Sequence[int],
    name: str,
    device: torch.device | None = None,
    image_size: int | None = None,
    classes: int | None = None,
) -> UserError | None:
    """Why `model` rejected images of `shape` (C, H, W) of the data set `name`, where it can
    be told rather than left to the model's own error (a kernel larger than the input, which
    names the shape but not what is wrong with it); None where it cannot. Images stored
    channels-last (N, H, W, C) read as C = H and W = C: 1, 3 or 4 channels in the last place
    and more in the first. Images too small: the model takes square ones of a side up to
    LARGEST_TRIED, and the smallest is found by halving; each try on a copy of `model`, as a
    lazy layer takes the size of the first forward that reaches it. `image_size`: the
    data.image_size the images were resized to, which is then what is too small. A forward
    that needs more than the images is that, whatever their shape. A side is taken only where
    the forward returns the scores a classifier gives, [DRY_BATCH, `classes`] (of any count of
    classes where None): a forward that merely returns (an MLP without nn.Flatten gives
    [2, 1, 64, 10] at side 64, a batch hard-coded in a reshape gives [32, 10]) would be told
    its images are too small, a fix that cannot work, rather than its first error."""
    try:
        refuse_more_than_one(model, FED)
    except UserError as e:
        return e
    c, h, w = shape
    if (layout := channels_last(shape, f"{name} images")) is not None:
        return layout

    def takes(side: int) -> bool:
        try:
            output = dry_forward(copy.deepcopy(model), (c, side, side), "", device)
        except Exception:  # refused by torch (UserError), or by the model's own code
            return False
        return _scores(output, classes)

    side = 2 * max(h, w)
    while side <= LARGEST_TRIED and not takes(side):
        side *= 2
    if side > LARGEST_TRIED:
        return None
    low = max(h, w)  # rejected; the smallest side taken lies in (low, side]
    while side - low > 1:
        middle = (low + side) // 2
        low, side = (low, middle) if takes(middle) else (middle, side)
    if image_size is not None:
        return UserError(
            f"data.image_size = {image_size} is too small for the model: the smallest side it "
            f"takes is {side}",
            f"set data.image_size = {side} or more",
        )
    return UserError(
        f"{name} images of {h}x{w} are too small for the model: the smallest it takes is "
        f"{side}x{side}",
        "give larger images, or set data.image_size to resize them",
    )


def _scores(output: object, classes: int | None) -> bool:
    """Whether `output`, a dry forward's, is the scores `check_classifier` takes in shape:
    [DRY_BATCH, `classes`], or [DRY_BATCH, any] where `classes` is None."""
    if not isinstance(output, torch.Tensor) or output.dim() != 2:
        return False
    return output.shape[0] == DRY_BATCH and classes in (None, output.shape[1])


def no_gradient(what: str, unused: list[str], most: int) -> str:
    """The opening of the warning for model `what`'s trained parameters `unused` that its
    backward (`dry_backward`) gives no gradient, the first `most` named: a plain run's and a
    DDP worker's, each ending in what it means there."""
    named = few(unused, most)
    # For the probe's images alone: a branch that other images take (if x.mean() > 0) gets
    # gradients in training, so nothing more is known of them here
    return (
        f"model {what} has trained parameters its backward gives no gradient for two zero "
        f"images ({named})"
    )


def check_scaled_dtypes(model: nn.Module, name: str, precision: str) -> None:
    """Refuse model `name` under run.precision = "fp16" when it trains float16 parameters (a
    layer built .half() that its forward casts to) or complex ones, whose gradients the fp16
    gradient scaler cannot unscale: the run ended in its traceback ("Attempting to unscale
    FP16 gradients", "not implemented for 'ComplexFloat'") after the dry checks had passed
    it. Frozen ones take no gradient."""
    if precision != "fp16":
        return
    unscalable: dict[str, list[str]] = {}  # names by dtype, in the model's order
    for n, p in model.named_parameters():
        if p.requires_grad and (p.dtype == torch.float16 or p.is_complex()):
            unscalable.setdefault(str(p.dtype).removeprefix("torch."), []).append(n)
    if unscalable:
        names = ", ".join(f"{few(them)} ({dtype})" for dtype, them in unscalable.items())
        raise UserError(
            f"model {name}: its trained parameters {names} have gradients that "
            'run.precision = "fp16"\'s gradient scaler cannot unscale',
            'set run.precision = "bf16", which needs no scaler, or build float16 ones in '
            "float32, which autocast runs in float16 as it trains",
        )


def dry_backward(
    model: nn.Module, shape: Sequence[int], what: str, device: torch.device | None = None
) -> list[str]:
    """One training-mode forward and backward of two zero images, its gradients and buffers
    put back after: a model whose scores carry no gradient (detached, or computed under
    torch.no_grad), whose forward leaves gradients off, whose backward fails (an in-place
    operation on a tensor autograd saved, an operation torch has no derivative for) or gives a
    parameter a sparse gradient is one line here rather than the traceback of the first step.
    Gradients are on for it, and as they were after it, whatever the forward did to them.
    A backward that gives none of the trained parameters (requires_grad) a gradient (a custom
    autograd.Function's backward returning None, a quantized layer on the way) is refused, as
    training would change nothing. Returns the names of those it gave none, in
    named_parameters' order: a plain run trains without them, DDP must be told of them."""
    saved = [(b, b.clone()) for b in model.buffers()]
    grads = [(p, p.grad) for p in model.parameters()]
    switch_mode(model, True, "dlperf")
    cannot = f"model {what} cannot be trained"
    try:
        for p, _ in grads:  # put back below: which ones this backward reaches
            p.grad = None
        with torch.enable_grad():  # put back as it was on leaving, whatever the forward sets
            scores = _forward_with_gradients(model, shape, cannot, device, f"model {what}")
            if not (isinstance(scores, torch.Tensor) and scores.requires_grad):
                frozen = _frozen_on_the_way(model, shape, device, f"model {what}")
                if frozen:
                    raise UserError(
                        f"{cannot}: the parameters its scores come from are frozen "
                        f"(requires_grad=False): {few(frozen, 5)}",
                        "unfreeze those that should train, the head's at least "
                        "(p.requires_grad_(True))",
                    )
                raise UserError(
                    f"{cannot}: it returns scores that carry no gradient",
                    "return the scores as its layers compute them (no .detach(), torch.no_grad "
                    "or .numpy() on the way)",
                )
            if not torch.is_grad_enabled():
                raise UserError(
                    f"{cannot}: its forward turns gradients off and leaves them off "
                    "(torch.set_grad_enabled(False), or torch.no_grad() entered outside a "
                    "with-block)",
                    "turn them off only within a with-block: with torch.no_grad(): ...",
                )
            with warnings.catch_warnings(record=True) as caught:  # said below, or again
                # recorded, never raised (python -W error): said in dlperf's words below
                warnings.filterwarnings("always", UNFED_HOOK, UserWarning)
                try:
                    scores.float().sum().backward()  # type: ignore[no-untyped-call]
                except RuntimeError as e:
                    if model_frames(e):  # the model's own backward (a custom Function's) raised
                        raise
                    raise _backward_failed(e, cannot, shape, device) from None
        check_dense_gradients(model, cannot)
        trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        unused = [n for n, p in trained if p.grad is None]
        if trained and len(unused) == len(trained):
            # torch warns of an operation without a backward (a quantized layer's): named here
            no_kernel = sorted(
                {
                    str(w.message).partition(f": {NO_KERNEL}")[0]
                    for w in caught
                    if NO_KERNEL in str(w.message)
                }
            )
            why = f" (torch has no backward for {few(no_kernel)})" if no_kernel else ""
            raise UserError(
                f"{cannot}: its backward gives none of its {len(trained)} trained parameters a "
                f"gradient{why}, so training would leave every weight as it started",
                "a custom torch.autograd.Function's backward must return its input's gradient, "
                "not None, and every layer between the weights and the scores needs a backward "
                "(a quantized layer has none)",
            )
        refuse_made_in_eval(model, unused, what)
        unfed = [w for w in caught if _unfed_hook(w)]
        if unfed:
            _note_unfed_hooks(model, what)
        for w in caught:
            if w not in unfed:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
        return unused
    finally:
        for p, grad in grads:
            p.grad = grad
        with torch.no_grad():
            for buffer, value in saved:
                buffer.copy_(value)
        model.eval()


def _unfed_hook(w: warnings.WarningMessage) -> bool:
    return issubclass(w.category, UserWarning) and re.match(UNFED_HOOK, str(w.message)) is not None


def _note_unfed_hooks(model: nn.Module, what: str) -> None:
    """Say (`note`, once for model `what`) that a full backward hook of its gets grad_input
    None: torch warned so in the dry backward (UNFED_HOOK), of a layer whose inputs need no
    gradient, as the images of the training steps need none. True of the run, and a hook
    computing from grad_input (a saliency map of the first layer's) finds nothing there; said
    here once, in place of torch's UserWarning at the dry backward and at the first step."""
    hooked = [
        f"{name or 'the model'} ({type(m).__name__})"
        for name, m in model.named_modules()
        if m._backward_hooks and m._is_full_backward_hook
    ]
    how = (
        f"register_full_backward_hook on {few(hooked, 3)}"
        if hooked
        else "register_module_full_backward_hook"  # none of its own: torch's global one
    )
    said = (
        f"model {what} has a full backward hook ({how}) on a layer whose inputs need no "
        "gradient, as the images need none: it gets grad_input None at each training step"
    )
    told = _told(model)
    if said not in told:
        told.add(said)
        note(said, _source(model))


def refuse_made_in_eval(model: nn.Module, unused: Sequence[str], what: str) -> None:
    """Refuse model `what` where parameters its first forward made in evaluation mode are
    among the trained ones its dry backward gives no gradient (`unused`): a layer made for
    evaluation alone, which keeps its initial weights while every score of the run's
    evaluations passes through them (a run at chance, exit 0, no word). Narrow on purpose:
    a layer made in __init__ and left unused is the caller's warning, a frozen one trains
    nothing anyway, and one the first forward made and training uses (sized by the input)
    gets its gradient."""
    made = set(_MADE_IN_EVAL.get(id(model), ()))
    eval_only = [n for n in unused if n in made]
    if eval_only:
        raise UserError(
            f"model {what}: {few(eval_only, 4)} were made in an evaluation-mode forward and get "
            "no gradient in training: they keep their initial weights, and every evaluation's "
            "scores pass through them",
            "make them in __init__, and use them in the training-mode forward too",
        )


def _forward_with_gradients(
    model: nn.Module, shape: Sequence[int], cannot: str, device: torch.device | None, what: str
) -> object:
    """`dry_backward`'s forward of `model` (gradients on, training mode): what it returned.
    An error the model's own code raises (a `raise` in its forward, on this call alone) goes
    on as it is, as from every other forward, for the CLI to tell with the model's frames: it
    was told as "its backward fails". torch's errors here are autograd's, met as the forward
    records the graph (no derivative for an operation, a leaf changed in place, an inference
    tensor saved), as the same forward passed without gradients: the backward's line."""
    try:
        with kept(model, what):
            return model(torch.zeros(DRY_BATCH, *shape, device=device, dtype=torch.float32))
    except RuntimeError as e:
        if raised_by_model(e):
            raise
        raise _backward_failed(e, cannot, shape, device) from None


def _backward_failed(
    e: RuntimeError, cannot: str, shape: Sequence[int], device: torch.device | None
) -> UserError:
    """The one line for torch's error `e` in `dry_backward` (`cannot` starts it)."""
    first = first_line(e)
    if out_of_memory(e):
        return _no_memory(
            f"in a backward of two {tuple(shape)} images on {device or 'cpu'}", e, first
        )
    return UserError(f"{cannot}: its backward fails: {first}", backward_hint(error_text(e)))


def _frozen_on_the_way(
    model: nn.Module, shape: Sequence[int], device: torch.device | None, what: str
) -> list[str]:
    """The frozen parameters (requires_grad=False) of `model`, whose scores carry no gradient,
    that those scores are computed from, found by a forward and backward with all of them
    unfrozen for it: frozen scoring layers beside an unused trainable one read as a detached
    output (the fix for that names .detach() and torch.no_grad, which the model has none of).
    Empty when unfreezing them gives the scores no gradient either (a .detach() or no_grad is
    on the way), or the model fails so. Their requires_grad put back after; the caller puts
    back their gradients and the buffers."""
    frozen = [(n, p) for n, p in model.named_parameters() if not p.requires_grad]
    if not frozen:
        return []
    try:
        for _, p in frozen:
            p.requires_grad_(True)
        with kept(model, what):
            scores = model(torch.zeros(DRY_BATCH, *shape, device=device, dtype=torch.float32))
        if not (isinstance(scores, torch.Tensor) and scores.requires_grad):
            return []
        with warnings.catch_warnings():  # of its zero images, before a refusal: not said
            warnings.filterwarnings("ignore", UNFED_HOOK, UserWarning)
            scores.float().sum().backward()  # type: ignore[no-untyped-call]
        return [n for n, p in frozen if p.grad is not None]
    except Grown:  # said, as from every other forward
        raise
    except Exception:  # a model failing so is told by the line for no gradient
        return []
    finally:
        for _, p in frozen:
            p.requires_grad_(False)


def check_dense_gradients(model: nn.Module, cannot: str) -> None:
    """After a backward of `model`: no parameter may hold a sparse gradient (an nn.Embedding
    or nn.EmbeddingBag made with sparse=True). dlperf's optimizers (weight decay; Adam and
    AdamW at all), gradient clipping and DDP assume dense ones, and would fail at the first
    step in a traceback; `cannot` starts the line."""
    if (found := sparse_gradient(model)) is not None:
        name, made = found
        raise UserError(
            f"{cannot}: its parameter {name} gets a sparse gradient{made}, which dlperf's "
            "optimizers, gradient clipping and DDP do not take",
            "use sparse=False",
        )


def sparse_gradient(model: nn.Module) -> tuple[str, str] | None:
    """The first parameter of `model` holding a sparse gradient, and what made it one where
    its module says (" (Embedding(sparse=True))", else ""); None when every gradient is dense."""
    for name, p in model.named_parameters():
        if p.grad is not None and p.grad.layout != torch.strided:
            owner = model.get_submodule(name.rpartition(".")[0])
            sparse = getattr(owner, "sparse", False)
            return name, f" ({type(owner).__name__}(sparse=True))" if sparse else ""
    return None


def check_batch_fits(batch_size: int, data: ImageData) -> None:
    """A training batch must not be larger than the training split: with the last partial
    batch dropped, an epoch would have no steps."""
    if batch_size > len(data.train):
        raise UserError(
            f"train.batch_size {batch_size} is larger than the {len(data.train)} "
            f"training images of {data.name}",
            f"use train.batch_size <= {len(data.train)}",
        )


def check_target_measured(target: float | None, val_fraction: float, data: ImageData) -> None:
    """A target accuracy is measured on the validation split each epoch: with none of its
    images (data.val_fraction 0, or a share that rounds to no image) it could never be
    reached, and the run would store "never reached" for a target it never measured."""
    if target is None or len(data.val) > 0:
        return
    said = f"data.val_fraction = {val_fraction:g}"
    if val_fraction > 0:
        said += f" rounds to no image of {data.name}"
    raise UserError(
        f"target.accuracy is measured on the validation split, which is empty: {said}",
        "raise data.val_fraction, or drop target.accuracy",
    )


def check_batch_trains(
    model: nn.Module,
    batch_size: int,
    shape: Sequence[int],
    what: str,
    device: torch.device | None = None,
) -> None:
    """`model` (`what`) must take a training batch of `batch_size` images where that is fewer
    than the dry forward's DRY_BATCH, which cannot see it: batch norm in training mode refuses
    a batch of one image ("Expected more than 1 value per channel"). Said before the run is
    recorded rather than as a traceback at its first step."""
    if batch_size >= DRY_BATCH:
        return
    refused = f"model {what} cannot train at train.batch_size {batch_size}"
    try:
        dry_forward(
            model, shape, refused, device, training=True, batch=batch_size, what=f"model {what}"
        )
    except (Grown, MemoryRanOut):
        raise
    except UserError as e:
        raise UserError(
            e.message, f"use train.batch_size {DRY_BATCH} or more, or a model without batch norm"
        ) from None


def eval_remainders(batch_size: int, splits: Mapping[str, int]) -> dict[int, str]:
    """The sizes of the evaluation splits' last batches (`splits`: each split's name and image
    count), which keep their incomplete last batch, where they differ from `batch_size`: the
    split that has each, e.g. {1: "the val split's last batch"}."""
    last: dict[int, str] = {}
    for name, images in splits.items():
        if images % batch_size:
            last.setdefault(images % batch_size, f"the {name} split's last batch")
    return last


def check_run_batch(
    model: nn.Module,
    batch_size: int,
    shape: Sequence[int],
    what: str,
    device: torch.device | None = None,
    where: str | None = None,
) -> None:
    """`model` (`what`) must return one row of scores per image at the run's `batch_size`
    (train.batch_size, or `where`: an evaluation split's last batch) where the dry checks
    (DRY_BATCH, OTHER_BATCH) did not try it: a forward ending in .squeeze() returns [classes]
    for one image, one returning y[:4] is wrong at any batch over 4. Said before the run is
    recorded rather than at its first step, or its first evaluation, after. One forward in
    eval mode without gradients, a third of one of the run's steps."""
    if batch_size in (DRY_BATCH, OTHER_BATCH):
        return
    where = where or f"train.batch_size {batch_size}"
    refused = f"model {what} cannot take a batch of {batch_size} ({where})"
    output = dry_forward(model, shape, refused, device, batch=batch_size, what=f"model {what}")
    check_rows(output, batch_size, what, where)


def check_rows(
    output: object, batch_size: int, what: str, where: str, classes: int | None = None
) -> None:
    """Refuse `output`, model `what`'s for a batch of `batch_size` images (`where`: "train.
    batch_size 5"), unless it is one dense row of scores per image (of `classes` scores, where
    given): a run's batch sizes (`check_run_batch`) and distill's scoring alike. Read for its
    kind and shape only: no value, which would wait on the device."""
    images = f"{batch_size} image{'s' * (batch_size != 1)}"
    expected = f"one row of scores per image, [{batch_size}, {classes or 'classes'}]"
    if isinstance(output, torch.Tensor):  # a nested one at this size only has no shape to read
        check_dense(output, f"model {what} for a batch of {images} ({where}) returns", expected)
        rows = output.shape[:1] == (batch_size,)
        if rows and (classes is None or list(output.shape) == [batch_size, classes]):
            return
        got = f"shape {list(output.shape)}"
    else:  # a dict or tuple the forward returns at this batch size only
        got = f"a {type(output).__name__}"
    raise UserError(
        f"model {what} returns {got} for a batch of {images} ({where}); expected {expected}",
        "take the batch from the input and keep it: x.flatten(1), not .squeeze() (which drops "
        "a batch of one) nor a slice of the batch",
    )


def check_checkpointable(model: nn.Module) -> None:
    """`model`, in a run that writes checkpoints, must have a state torch's weights-only
    loader reads back: a module's extra state holding a NumPy array would otherwise fail the
    run at its first checkpoint, an epoch in, and could never be resumed or exported. Said
    here, before anything is recorded; the save checks it again (a state that changes)."""
    check_loadable(model.state_dict(), "or train without checkpoints: run.checkpoint = false")


def check_reloadable(model: nn.Module, name: str) -> None:
    """`model` (`name`, as the user named it), in a new run that writes checkpoints, must take
    back through its load_state_dict() what its state_dict() gives: an override of
    state_dict() renaming every key, load_state_dict left stock, stores weights that nothing
    (--resume, export, model.weights) loads. Said here, before anything is recorded."""
    load_state(
        model,
        model.state_dict(),
        f"model {name} could never load its checkpoints (--resume, export, model.weights run:ID)",
        f"{DISAGREE}, or train without checkpoints: run.checkpoint = false",
    )


def check_classifier(
    model: nn.Module, output: object, classes: int, what: str, mode: str = ""
) -> torch.Tensor:
    """`model` (`what`, as the user named it), whose dry forward gave `output` (in `mode`,
    where that is said: "in training mode"), must train as a classifier of `classes` classes:
    one float score per class for each of the DRY_BATCH images, on the device of its
    parameters (checked before any value is read: a meta tensor has none), and parameters to
    train. Said here, before anything is recorded, rather than as the loss's or the optimizer's
    traceback at the first step. Scores that are probabilities (a softmax ends the forward)
    are warned of, once: in eval mode (no `mode`) only. Returns `output`, the scores."""
    expected = [DRY_BATCH, classes]
    size = f"a classifier's scores, shape [batch, classes]: {expected} for {DRY_BATCH} images"
    returns = f"model {what} returns{f' {mode}' if mode else ''}"
    if not isinstance(output, torch.Tensor):
        raise UserError(
            f"{returns} a {type(output).__name__}, not a tensor; expected {size}",
            "return the class scores alone (torchvision's googlenet and inception_v3: "
            "model.kwargs.aux_logits = false)",
        )
    check_dense(output, returns, size)
    expected_device = next((p.device for p in model.parameters()), output.device)
    if output.device != expected_device:  # before anything reads its values
        raise UserError(
            f"{returns} its scores on {output.device}; expected them on {expected_device}, "
            "where its parameters and input are",
            "return them where the forward computes them (no .to(), .cpu() or .cuda() on the way)",
        )
    if list(output.shape) != expected:
        raise UserError(
            f"{returns} shape {list(output.shape)}; expected {size}",
            f"end the model in one score per class ({classes}); a factory that takes "
            "num_classes gets the data's count",
        )
    check_float(output, returns)
    if not mode:  # said once: the training-mode forward's scores would say it again
        _warn_probabilities(model, output, what)
    refused = untrainable(model, what)  # analyze --train refuses it in the same words
    if refused is not None:
        raise refused
    return output


def check_dense(output: torch.Tensor, returns: str, expected: str) -> None:
    """Refuse scores (`output`, which "model X `returns`") that are a tensor but not a dense
    one, `expected` instead: a sparse one (y.to_sparse()) or a nested one (torch.nested) has no
    shape to check, and torch refused the first reading of its values or its sizes in a
    traceback. Said before anything reads them; run's dry check and export's say it alike."""
    if output.is_nested:  # a jagged one's layout is torch.jagged, an older one's strided
        raise UserError(
            f"{returns} a nested tensor (torch.nested); expected {expected}",
            "return one dense tensor, a row of scores per image (torch.stack of the rows, "
            "or y.to_padded_tensor(0.0))",
        )
    if output.layout != torch.strided:  # sparse (COO, CSR, ...) or a oneDNN (mkldnn) tensor
        raise UserError(
            f"{returns} a tensor of layout {output.layout}; expected {expected}",
            "return them dense: y.to_dense()",
        )


def check_float(output: torch.Tensor, returns: str) -> None:
    """Refuse scores (`output`, which "model X `returns`") that are no floats, with the fix
    for their kind: complex ones are made real (no argmax or rounding made them complex),
    integer and bool ones are returned before the argmax or rounding that made them. Run's
    dry check and export's say it alike."""
    if output.is_floating_point():
        return
    fix = (
        "return real scores: the .real or .abs() of the complex values"
        if output.is_complex()
        else "return the scores before any argmax or rounding"
    )
    raise UserError(f"{returns} {output.dtype} values; expected float scores (logits)", fix)


# How far from 1 a row of probabilities may sum (float32 rounding over many classes)
SUMS_TO_ONE = 1e-4


PROBABILITIES = (
    "returns probabilities{mode} (each row of its scores is non-negative and sums to 1, as after "
    "a softmax)"
)
"""What a model whose scores are `probabilities` is said to return ({mode}: " in eval mode"
where that is said); run's dry check and export's say it alike."""
BEFORE_SOFTMAX = "return the scores before the softmax (the logits; log_softmax is fine)"


def probabilities(scores: torch.Tensor) -> bool:
    """Whether dry-forward `scores` are probabilities, each row non-negative and summing to 1,
    as a softmax at the end of a forward gives: the loss, cross-entropy, takes logits and
    applies softmax itself, and export records them for `dlperf infer` and /predict, which
    softmax scores not so recorded. log_softmax's scores are negative, and a softmax of them
    is the logits': not these."""
    if scores.is_meta or scores.numel() == 0:  # no values to read
        return False
    with torch.no_grad():
        values = scores.detach().float()
        if not bool((values >= 0).all()):
            return False
        sums = values.sum(dim=-1)
        return bool(((sums - 1).abs() <= SUMS_TO_ONE).all())


def _warn_probabilities(model: nn.Module, scores: torch.Tensor, what: str) -> None:
    """Warn (`note`) where `model`'s (`what`) dry-forward `scores` are `probabilities`: the
    model would train on a softmax of probabilities (slowly, to a worse accuracy), with no
    error to say so. (Its export records them, and infer shows them as they are.) A warning,
    not a refusal: a model may mean it (a mixture it normalises itself)."""
    if not probabilities(scores):
        return
    note(
        f"model {what} {PROBABILITIES.format(mode='')}, but training's cross-entropy takes "
        f"logits and applies softmax itself: {BEFORE_SOFTMAX}",
        _source(model),
    )


def check_finite(
    model: nn.Module,
    output: torch.Tensor,
    shape: Sequence[int],
    what: str,
    device: torch.device | None = None,
) -> None:
    """`model` (`what`), whose dry forward of zero images gave `output`, must give finite
    scores for finite images before any training step: NaN or inf there comes from the model
    itself (a NaN in its initial weights or its forward), and is said here rather than as the
    first step's "loss became nan ... try a lower train.lr". Zero images alone can make NaN of
    a sound model (one that divides by their norm), so random ones are tried before refusing."""
    if bool(torch.isfinite(output).all()):
        return
    with torch.no_grad(), kept(model, f"model {what}"):
        again = model(torch.rand(DRY_BATCH, *shape, device=device, dtype=torch.float32))
    if (
        isinstance(again, torch.Tensor)
        and again.device == output.device  # a meta tensor has no values to read
        and bool(torch.isfinite(again).all())
    ):
        return
    raise UserError(
        f"model {what} gives NaN or inf scores for finite images before any training step: the "
        "model itself, not the learning rate",
        "look at its forward and the initial values of its layers",
    )


def check_classes(data: ImageData, limit: int | None) -> None:
    """Refuse `data` (loaded under data.limit `limit`) when a classifier cannot train on it
    (see `too_few_classes`)."""
    refused = too_few_classes(data, limit)
    if refused is not None:
        raise refused
