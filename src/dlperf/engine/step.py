"""The one training step, shared by every trainer: plain runs, DDP and Horovod workers,
async-SGD emulation, detection.

`prepare(model, train, run, ...)` is the one place an experiment's step is built: memory format,
the launcher's wrapping (DDP) and torch.compile of the forward pass, the optimizer (wrapped
by Horovod's where it runs), schedule, precision, loss and clipping. `TrainStep(x, y)` reads
top to bottom: zero grad, forward and loss under autocast, backward (where DDP all-reduces
the gradients), unscale and clip, optimizer step through the fp16 gradient scaler,
learning-rate schedule. Timing stays out of it: `timer.mark(phase)` is called after each
phase and does nothing unless the trainer hands in a real timer.
"""

from __future__ import annotations

import math
import numbers
import os
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn
from torch.optim.lr_scheduler import LRScheduler

from dlperf.analytic.counting import UNFED_HOOK, backward_hint
from dlperf.config import RunConfig, TrainConfig
from dlperf.engine.checks import (
    IN_INIT,
    RETYPED,
    Held,
    Kept,
    first_line,
    refuse_compiling,
    sparse_gradient,
)
from dlperf.engine.optim import build_optimizer, build_scheduler
from dlperf.engine.train_loop import StepError
from dlperf.errors import (
    UserError,
    error_text,
    innermost,
    interrupted,
    model_frames,
    out_of_memory,
)
from dlperf.formatting import clip, few
from dlperf.precision import autocast as precision_autocast


class WrongOutput(Exception):
    """The model's output is not one row of float scores, one per class, for each image of the
    batch: a model that returns so only in batches larger than the up-front check's two
    images, or only after some steps. The run fails with this one line, as a diverged loss
    does, rather than with the loss's traceback from inside dlperf that never names the model
    (or, for extra columns, no failure at all)."""


class GradientsOff(WrongOutput):
    """The model's forward turned gradients off for the whole process and left them off
    (torch.set_grad_enabled(False), a no_grad entered outside a with-block) at a step after the
    dry backward's: its loss has no gradient, and the step's backward failed in torch's
    traceback ("element 0 of tensors does not require grad"). The run fails in this one line,
    as for a wrong output."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__(
            f"model {type(model).__name__} turned gradients off in its forward and left them "
            "off (torch.set_grad_enabled(False), or torch.no_grad() entered outside a "
            "with-block): the loss has none to train on; turn them off only within a "
            "with-block: with torch.no_grad(): ..."
        )


class ModelGrew(WrongOutput):
    """The model's forward registered parameters or persistent buffers during training, after
    the optimizer was built from those it had (a layer made at its twentieth call, past the dry
    checks, which refuse one made before): they never train, every later score passes through
    them as they were made, and the checkpoint holds them though the factory builds no such
    network. The run fails in this one line, as for a wrong output; it trained, rc 0, with no
    word."""

    def __init__(self, model: nn.Module, changed: str, only_retyped: bool = False) -> None:
        # A dtype change alone (self.double()) adds nothing: it trained on in that dtype
        why, fix = (
            ("it trained on in that dtype, stored at its run.precision", RETYPED)
            if only_retyped
            else ("what it adds never trains, and its checkpoint fits no network its factory "
                  "builds", IN_INIT)
        )  # fmt: skip
        super().__init__(
            f"model {type(model).__name__}'s forward {changed} during training, after the "
            f"optimizer was built: {why}; {fix}"
        )


class StepFailed(WrongOutput, StepError):
    """torch's error in a training step's backward or optimizer step, past the dry checks that
    passed the model (a forward that edits an autograd output in place from its 12th call, or
    reassigns a parameter's .data at another shape): the run fails in this one line, torch's
    message and the fix where one is known, as the dry backward says it before a run, rather
    than in dlperf's 55-line traceback. The loop that took the step names it (StepError)."""

    def __init__(self, what: str, said: str, hint: str | None) -> None:
        super().__init__(what, said, hint)
        self.what, self.said, self.hint = what, said, hint

    def __str__(self) -> str:
        line = f"{self.what} failed{self.at()}: {self.said}"
        return f"{line} ({self.hint})" if self.hint else line


def check_output(
    model: nn.Module, output: Any, y: Any, classes: int | None, where: str = ""
) -> int | None:
    """Raise WrongOutput where `model`'s `output` for the batch of labels `y` is not one row of
    float scores per image, `classes` scores to a row: a look at shape and dtype, which waits
    for nothing on the device. Outputs that are not one tensor (a detector's) are left to their
    own loss. `where` follows the batch in the message (" in evaluation"; training says
    nothing). Returns the classes checked against: `classes`, or where they are not known
    (None: a step built without them) the output's own columns, for the next steps to hold
    to."""
    if not (isinstance(output, torch.Tensor) and isinstance(y, torch.Tensor)):
        return classes
    images = y.shape[0]
    returned = f"model {type(model).__name__} returned"
    batch = f"for a batch of {images} images{where}"
    # On the model's device, looked at before the loss reads it (a meta tensor has no values).
    # The parameters' device, not the labels': a loader may leave those on the host for DDP.
    expected = next((p.device for p in model.parameters()), output.device)
    if output.device != expected:
        raise WrongOutput(
            f"{returned} its scores on {output.device} {batch}: expected them on {expected}, "
            "where its parameters are"
        )
    if output.shape[:1] != y.shape[:1]:
        raise WrongOutput(
            f"{returned} shape {list(output.shape)} {batch}: "
            f"expected [{images}, classes], one row of scores per image"
        )
    if not output.is_floating_point():
        raise WrongOutput(
            f"{returned} {output.dtype} scores {batch}: expected float scores (logits)"
        )
    if classes is None:
        classes = output.shape[-1]
    if list(output.shape) != [images, classes]:
        raise WrongOutput(
            f"{returned} shape {list(output.shape)} {batch}: expected "
            f"[{images}, {classes}], one score per class ({classes}) for each image"
        )
    return classes


class CompileFailed(UserError):
    """torch.compile's backend could not compile the step (no working C++ compiler, a Python
    it cannot run): the host's problem, not the experiment's, so exit 1, in one line rather
    than torch's hundred-line traceback."""

    exit_code = 1


def _compile_told(compiled: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`compiled` (torch.compile's forward, which compiles at its first call), its backend's
    failure raised as CompileFailed."""
    from torch._dynamo.exc import BackendCompilerFailed
    from torch._inductor.exc import InvalidCxxCompiler

    def forward(x: Any) -> Any:
        try:
            return compiled(x)
        except BackendCompilerFailed as e:
            if isinstance(e.inner_exception, InvalidCxxCompiler):
                raise CompileFailed(
                    "torch.compile needs a C++ compiler, and none works here",
                    "install g++ or set CXX, or set run.compile=false",
                ) from None
            inner = e.inner_exception
            said = (str(inner).strip().splitlines() or [""])[0]
            raise CompileFailed(
                f"torch.compile failed: {type(inner).__name__}: {said}",
                "set run.compile=false to run without it",
            ) from None

    return forward


class Timer(Protocol):
    def mark(self, phase: str) -> None: ...


class NoTimer:
    """The default timer: phases are not timed."""

    def mark(self, phase: str) -> None:
        pass


@dataclass
class Stepped:
    """What one step leaves for the trainer's bookkeeping."""

    loss: torch.Tensor  # detached and still on the device: reading it waits for the device
    output: Any
    lr: float  # the learning rate this step applied


@dataclass
class TrainStep:
    """One optimisation step of `model`'s parameters, the forward pass through `forward`
    (the model itself, or the module wrapping it: DDP, DataParallel, torch.compile)."""

    model: nn.Module
    forward: Callable[[Any], Any]
    loss_fn: Callable[[Any, Any], torch.Tensor]
    optimizer: torch.optim.Optimizer
    scheduler: LRScheduler
    autocast: torch.autocast
    scaler: torch.amp.GradScaler
    grad_clip: float | None = None
    timer: Timer = field(default_factory=NoTimer)
    # Horovod all-reduces in here, before clipping; DDP has already, during backward.
    reduced: Callable[[], AbstractContextManager[Any]] = nullcontext
    memory_format: torch.memory_format = torch.preserve_format  # the trainer's inputs'
    # The scores each output row holds: see check_output.
    classes: int | None = None
    # What the model held as the optimizer was built from it: see check_not_grown.
    held: Held = field(init=False)
    # Its parameters' shapes then: a forward that reassigns one's .data at another shape
    # fails the backward or the optimizer step, whose error names no parameter (StepFailed).
    shapes: dict[str, torch.Size] = field(init=False)
    # The parameters it trained then: a forward that freezes them all (requires_grad_(False))
    # fails the backward in torch's words for gradients turned off, which name none of them.
    trained: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.held = Held.of(self.model)
        self.shapes = {
            n: p.shape for n, p in self.model.named_parameters() if not nn.parameter.is_lazy(p)
        }
        self.trained = [n for n, p in self.model.named_parameters() if p.requires_grad]

    def check_not_grown(self) -> None:
        """Raise ModelGrew where the model holds parameters or persistent buffers it did not
        as the optimizer was built (`held`). Asked as each epoch ends, before its checkpoint,
        and after a final evaluation, not at every step: a walk of the model's modules."""
        changed = self.held.changed(self.model)
        if changed is not None:
            raise ModelGrew(self.model, changed, self.held.only_retyped(self.model, changed))

    def __call__(self, x: Any, y: Any) -> Stepped:
        self.optimizer.zero_grad()  # to None, torch's default: Horovod's takes no argument
        kept, grad = Kept.now(), torch.is_grad_enabled()
        with self.autocast:
            output = self.forward(x)
            if grad and not torch.is_grad_enabled():
                torch.set_grad_enabled(True)  # the caller's, as it was
                raise GradientsOff(self.model)
            # Its backward and optimizer step on the run's threads and dtype, as recorded
            kept.put_back(self.model)
            self.classes = check_output(self.model, output, y, self.classes)
            loss = self.loss_fn(output, y)
        self.timer.mark("forward")
        name = type(self.model).__name__
        try:
            with warnings.catch_warnings():  # microseconds a step
                # A full backward hook on the first layer gets grad_input None, the images
                # needing no gradient: torch warned of it at the first step, naming this line;
                # the dry backward before the run says it once, in dlperf's words
                # (checks.dry_backward)
                warnings.filterwarnings("ignore", UNFED_HOOK, UserWarning)
                self.scaler.scale(loss).backward()  # type: ignore[no-untyped-call]
        except Exception as e:  # torch's RuntimeError mostly; _failed tells what it takes
            if (failed := self._failed(e, f"model {name}'s backward", backward=True)) is None:
                raise
            raise failed from e
        self.timer.mark("backward")
        try:
            with self.reduced():
                if self.grad_clip is not None:
                    self.scaler.unscale_(self.optimizer)  # clip the true gradients, not scaled
                    nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
                self.scaler.step(self.optimizer)  # skipped when fp16 gradients overflowed
        except Exception as e:  # a TypeError too: an lr the forward set to a str
            what = f"model {name}'s optimizer step ({type(self.optimizer).__name__})"
            if (failed := self._failed(e, what, backward=False)) is None:
                raise
            raise failed from e
        self.scaler.update()
        lr = float(self.scheduler.get_last_lr()[0])
        self.scheduler.step()
        self.timer.mark("optimizer")
        return Stepped(loss.detach(), output, lr)

    def _failed(self, e: Exception, what: str, backward: bool) -> StepFailed | None:
        """The one line for torch's error `e` in `what` (the `backward`, or the optimizer step);
        None for one told otherwise: one torch did not raise (dlperf's own, in its traceback),
        the model's own code's (a custom Function's backward: its frames), running out of
        memory (the memory's line), a stop's, and any met by a distributed step (a peer that
        left fails DDP's all-reduce in the backward, Horovod's in `reduced`: the launcher
        tells which rank failed first)."""
        if not _raised_in_torch(e) or model_frames(e) or out_of_memory(e) or interrupted(e):
            return None
        if self._distributed():
            return None
        # The causes torch's error does not name, the first found told
        hint = self._reshaped() or (self._frozen(e) if backward else self._unsteppable())
        if hint is None and backward:  # the dry backward's fix, where torch's error is one it knows
            known = backward_hint(error_text(e))
            hint = None if known == backward_hint("") else known  # its fallback: no fix known
        return StepFailed(what, first_line(e), hint)

    def _reshaped(self) -> str | None:
        """The parameters the forward reassigned at another shape, with the fix."""
        now = dict(self.model.named_parameters())
        reshaped = [
            f"{n} {list(shape)} -> {list(now[n].shape)}"
            for n, shape in self.shapes.items()
            if n in now and not nn.parameter.is_lazy(now[n]) and now[n].shape != shape
        ]
        if not reshaped:
            return None
        return (
            f"its forward changed the shape of {few(reshaped, 4)} during training, after the "
            "optimizer was built: a parameter keeps its shape; make a layer of each shape it "
            "needs in __init__"
        )

    def _frozen(self, e: Exception) -> str | None:
        """For a backward whose loss has no gradient (torch: "does not require grad"): the
        trained parameters the forward froze, where it froze any. torch's words, and the dry
        backward's fix for them, are of gradients turned off (no_grad, .detach())."""
        if "does not require grad" not in error_text(e):
            return None
        now = dict(self.model.named_parameters())
        frozen = [n for n in self.trained if n in now and not now[n].requires_grad]
        if not frozen:
            return None
        return (
            f"its forward froze {few(frozen, 4)} (requires_grad=False) during training, after "
            "the optimizer was built: the scores carry no gradient; freeze in __init__ only "
            "what should not train, and leave requires_grad alone in forward"
        )

    def _unsteppable(self) -> str | None:
        """For a failed optimizer step: a sparse gradient the forward brought on (an
        nn.Embedding made sparse=True mid-run; torch's error then advises add(dense, sparse)),
        or a hyperparameter of the optimizer's param groups it set to a non-number (an lr of
        "fast": torch's TypeError names neither)."""
        if (sparse := sparse_gradient(self.model)) is not None:
            name, made = sparse
            return (
                f"its parameter {name} got a sparse gradient{made} during training, which "
                "dlperf's optimizers, gradient clipping and DDP do not take: use sparse=False"
            )
        for group in self.optimizer.param_groups:
            for key, default in self.optimizer.defaults.items():
                value = group.get(key)
                if _number(default) and not (_number(value) or isinstance(value, torch.Tensor)):
                    return (
                        f"the optimizer's {key} is {clip(repr(value), 40)} "
                        f"({type(value).__name__}), set during training: leave its param groups "
                        "to dlperf (train.lr and the schedule set the learning rate)"
                    )
        return None

    def _distributed(self) -> bool:
        """Whether the step reduces across processes (DDP's process group, Horovod's)."""
        group = torch.distributed.is_available() and torch.distributed.is_initialized()
        return group or self.reduced is not nullcontext

    def state_dict(self) -> dict[str, Any]:
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])


def _number(value: object) -> bool:
    """Whether `value` is a plain number (a bool is not one: an optimizer's flag)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _raised_in_torch(e: BaseException) -> bool:
    """Whether `e` was raised in torch's own code (its innermost frame is torch's, as for its
    C++ errors, raised from the Python function that called in), not in dlperf's."""
    tb = innermost(e)
    return tb is not None and tb.tb_frame.f_code.co_filename.startswith(_TORCH_DIR)


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def steps_per_epoch(samples: int, batch: int, partial: bool = False) -> int:
    """Steps of an epoch of `samples` at `batch` samples a step (the global batch, across
    workers), as every trainer counts them for its schedule: full batches only, or with the
    last partial one where the trainer takes it (`partial`: detection); never fewer than 1."""
    return max(1, math.ceil(samples / batch) if partial else samples // batch)


def build_step(
    model: nn.Module,
    cfg: TrainConfig,
    precision: str,
    device: torch.device,
    steps_per_epoch: int,
    forward: Callable[[Any], Any] | None = None,
    timer: Timer | None = None,
    distribute: Callable[[torch.optim.Optimizer], torch.optim.Optimizer] | None = None,
    loss_fn: Callable[[Any, Any], torch.Tensor] | None = None,
) -> TrainStep:
    """The step of an experiment's `train` section at `precision`: its optimizer (handed to
    `distribute` to wrap, if given), per-step schedule (epochs of `steps_per_epoch` steps),
    `loss_fn` (by default the classifier's label-smoothed cross-entropy), gradient
    clipping, and a gradient scaler for fp16."""
    optimizer = build_optimizer(model, cfg)
    if distribute is not None:  # the schedule must drive the optimizer that steps
        optimizer = distribute(optimizer)
    # The gradient scaler that fp16 alone needs: its narrow exponent flushes small gradients to 0.
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    return TrainStep(
        model=model,
        forward=forward if forward is not None else model,
        loss_fn=loss_fn or nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing),
        optimizer=optimizer,
        scheduler=build_scheduler(optimizer, cfg, steps_per_epoch),
        autocast=precision_autocast(device, precision),
        scaler=scaler,
        grad_clip=cfg.grad_clip,
        timer=timer if timer is not None else NoTimer(),
    )


def prepare(
    model: nn.Module,
    train: TrainConfig,
    run: RunConfig,
    device: torch.device,
    steps_per_epoch: int,
    wrap: Callable[[nn.Module], Callable[[Any], Any]] | None = None,
    distribute: Callable[[torch.optim.Optimizer], torch.optim.Optimizer] | None = None,
    timer: Timer | None = None,
    loss_fn: Callable[[Any, Any], torch.Tensor] | None = None,
    classes: int | None = None,
) -> TrainStep:
    """The training step of an experiment's `train` and `run` sections for `model`, whatever
    launches it (as torchtitan's parallelize_fn): `model` moved to `device` in
    run.channels_last's memory format, its forward pass wrapped by the launcher's `wrap`
    (DDP, a stale-weights reader, a detector taking its targets) and compiled when
    run.compile asks, its optimizer wrapped by `distribute` (Horovod's), and the schedule,
    precision, loss (`loss_fn`, else cross-entropy) and clipping of `train` and
    run.precision. Each output is held to `classes` scores a row (the data's classes; None:
    to the first step's own columns)."""
    memory_format = torch.channels_last if run.channels_last else torch.preserve_format
    model.to(device).to(memory_format=memory_format)
    forward = wrap(model) if wrap is not None else model
    if run.compile:
        # Refused before the run is recorded (check_run_form); here for any other caller
        refuse_compiling(model, type(model).__name__)
        forward = _compile_told(torch.compile(forward))
    step = build_step(
        model, train, run.precision, device, steps_per_epoch, forward, timer, distribute, loss_fn
    )
    step.memory_format = memory_format
    step.classes = classes
    return step
