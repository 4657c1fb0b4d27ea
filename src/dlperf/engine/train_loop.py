"""The one training loop every trainer runs, in the manner of torchtitan's `Trainer.train`:
a loop over batches that calls one step and then asks each component whether it is its
turn. Evaluation, checkpoints, the profiler, timing windows, metrics and hooks are
components owning their cadence (`on_epoch_start`, `on_step_end`, `on_epoch_end`); the data
wait is marked by `TimedBatches`, a wrapper around the batch iterator, so that no timer
sits in the loop or the step.

`dlperf run`, async SGD and detection run it through dlperf.engine.loop.fit (epochs of a
data set); a scaling point's workers run it over endless batches with the timing component
of dlperf.distributed.window. No torch here: the Keras workers run this loop over their own
step, and TensorFlow and torchvision must not share a process.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from dataclasses import dataclass, field
from typing import Any, Protocol

from dlperf.engine.hooks import StepEnd

Batch = tuple[Any, Any]
Step = Callable[[Any, Any], Any]  # (x, y) -> what the step returns (a Stepped)


class Component(Protocol):
    """A part of training that decides for itself, at each call, whether it has work to do.
    Subclasses override only what they need."""

    def on_epoch_start(self, epoch: int, batches: Iterable[Batch]) -> None:
        return None

    def on_step_end(self, done: StepEnd) -> None:
        return None

    def on_epoch_end(self, epoch: int) -> None:
        return None


@dataclass
class Progress:
    """What a checkpoint must carry besides weights and optimizer: where and how far along.
    `step` is the loop's count of steps taken, the one the hooks see."""

    epoch: int = 0
    step: int = 0
    elapsed_s: float = 0.0
    train_time_s: float = 0.0
    cpu_time_s: float = 0.0  # this process's, over the same timed windows as train_time_s
    samples: int = 0
    best_val_accuracy: float | None = None  # None while no epoch had images to validate on
    epochs_to_target: int | None = None
    time_to_target_s: float | None = None
    epoch_throughputs: list[float] = field(default_factory=list)
    gpu_utilization_pct: list[float] = field(default_factory=list)  # one reading per epoch
    # With phases timed: each phase's seconds and each step's seconds over the same timed steps
    # as train_time_s (one float a step), so that a resumed run's phases and step-time spread
    # cover the whole run, as its throughput does. A checkpoint older than them has neither.
    phase_totals: dict[str, float] = field(default_factory=dict)
    step_times: list[float] = field(default_factory=list)

    def end_epoch(self, epoch: int, seconds: float, accuracy: float, target: float | None) -> None:
        """Count epoch `epoch`, `seconds` long with its evaluation, of validation `accuracy`
        (NaN where there was none: a validation split of no images, which is no accuracy
        rather than an accuracy of 0), noting when the accuracy first reached `target`."""
        self.epoch = epoch
        self.elapsed_s += seconds
        if not math.isnan(accuracy):
            best = self.best_val_accuracy
            self.best_val_accuracy = accuracy if best is None else max(best, accuracy)
        if target is not None and self.epochs_to_target is None and accuracy >= target:
            self.epochs_to_target, self.time_to_target_s = epoch, self.elapsed_s

    def add_phases(self, totals: dict[str, float], step_times: list[float]) -> None:
        """Count an epoch's timed phases: each phase's seconds and its steps' seconds."""
        for phase, seconds in totals.items():
            self.phase_totals[phase] = self.phase_totals.get(phase, 0.0) + seconds
        self.step_times += step_times


class StepError(Exception):
    """An error of one step that names where it was taken: the loop that took the step tells
    it the step (`state.step`'s count, this one included) and the epoch. Here, without torch,
    for the step's own errors to subclass (dlperf.engine.step.StepFailed)."""

    step: int | None = None
    epoch: int | None = None

    def at(self) -> str:
        """Where the loop took the step, as its line says it: " at step 12 (epoch 1)"; ""
        where no loop told it."""
        return "" if self.step is None else f" at step {self.step} (epoch {self.epoch})"


def train_loop(
    step: Step,
    epochs: Iterable[tuple[int, Iterable[Batch]]],
    components: Sequence[Component],
    state: Progress,
    *,
    trainer: str,
    model: Any,
    steps: int | None = None,
    rank: int = 0,
    world: int = 1,
) -> Progress:
    """Take `step` on each batch of each (epoch, batches) of `epochs`, `steps` steps at most
    (None: all of them), counting them in `state.step`; each component is called, in order,
    as every epoch starts and ends and after every step."""
    last = None if steps is None else state.step + steps
    if state.step == last:
        return state
    for epoch, batches in epochs:
        for component in components:
            component.on_epoch_start(epoch, batches)
        for x, y in batches:
            try:
                stepped = step(x, y)
            except StepError as e:
                e.step, e.epoch = state.step + 1, epoch
                raise
            state.step += 1
            done = StepEnd(trainer, state.step, x, y, stepped, model, rank, world)
            for component in components:
                component.on_step_end(done)
            if state.step == last:
                break
        for component in components:
            component.on_epoch_end(epoch)
        if state.step == last:
            break  # before the next epoch's batches are drawn
    return state


class TimedBatches:
    """`source`'s batches made ready for the step by `collate` (to the device, say), with
    `mark("data")` once a batch has arrived and `mark("h2d")` once it is ready: the data
    wait, timed around the iterator rather than inside the loop."""

    def __init__(
        self,
        source: Iterable[Batch],
        collate: Callable[[Any, Any], Batch],
        mark: Callable[[str], None],
    ) -> None:
        self.source, self.collate, self.mark = source, collate, mark

    def __iter__(self) -> Iterator[Batch]:
        for x, y in self.source:
            self.mark("data")
            ready = self.collate(x, y)
            self.mark("h2d")
            yield ready

    def __len__(self) -> int:
        if not isinstance(self.source, Sized):
            raise TypeError("an endless source has no length")
        return len(self.source)
