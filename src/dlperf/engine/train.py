"""The training loop around the engine's step (dlperf.engine.step): plain code, read top to
bottom, its bookkeeping (clocks, tallies, metrics, checkpoints) in small pieces beside it.

Metric keys written to the store (step = global step for `train/`, epoch number 1..E for
the others): train/loss, train/lr; epoch/train_loss, epoch/train_acc1, epoch/time_s,
epoch/throughput, epoch/lr; val/loss, val/acc1, val/acc5; phase/<phase>_s;
gpu/utilization_pct (CUDA with the `gpu` extra: NVML's reading as the epoch's training ends).
They go to a `MetricSink` the caller hands in (the run's store, through dlperf.engine.run),
and the hooks of dlperf.engine.hooks see every step once its losses are flushed as due.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from dlperf.config import Experiment, RunConfig
from dlperf.data import ImageData, Loader, make_loader
from dlperf.engine import checkpoint
from dlperf.engine.checks import check_batch_fits
from dlperf.engine.hooks import Hooks, StepEnd
from dlperf.engine.precision import autocast as precision_autocast
from dlperf.engine.profiler import ProfileWindow, check_fits, trace_name
from dlperf.engine.step import Stepped, TrainStep, prepare, steps_per_epoch
from dlperf.engine.timers import PhaseTimer
from dlperf.models.transfer import set_train_mode
from dlperf.progress import NullReporter, Reporter
from dlperf.records import RunSummary
from dlperf.system import (
    gpu_memory,
    gpu_utilization,
    peak_memory_bytes,
    reset_peak_memory,
)
from dlperf.timing import Spread, now


class Diverged(Exception):
    def __init__(self, step: int, epoch: int, value: float, lr: float) -> None:
        super().__init__(
            f"loss became {value} at step {step} (epoch {epoch}); try a lower train.lr "
            f'(now {lr:g}), train.grad_clip = 1.0, or run.precision = "fp32"'
        )


@dataclass
class Progress:
    """What a checkpoint must carry besides weights and optimizer: where and how far along."""

    epoch: int = 0
    step: int = 0
    elapsed_s: float = 0.0
    train_time_s: float = 0.0
    cpu_time_s: float = 0.0  # this process's, over the same timed windows as train_time_s
    samples: int = 0
    best_val_accuracy: float = 0.0
    epochs_to_target: int | None = None
    time_to_target_s: float | None = None
    epoch_throughputs: list[float] = field(default_factory=list)
    gpu_utilization_pct: list[float] = field(default_factory=list)  # one reading per epoch

    def end_epoch(self, epoch: int, seconds: float, accuracy: float, target: float | None) -> None:
        """Count epoch `epoch`, `seconds` long with its evaluation, of validation `accuracy`,
        noting when the accuracy first reached `target`."""
        self.epoch = epoch
        self.elapsed_s += seconds
        self.best_val_accuracy = max(self.best_val_accuracy, accuracy)
        if target is not None and self.epochs_to_target is None and accuracy >= target:
            self.epochs_to_target, self.time_to_target_s = epoch, self.elapsed_s


Row = tuple[str, int, float] | tuple[str, int, float, float]  # key, step, value[, wall time]


class MetricSink(Protocol):
    """Where a run's metrics and artifacts go: its store, a file, memory in a test."""

    def log_metrics(self, rows: list[Row]) -> None: ...

    def add_artifact(self, kind: str, path: Path) -> None: ...


class MetricBuffer:
    """Collects per-step losses as device tensors and writes them in batches, so the host
    waits for the device once per flush rather than once per step. Each step keeps its own
    wall time: the batch's write time would stack `every` points on one instant."""

    def __init__(self, sink: MetricSink, every: int) -> None:
        self.sink, self.every = sink, every
        self.losses: list[tuple[int, torch.Tensor, float, float]] = []
        self.rows: list[Row] = []
        self.last_loss = math.nan

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
                    raise Diverged(step, epoch, value, lr)
            self.last_loss = values[-1]
        self.sink.log_metrics(self.rows)
        self.rows.clear()


class EpochClock:
    """Wall time of an epoch, and its training time and samples after the first
    `warmup_steps` steps of this process (they compile and fill caches: a resumed run warms
    up again). The device is synchronised before each clock read; the phase timer records
    from the first step after the warm-up on."""

    def __init__(self, device: torch.device, warmup_steps: int, timer: PhaseTimer) -> None:
        self.device, self.warmup_steps, self.timer = device, warmup_steps, timer
        self.steps = self.samples = 0
        self.epoch_start = self.timed_start = self.cpu_start = 0.0
        timer.recording = warmup_steps == 0

    def start(self) -> None:
        self.epoch_start = self.timed_start = now(self.device)
        self.cpu_start = time.process_time()
        self.samples = 0
        self.timer.start()

    def count(self, samples: int) -> None:
        """After each step, with the step's samples."""
        self.steps += 1
        if self.steps == self.warmup_steps:
            self.timed_start, self.cpu_start = now(self.device), time.process_time()
            self.timer.recording = True
        elif self.steps > self.warmup_steps:
            self.samples += samples

    def stop(self, state: Progress) -> tuple[float, float | None]:
        """Add the epoch's timed samples and seconds to `state`; the epoch's seconds so far
        and its throughput (None when all its steps were warm-up)."""
        end = now(self.device)
        if not self.samples:
            return end - self.epoch_start, None
        state.train_time_s += end - self.timed_start
        state.cpu_time_s += time.process_time() - self.cpu_start
        state.samples += self.samples
        state.epoch_throughputs.append(self.samples / (end - self.timed_start))
        return end - self.epoch_start, state.epoch_throughputs[-1]

    def elapsed(self) -> float:
        return time.perf_counter() - self.epoch_start


class EpochTally:
    """An epoch's training loss and accuracy, summed on the device without waiting for it."""

    def __init__(self, device: torch.device) -> None:
        self.loss_sum = torch.zeros((), device=device)
        self.correct = torch.zeros((), device=device, dtype=torch.long)
        self.seen = 0
        self.lr = math.nan

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


def timing_rows(
    epoch: int, timing: str, seconds: float, throughput: float | None, timer: PhaseTimer
) -> list[Row]:
    rows: list[Row] = []
    if timing != "off":
        rows.append(("epoch/time_s", epoch, seconds))
        if throughput is not None:
            rows.append(("epoch/throughput", epoch, throughput))
    return rows + [(f"phase/{p}_s", epoch, s) for p, s in timer.per_step().items()]


def restore(
    resume: dict[str, Any], model: nn.Module, step: TrainStep, device: torch.device
) -> Progress:
    """Load a checkpoint's weights, optimizer, schedule, scaler and RNG; its progress."""
    model.load_state_dict(resume["model"])
    step.load_state_dict(resume)
    checkpoint.set_rng_state(resume["rng"], device)
    return Progress(**resume["progress"])


def save_checkpoint(
    slot: checkpoint.Slot, model: nn.Module, step: TrainStep, state: Progress, device: torch.device
) -> None:
    rng = checkpoint.rng_state(device)
    state_dict = {"model": model.state_dict(), **step.state_dict()}
    checkpoint.save(slot, state_dict | {"rng": rng, "progress": asdict(state)})


@torch.no_grad()
def evaluate(
    model: nn.Module, loader: Loader, device: torch.device, run: RunConfig
) -> dict[str, float]:
    model.eval()
    loss_sum = torch.zeros((), device=device)
    top1 = torch.zeros((), device=device, dtype=torch.long)
    top5 = torch.zeros((), device=device, dtype=torch.long)
    n = 0
    autocast = precision_autocast(device, run.precision)
    memory_format = torch.channels_last if run.channels_last else torch.preserve_format
    classes = 0
    for x, y in loader:
        x = x.to(device, non_blocking=True, memory_format=memory_format)
        y = y.to(device, non_blocking=True)
        with autocast:
            out = model(x)
        loss_sum += nn.functional.cross_entropy(out.float(), y, reduction="sum")
        classes = out.shape[1]
        k = min(5, classes)
        best = out.topk(k, dim=1).indices
        top1 += (best[:, 0] == y).sum()
        top5 += (best == y[:, None]).any(dim=1).sum()
        n += len(y)
    if n == 0:
        return {}
    result = {"loss": loss_sum.item() / n, "acc1": top1.item() / n}
    if classes > 5:
        result["acc5"] = top5.item() / n
    return result


def train(
    exp: Experiment,
    model: nn.Module,
    data: ImageData,
    device: torch.device,
    sink: MetricSink,
    checkpoint_slot: checkpoint.Slot,
    resume: dict[str, Any] | None = None,
    reporter: Reporter | None = None,
    hooks: Hooks | None = None,
) -> RunSummary:
    """Train `model` for the epochs of `exp` left after the checkpoint `resume` (all, without
    one), sending metrics to `sink` and saving a checkpoint as each epoch ends; the run's
    summary (without device, threads, data and transfer, which its caller knows)."""
    reporter = reporter or NullReporter()
    hooks = hooks or Hooks.from_env()
    cfg, run = exp.train, exp.run
    check_batch_fits(cfg.batch_size, data)
    train_loader = make_loader(
        data, data.train, exp.data, cfg.batch_size, device, exp.augment, run.seed
    )
    val_loader = make_loader(data, data.val, exp.data, cfg.batch_size, device)
    # The profiled window follows the warm-up, and the clock counts it as warm-up too.
    trace = checkpoint_slot.path.parent / "trace" / trace_name("rank0")
    window = ProfileWindow(run.profile, device, run.warmup_steps, trace)
    timer = PhaseTimer(device, enabled=run.timing == "phases", labels=window.labels)
    per_epoch = steps_per_epoch(len(data.train), cfg.batch_size)
    step = prepare(model, cfg, run, device, per_epoch, timer=timer)
    reset_peak_memory(device)
    state = restore(resume, model, step, device) if resume is not None else Progress()
    check_fits(run, (cfg.epochs - state.epoch) * per_epoch)
    clock = EpochClock(device, run.warmup_steps + run.profile.steps, timer)
    metrics = MetricBuffer(sink, run.log_every)
    hooks.start("run", model)
    with window:
        for epoch in range(state.epoch + 1, cfg.epochs + 1):
            reporter.task(f"epoch {epoch}/{cfg.epochs}", total=per_epoch)
            set_train_mode(model)  # a frozen backbone stays in eval mode
            train_loader.set_epoch(epoch)
            tally = EpochTally(device)
            clock.start()
            window.resume_labels()
            for x, y in train_loader:
                timer.mark("data")
                x = x.to(device, non_blocking=True, memory_format=step.memory_format)
                y = y.to(device, non_blocking=True)
                timer.mark("h2d")
                stepped = step(x, y)
                state.step += 1
                tally.add(stepped, y)
                timer.end_step()
                clock.count(len(y))
                if window.after_step():
                    sink.add_artifact("trace", window.path)
                metrics.log(state.step, stepped, epoch)
                hooks.step_end(StepEnd("run", state.step, x, y, stepped, model))
                loss = metrics.last_loss  # nan until the first flush: show nothing, not nan
                reporter.advance(1, status=f"loss {loss:.4f}" if math.isfinite(loss) else "")
            window.pause_labels()
            metrics.flush(epoch)

            seconds, throughput = clock.stop(state)
            # Read before evaluating: NVML's last sample period is then the epoch's training.
            utilization = gpu_utilization(device)
            if utilization is not None:
                state.gpu_utilization_pct.append(utilization)
            val = evaluate(model, val_loader, device, run)
            state.end_epoch(epoch, clock.elapsed(), val.get("acc1", math.nan), exp.target.accuracy)
            rows = tally.rows(epoch) + [(f"val/{k}", epoch, v) for k, v in val.items()]
            if utilization is not None:
                rows.append(("gpu/utilization_pct", epoch, utilization))
            sink.log_metrics(rows + timing_rows(epoch, run.timing, seconds, throughput, timer))
            reporter.log(
                f"epoch {epoch}/{cfg.epochs}  train loss {rows[0][2]:.4f}  "
                f"val loss {val.get('loss', math.nan):.4f}  val acc {val.get('acc1', math.nan):.4f}"
            )
            if run.checkpoint:
                save_checkpoint(checkpoint_slot, model, step, state, device)

    test_loader = make_loader(data, data.test, exp.data, cfg.batch_size, device)
    test = evaluate(model, test_loader, device, run)
    return summary(exp, state, test, per_epoch, timer, device)


def summary(
    exp: Experiment,
    state: Progress,
    test: dict[str, float],
    steps_per_epoch: int,
    timer: PhaseTimer,
    device: torch.device,
) -> RunSummary:
    return RunSummary(
        test_accuracy=test.get("acc1"),
        test_top5=test.get("acc5"),
        test_loss=test.get("loss"),
        best_val_accuracy=state.best_val_accuracy,
        epochs=state.epoch,
        steps=state.step,
        steps_per_epoch=steps_per_epoch,
        samples_per_step=exp.train.batch_size * exp.augment.batch_aug_m,
        epochs_to_target=state.epochs_to_target,
        time_to_target_s=state.time_to_target_s,
        throughput=state.samples / state.train_time_s if state.train_time_s else None,
        timed_samples=state.samples,
        throughput_spread=spread(state.epoch_throughputs),
        train_time_s=state.train_time_s,
        cpu_time_s=state.cpu_time_s,
        elapsed_s=state.elapsed_s,
        phases=timer.per_step() or None,
        phase_clock=timer.clock,
        step_time_spread=timer.spread() or None,
        peak_memory_bytes=peak_memory_bytes(device),
        gpu_memory=gpu_memory(device),
        gpu_utilization_pct=spread(state.gpu_utilization_pct),
    )


def spread(values: list[float]) -> dict[str, float] | None:
    return Spread.of(values).min_median_max() if values else None
