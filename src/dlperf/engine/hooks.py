"""Callbacks every trainer calls, so that tests (and tools) can watch or stop a run from
outside the library: after the model is built (`start`) and after each training step
(`step_end`).

A trainer in another process (a `dlperf run` subprocess, a torchrun or Horovod worker, a
sweep's worker) finds its hooks the way pytest finds plugins: DLPERF_HOOKS names
comma-separated `module:factory` callables, each imported and called once with no
arguments to make one hook. Unset, there are none and the trainers pay one empty loop.

`Hooks` is a component of the training loop (dlperf.engine.train_loop). No torch here: the
Keras workers run that loop too, and TensorFlow and torchvision must not share a process.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from dlperf.errors import UserError

if TYPE_CHECKING:
    from torch import nn

HOOKS_ENV = "DLPERF_HOOKS"


@dataclass(frozen=True)
class StepEnd:
    """A training step just taken: which trainer, its global step (1 first), the batch, what
    the step returned (a dlperf.engine.step.Stepped) and the model it updated."""

    trainer: str  # run, ddp, horovod, sync, async, detect, tensorflow
    step: int
    x: Any
    y: Any
    stepped: Any
    model: Any  # an nn.Module; a Keras worker's model
    rank: int = 0
    world: int = 1


class Hook(Protocol):
    def start(self, trainer: str, model: nn.Module) -> None: ...

    def step_end(self, event: StepEnd) -> None: ...


class Hooks:
    """The hooks of a trainer, called in order."""

    def __init__(self, hooks: Sequence[Hook] = ()) -> None:
        self.hooks = list(hooks)

    @classmethod
    def from_env(cls) -> Hooks:
        """The hooks DLPERF_HOOKS names (none when unset)."""
        hooks = []
        # Stripped before the blanks are dropped: ' m:f , ' is the one entry 'm:f'
        specs = [spec.strip() for spec in os.environ.get(HOOKS_ENV, "").split(",")]
        for spec in filter(None, specs):
            module, _, name = spec.partition(":")
            if not (module and name):
                raise UserError(f"{HOOKS_ENV} names module:factory callables, not {spec!r}")
            hooks.append(_hook(spec, f"{module}.{name}", _factory(spec, module, name)))
        return cls(hooks)

    def start(self, trainer: str, model: nn.Module) -> None:
        for hook in self.hooks:
            hook.start(trainer, model)

    def step_end(self, event: StepEnd) -> None:
        for hook in self.hooks:
            hook.step_end(event)

    # The loop's component: the hooks see each step as the loop counts it.
    def on_epoch_start(self, epoch: int, batches: object) -> None:
        pass

    def on_step_end(self, done: StepEnd) -> None:
        self.step_end(done)

    def on_epoch_end(self, epoch: int) -> None:
        pass


def _factory(spec: str, module: str, name: str) -> Any:
    """The callable one DLPERF_HOOKS entry names. A module (or one it imports) or an attribute
    that is not there, or one that is not callable (os:sep), is a UserError of one line naming
    the entry and what is wrong; any other error of the module's import is its own, and goes
    up as it is."""
    try:
        found = importlib.import_module(module)
    except ModuleNotFoundError as e:
        missing = e.name or module
        wrong = f"no module named {missing!r}"
        if missing != module and not module.startswith(f"{missing}."):
            wrong += f" (imported by {module!r})"
        raise UserError(f"{HOOKS_ENV} entry {spec!r}: {wrong}") from e
    try:
        factory = getattr(found, name)
    except AttributeError as e:
        raise UserError(
            f"{HOOKS_ENV} entry {spec!r}: module {module!r} has no attribute {name!r}"
        ) from e
    if not callable(factory):
        raise UserError(
            f"{HOOKS_ENV} entry {spec!r}: {module}.{name} is a {type(factory).__name__}, "
            "not a callable",
            "name a factory that makes a hook",
        )
    return factory


def _hook(spec: str, named: str, factory: Any) -> Any:
    """The hook `factory` makes, refused in one line when it lacks a hook's methods: it would
    fail only once the trainer calls them, with a traceback."""
    hook = factory()
    missing = [m for m in ("start", "step_end") if not callable(getattr(hook, m, None))]
    if missing:
        raise UserError(
            f"{HOOKS_ENV} entry {spec!r}: {named}() gave a {type(hook).__name__}, which has "
            f"no {' and '.join(missing)}",
            "name a factory that makes a hook: one with start and step_end methods",
        )
    return hook
