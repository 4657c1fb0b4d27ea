"""`fit`: the epochs of a data set through the one training loop
(dlperf.engine.train_loop), for `dlperf run`, async SGD and detection: its components are
the bookkeeping below it, each owning its cadence.

Metric keys it writes to the sink (step = global step for `train/`, epoch number 1..E for
the others): train/loss, train/lr; epoch/train_loss, epoch/train_acc1, epoch/time_s,
epoch/throughput, epoch/cpu_wait_share, epoch/lr; val/<what evaluate returns>; phase/<phase>_s;
gpu/utilization_pct (CUDA with the `gpu` extra: NVML's reading as the epoch's training ends).
The hooks of dlperf.engine.hooks see every step once its losses are flushed as due.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sized
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from dlperf import contention, stopping
from dlperf.config import RunConfig
from dlperf.data import Loader
from dlperf.engine import timers
from dlperf.engine.divergence import blown_up, diverged_fix, evaluation_fix
from dlperf.engine.hooks import Hooks, StepEnd
from dlperf.engine.profiler import ProfileWindow
from dlperf.engine.step import Stepped, TrainStep
from dlperf.engine.timers import PhaseTimer
from dlperf.engine.train_loop import Batch, Component, Progress, TimedBatches, train_loop
from dlperf.models.transfer import set_train_mode
from dlperf.progress import Reporter
from dlperf.system import gpu_utilization
from dlperf.timing import now

__all__ = [
    "Diverged",
    "EpochClock",
    "EvaluationDiverged",
    "MetricSink",
    "Progress",
    "Row",
    "Rows",
    "TrainingDiverged",
    "fit",
]


def fit(
    step: TrainStep,
    *,
    model: nn.Module,
    batches: Callable[[int], Loader | list[tuple[Any, Any]]],
    state: Progress,
    clock: EpochClock,
    sink: MetricSink,
    reporter: Reporter,
    run: RunConfig,
    trainer: str,
    epochs: int,
    hooks: Hooks | None = None,
    max_steps: int | None = None,
    collate: Callable[[Any, Any], tuple[Any, Any]] | None = None,
    evaluate: Callable[[], dict[str, float]] | None = None,
    target: float | None = None,
    window: ProfileWindow | None = None,
    before_step: Callable[[], None] | None = None,
    after_epoch: Callable[[], None] | None = None,
    metrics: MetricBuffer | None = None,
) -> Progress:
    """Train with `step` on `batches(epoch)`, each made ready by `collate` (default: tensors
    to the device in the step's memory format), for the epochs after `state.epoch` up to
    `epochs`, or `max_steps` steps in all; `evaluate` (validation metrics, with the training
    accuracy: a classifier's) and `after_epoch` (a checkpoint) run as each epoch ends.
    `metrics`: the losses' buffer (`buffer`), where the caller judges an evaluation of its own
    after training by them (`judged`)."""
    metrics = metrics or buffer(step, sink, run)
    hooks = hooks or Hooks.from_env()
    tally = EpochTally(clock.device) if evaluate else None
    report = EpochReport(
        state, clock, sink, reporter, run, tally, metrics, model, epochs, evaluate, target,
        after_epoch, step.check_not_grown,
    )  # fmt: skip
    if window:
        window.on_written = lambda path: sink.add_artifact("trace", path)
    # The window closes a step's profiler range before the clock's bookkeeping, so that
    # the last profiled step holds no start of timing and the trace's teardown is not timed.
    components: list[Component | None] = [
        tally,
        window,
        clock,
        metrics,
        hooks,
        Bar(reporter, trainer, epochs, model, metrics),
        report,
    ]
    ready = collate or to_device(clock.device, step.memory_format)
    epoch_batches = (
        (epoch, TimedBatches(batches(epoch), ready, clock.timer.mark))
        for epoch in range(state.epoch + 1, epochs + 1)
    )
    hooks.start(trainer, model)
    steps = None if max_steps is None else max_steps - state.step
    train_loop(
        step if before_step is None else after(before_step, step),
        epoch_batches,
        [c for c in components if c is not None],
        state,
        trainer=trainer,
        model=model,
        steps=steps,
    )
    return state


def buffer(step: TrainStep, sink: MetricSink, run: RunConfig) -> MetricBuffer:
    """The buffer of `step`'s losses, advising by its grad_clip, `run`'s precision and the
    learning rate its optimizer was configured with."""
    lr = step.optimizer.defaults.get("lr")
    return MetricBuffer(sink, run.log_every, step.grad_clip, run.precision, lr)


def judged(
    evaluate: Callable[[], dict[str, float]], metrics: MetricBuffer, model: nn.Module, step: int
) -> dict[str, float]:
    """`evaluate`'s metrics; a loss it found not finite after training diverged raised as
    training's divergence (MetricBuffer.diverged), not as the model's eval mode."""
    try:
        return evaluate()
    except EvaluationDiverged as e:
        diverged = metrics.diverged(e, model, step)
        if diverged is None:
            raise
        raise diverged from e


def to_device(
    device: torch.device, memory_format: torch.memory_format
) -> Callable[[Any, Any], Batch]:
    """fit's default collate: tensors to the device, inputs in the step's memory format."""
    return lambda x, y: (
        x.to(device, non_blocking=True, memory_format=memory_format),
        y.to(device, non_blocking=True),
    )


def after(first: Callable[[], None], step: TrainStep) -> Callable[[Any, Any], Stepped]:
    """`step`, once `first` has run (async SGD reads the stale weights of the update)."""

    def stepped(x: Any, y: Any) -> Stepped:
        first()
        return step(x, y)

    return stepped


class Diverged(Exception):
    """A training loss that was not finite, at `step` of `epoch` at learning rate `lr`; its
    line advises what the run's `grad_clip` and `precision` leave to try (None: not known)."""

    def __init__(
        self,
        step: int,
        epoch: int,
        value: float,
        lr: float,
        *,
        grad_clip: float | None = None,
        precision: str | None = None,
    ) -> None:
        fix = diverged_fix(step, lr, grad_clip, precision)
        super().__init__(f"loss became {value} at step {step} (epoch {epoch}); {fix}")


class EvaluationDiverged(Diverged):
    """Evaluation's loss was not finite: scores the model returns only in eval mode (its
    batch norm's running statistics, say), since training's loss was checked. A Diverged, so
    that every trainer fails the run with its line as it does for a training loss."""

    def __init__(self, value: float, precision: str | None = None) -> None:
        self.value = value
        Exception.__init__(  # not Diverged's: no step or learning rate made this loss
            self,
            f"evaluation loss became {value}: the model's scores in eval mode were not finite; "
            + evaluation_fix(precision),
        )


class TrainingDiverged(Diverged):
    """Evaluation's loss was not finite after training had diverged (`why`: its loss rose past
    divergence.BLOW_UP times the larger of its first and 1 and stayed there, or a weight or
    buffer was no longer finite), though each training loss was finite: advised as a training
    loss that was not finite is."""

    def __init__(
        self,
        why: str,
        value: float,
        lr: float | None,
        *,
        grad_clip: float | None = None,
        precision: str | None = None,
    ) -> None:
        # No step's loss to name: the advice is for updates, which evaluation follows.
        fix = diverged_fix(None, lr, grad_clip, precision)
        Exception.__init__(
            self, f"training diverged: {why}, and the evaluation loss became {value}; {fix}"
        )


Row = tuple[str, int, float] | tuple[str, int, float, float]  # key, step, value[, wall time]


class MetricSink(Protocol):
    """Where a run's metrics and artifacts go: its store, a file, memory in a test."""

    def log_metrics(self, rows: list[Row]) -> None: ...

    def add_artifact(self, kind: str, path: Path) -> None: ...


class Rows(list[Row]):
    """A sink that keeps the rows in memory and drops the artifacts."""

    def log_metrics(self, rows: list[Row]) -> None:
        self.extend(rows)

    def add_artifact(self, kind: str, path: Path) -> None:
        pass


class MetricBuffer(Component):
    """Collects per-step losses as device tensors and writes them in batches, so the host
    waits for the device once per flush rather than once per step. Each step keeps its own
    wall time: the batch's write time would stack `every` points on one instant. A loss that
    is not finite raises Diverged, advising by the run's `grad_clip` and `precision`, and
    naming `lr`, the train.lr the user set (None: the step's scheduled rate): the scheduled
    rate read as "train.lr (now 9.6194)" for a run set to 10."""

    def __init__(
        self,
        sink: MetricSink,
        every: int,
        grad_clip: float | None = None,
        precision: str | None = None,
        lr: float | None = None,
    ) -> None:
        self.sink, self.every = sink, every
        self.grad_clip, self.precision, self.lr = grad_clip, precision, lr
        self.losses: list[tuple[int, torch.Tensor, float, float]] = []
        self.rows: list[Row] = []
        # This process's first training loss, its largest so far and its last, (step, value):
        # what tells a training that diverged from a model whose eval mode alone is not finite.
        self.first: tuple[int, float] | None = None
        self.peak: tuple[int, float] | None = None
        self.last: tuple[int, float] | None = None
        self.epoch = 0

    def on_epoch_start(self, epoch: int, batches: Iterable[Batch]) -> None:
        self.epoch = epoch

    def on_step_end(self, done: StepEnd) -> None:
        self.log(done.step, done.stepped, self.epoch)

    def on_epoch_end(self, epoch: int) -> None:
        self.flush(epoch)

    def log(self, step: int, stepped: Stepped, epoch: int) -> None:
        """Keep the step's loss, learning rate and time; flush every `every` steps."""
        self.losses.append((step, stepped.loss, stepped.lr, time.time()))
        if step % self.every == 0:
            self.flush(epoch)

    def flush(self, epoch: int) -> None:
        """Write what is kept; raise Diverged at the first loss that is not finite."""
        if self.losses:
            values = torch.stack([loss for _, loss, _, _ in self.losses]).float().tolist()
            pending = list(zip(self.losses, values, strict=True))
            self.losses.clear()
            for (step, _, lr, wall), value in pending:
                self.rows += [("train/loss", step, value, wall), ("train/lr", step, lr, wall)]
                if not math.isfinite(value):
                    self.sink.log_metrics(self.rows)
                    self.rows.clear()
                    said = lr if self.lr is None else self.lr
                    raise Diverged(
                        step, epoch, value, said, grad_clip=self.grad_clip, precision=self.precision
                    )
                self.first = self.first or (step, value)
                if self.peak is None or value > self.peak[1]:
                    self.peak = (step, value)
                self.last = (step, value)
        self.sink.log_metrics(self.rows)
        self.rows.clear()

    @property
    def last_loss(self) -> float:
        """The last training loss flushed; nan before the first flush."""
        return self.last[1] if self.last else math.nan

    def diverged(
        self, evaluation: EvaluationDiverged, model: nn.Module, step: int
    ) -> TrainingDiverged | None:
        """Training's divergence, where the evaluation that raised `evaluation` after `step`
        followed it: the training loss blew up and stayed so (divergence.blown_up), or the
        weights `model` trained or its buffers (batch norm's running statistics) are no longer
        finite (read only here, once the evaluation failed). None: the model's scores in eval
        mode are to blame."""
        rose = blown_up(self.first, self.peak, self.last) if self.first and self.peak else None
        if rose is not None:
            why = f"its loss rose {rose}"
        elif not all(_finite(p) for p in model.parameters()):
            why = f"its weights were no longer finite after step {step}"
        else:
            bad = next((name for name, b in model.named_buffers() if not _finite(b)), None)
            if bad is None:
                return None
            why = f"its buffer {bad} was no longer finite after step {step}"
        return TrainingDiverged(
            why, evaluation.value, self.lr, grad_clip=self.grad_clip, precision=self.precision
        )


def _finite(tensor: torch.Tensor) -> bool:
    """Whether every value of `tensor` is finite (an integer one, a step count, always is)."""
    return bool(torch.isfinite(tensor).all())


class EpochClock(Component):
    """Wall time of an epoch, and its training time and samples after the first
    `warmup_steps` steps of this process (they compile and fill caches: a resumed run warms
    up again). The device is synchronised before each clock read; the phase timer records
    from the first step after the warm-up on. Over the same timed stretches it measures how
    long the process's threads waited for a CPU (`contention`; `waited`: the last epoch's),
    and over each whole epoch, evaluation included, how long the process was stopped
    (`stopwatch`: SIGSTOP or Ctrl-Z, counted where dlperf.contention.watching_stops is in
    force); `result()` is the two together."""

    def __init__(self, device: torch.device, warmup_steps: int, timer: PhaseTimer) -> None:
        self.device, self.warmup_steps, self.timer = device, warmup_steps, timer
        self.steps = self.samples = 0
        self.epoch_start = self.timed_start = self.cpu_start = 0.0
        self.contention = contention.Window()
        self.waited: contention.Contention | None = None
        self.stopwatch = contention.Stopwatch()
        self.phases: dict[str, float] = {}  # the last epoch's seconds per step by phase
        timer.recording = warmup_steps == 0

    def start(self) -> None:
        self.epoch_start = self.timed_start = now(self.device)
        self.cpu_start = time.process_time()
        self.samples = 0
        self.stopwatch.start()
        self.timer.start()
        if self.steps >= self.warmup_steps:
            self.contention.start()

    def on_epoch_start(self, epoch: int, batches: Iterable[Batch]) -> None:
        self.start()

    def on_step_end(self, done: StepEnd) -> None:
        self.timer.end_step()
        self.count(len(done.x))

    def count(self, samples: int) -> None:
        """After each step, with the step's samples."""
        contention.beat()  # the process ran until now: a later stop's gap starts here
        self.steps += 1
        if self.steps == self.warmup_steps:
            self.timed_start, self.cpu_start = now(self.device), time.process_time()
            # The first timed step's phases start here too, as an epoch's first step's do:
            # not at the warm-up's last mark, before the components' work (a trace written).
            self.timer.start()
            self.timer.recording = True
            self.contention.start()
        elif self.steps > self.warmup_steps:
            self.samples += samples

    def stop(self, state: Progress) -> tuple[float, float | None]:
        """Add the epoch's timed samples and seconds, and its timed phases (`phases`: the
        epoch's own seconds per step), to `state`; the epoch's seconds so far and its
        throughput (None when all its steps were warm-up)."""
        end = now(self.device)
        self.waited = self.contention.stop()
        totals, step_times = self.timer.epoch_phases()
        self.phases = timers.per_step(totals, len(step_times))
        if step_times:
            state.add_phases(totals, step_times)
        if not self.samples:
            return end - self.epoch_start, None
        state.train_time_s += end - self.timed_start
        state.cpu_time_s += time.process_time() - self.cpu_start
        state.samples += self.samples
        state.epoch_throughputs.append(self.samples / (end - self.timed_start))
        return end - self.epoch_start, state.epoch_throughputs[-1]

    def elapsed(self) -> float:
        return time.perf_counter() - self.epoch_start

    def end(self, epoch: int) -> float:
        """The epoch's seconds, evaluation included, as it ends: its stop watch stops."""
        self.stopwatch.stop(f"epoch {epoch}")
        return self.elapsed()

    def result(self) -> contention.Contention | None:
        """The timed stretches' contention, with the epochs' stops (None: no stretch timed)."""
        waited = self.contention.result()
        stops, seconds, where = self.stopwatch.result()
        if waited is None or not stops:
            return waited
        return replace(waited, stops=stops, stopped_s=seconds, stopped_in=where)


class EpochTally(Component):
    """An epoch's training loss and accuracy, summed on the device without waiting for it."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.on_epoch_start(0, ())

    def on_epoch_start(self, epoch: int, batches: Iterable[Batch]) -> None:
        self.loss_sum = torch.zeros((), device=self.device)
        self.correct = torch.zeros((), device=self.device, dtype=torch.long)
        self.seen = 0
        self.lr = math.nan

    def on_step_end(self, done: StepEnd) -> None:
        self.add(done.stepped, done.y)

    def add(self, stepped: Stepped, y: torch.Tensor) -> None:
        self.loss_sum += stepped.loss * len(y)
        self.correct += (stepped.output.argmax(1) == y).sum()
        self.seen += len(y)
        self.lr = stepped.lr

    def rows(self, epoch: int) -> list[Row]:
        return [
            ("epoch/train_loss", epoch, self.loss_sum.item() / self.seen),
            ("epoch/train_acc1", epoch, self.correct.item() / self.seen),
            ("epoch/lr", epoch, self.lr),
        ]


class Bar(Component):
    """The progress bar of each epoch, and the model in training mode as it starts."""

    def __init__(
        self, reporter: Reporter, trainer: str, epochs: int, model: nn.Module, metrics: MetricBuffer
    ) -> None:
        self.reporter, self.trainer, self.epochs = reporter, trainer, epochs
        self.model, self.metrics = model, metrics

    def on_epoch_start(self, epoch: int, batches: Iterable[Batch]) -> None:
        total = len(batches) if isinstance(batches, Sized) else None
        self.reporter.task(f"{self.trainer} epoch {epoch}/{self.epochs}", total=total)
        set_train_mode(self.model)  # a frozen backbone stays in eval mode

    def on_step_end(self, done: StepEnd) -> None:
        loss = self.metrics.last_loss  # nan until the first flush: show nothing, not nan
        self.reporter.advance(1, status=f"loss {loss:.4f}" if math.isfinite(loss) else "")


@dataclass
class EpochReport(Component):
    """As each epoch ends: its clock stopped, the device's utilization read, `evaluate` run,
    the epoch's rows written, `after` (its checkpoint) run and its line said. The last three
    are shielded from a stop signal, which takes effect once the line is said: an epoch whose
    rows are stored has its checkpoint, and one whose line was said is never lost. A signal
    that lands while the line itself is written cuts it (`stopping.stoppable`)."""

    state: Progress
    clock: EpochClock
    sink: MetricSink
    reporter: Reporter
    run: RunConfig
    tally: EpochTally | None
    metrics: MetricBuffer
    model: nn.Module
    epochs: int
    evaluate: Callable[[], dict[str, float]] | None
    target: float | None
    after: Callable[[], None] | None = None
    # Raises where the model's forward grew it since the optimizer was built (its training's
    # or its evaluation's), before the epoch's rows and checkpoint: TrainStep.check_not_grown
    check_not_grown: Callable[[], None] | None = None

    def on_epoch_end(self, epoch: int) -> None:
        clock, state, tally = self.clock, self.state, self.tally
        seconds, throughput = clock.stop(state)
        # Read before evaluating: NVML's last sample period is then the epoch's training.
        utilization = gpu_utilization(clock.device)
        val = self.evaluated()
        if self.check_not_grown is not None:
            self.check_not_grown()
        state.end_epoch(epoch, clock.end(epoch), val.get("acc1", math.nan), self.target)
        rows = tally.rows(epoch) if tally else []
        rows += [(f"val/{k}", epoch, v) for k, v in val.items()]
        if utilization is not None:
            state.gpu_utilization_pct.append(utilization)
            rows.append(("gpu/utilization_pct", epoch, utilization))
        if self.run.timing != "off":
            rows.append(("epoch/time_s", epoch, seconds))
            if throughput is not None:
                rows.append(("epoch/throughput", epoch, throughput))
            if clock.waited is not None:
                rows.append(("epoch/cpu_wait_share", epoch, clock.waited.cpu_wait_share))
        phases = clock.phases.items()  # the epoch's own steps' means, not the run's so far
        # the epoch's mean where tallied
        train_loss = rows[0][2] if tally else self.metrics.last_loss
        line = f"epoch {epoch}/{self.epochs}  train loss {train_loss:.4f}"
        if val:
            loss, acc = val.get("loss", math.nan), val.get("acc1", math.nan)
            line += f"  val loss {loss:.4f}  val acc {acc:.4f}"
        with stopping.shielded():  # a stop signal here is raised once the line is said
            self.sink.log_metrics(rows + [(f"phase/{p}_s", epoch, s) for p, s in phases])
            if self.after is not None:
                self.after()
            # Output, not a store write: a stop while it waits on a stderr nobody reads (a
            # full pipe) cuts it, and the run is marked killed; held, only SIGKILL ended it.
            with stopping.stoppable():
                self.reporter.log(line)

    def evaluated(self) -> dict[str, float]:
        """`evaluate`'s metrics (`judged`)."""
        if self.evaluate is None:
            return {}
        return judged(self.evaluate, self.metrics, self.model, self.state.step)
