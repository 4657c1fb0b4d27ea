"""A classifier's run: its loaders, step, profile window and checkpoints around the one
training loop (dlperf.engine.loop.fit), its evaluation, and the run's summary. Metrics go to
a `MetricSink` the caller hands in (the run's store, through dlperf.experiment.sink).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import torch
from torch import nn

from dlperf import contention
from dlperf.config import Experiment, RunConfig
from dlperf.data import ImageData, Loader, make_loader
from dlperf.engine import checkpoint
from dlperf.engine.checks import Kept, check_batch_fits
from dlperf.engine.hooks import Hooks
from dlperf.engine.loop import (
    EpochClock,
    EvaluationDiverged,
    MetricSink,
    Progress,
    buffer,
    fit,
    judged,
)
from dlperf.engine.profiler import ProfileWindow, trace_name
from dlperf.engine.step import check_output, prepare, steps_per_epoch
from dlperf.engine.timers import PhaseTimer, per_step
from dlperf.precision import autocast as precision_autocast
from dlperf.progress import NullReporter, Reporter
from dlperf.records import RunSummary
from dlperf.system import gpu_memory, peak_memory_bytes, reset_peak_memory
from dlperf.timing import Spread


@torch.no_grad()
def evaluate(
    model: nn.Module, loader: Loader, device: torch.device, run: RunConfig, classes: int
) -> dict[str, float]:
    """Loss and top-1 (and top-5, past 5 classes) accuracy of `model` in eval mode over
    `loader`. Each output is held to training's rule (check_output: one row of `classes` float
    scores per image), and a loss that is not finite raises EvaluationDiverged: a model may
    behave so only in eval mode, and its accuracy would be read off NaN scores."""
    model.eval()
    loss_sum = torch.zeros((), device=device)
    top1 = torch.zeros((), device=device, dtype=torch.long)
    top5 = torch.zeros((), device=device, dtype=torch.long)
    n = 0
    autocast = precision_autocast(device, run.precision)
    memory_format = torch.channels_last if run.channels_last else torch.preserve_format
    k = min(5, classes)
    kept = Kept.now()  # what a forward changes in the process put back: training's, the caller's
    for x, y in loader:
        x = x.to(device, non_blocking=True, memory_format=memory_format)
        y = y.to(device, non_blocking=True)
        with autocast:
            out = model(x)
        kept.put_back(model)
        check_output(model, out, y, classes, " in evaluation")  # shapes only: no sync
        loss_sum += nn.functional.cross_entropy(out.float(), y, reduction="sum")
        best = out.topk(k, dim=1).indices
        top1 += (best[:, 0] == y).sum()
        top5 += (best == y[:, None]).any(dim=1).sum()
        n += len(y)
    if n == 0:
        return {}
    loss = loss_sum.item() / n  # the one read of the loss, checked here rather than per batch
    if not math.isfinite(loss):
        raise EvaluationDiverged(loss, run.precision)
    result = {"loss": loss, "acc1": top1.item() / n}
    if classes > 5:
        result["acc5"] = top5.item() / n
    return result


# A checkpoint from before Progress carried the timed phases: the summary's phases and
# step_time_spread can only cover the steps this process times.
OLD_CHECKPOINT = (
    "this run's checkpoint predates its phase timings: the summary's phases and "
    "step_time_spread cover only the steps since this resume (throughput and train_time_s "
    "the whole run)"
)


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
    warnings: Sequence[str] = (),
) -> RunSummary:
    """Train `model` for the epochs of `exp` left after the checkpoint `resume` (all, without
    one), sending metrics to `sink` and saving a checkpoint as each epoch ends; the run's
    summary (without device, threads, data and transfer, which its caller knows).
    `warnings` are said once the run is checked, just before it trains."""
    reporter = reporter or NullReporter()
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
    step = prepare(model, cfg, run, device, per_epoch, timer=timer, classes=data.num_classes)
    reset_peak_memory(device)
    state = Progress()
    if resume is not None:  # weights, optimizer, schedule, scaler, RNG and progress
        run_id = checkpoint_slot.owner.run_id
        # A factory's own change, not the file's, is told so (the slot knows which).
        same, classes = checkpoint_slot.same_file, data.num_classes
        checkpoint.fit_weights(model, resume["model"], run_id, exp.model.name, classes, same)
        checkpoint.restore_buffers(model, resume.get(checkpoint.BUFFERS))
        step.load_state_dict(resume)
        checkpoint.set_rng_state(resume["rng"], device)
        state = Progress(**resume["progress"])
        if timer.enabled and "step_times" not in resume["progress"] and state.samples:
            warnings = [*warnings, OLD_CHECKPOINT]
    for warning in warnings:  # checked: what is left to say comes before training
        reporter.log(f"warning: {warning}")
    clock = EpochClock(device, run.warmup_steps + run.profile.steps, timer)
    metrics = buffer(step, sink, run)  # its losses judge the test set's evaluation too

    def save() -> None:
        if run.checkpoint:
            rng = checkpoint.rng_state(device)
            weights = checkpoint.model_state(model) | step.state_dict()
            # the class names, in their order: a resume on renamed ones is refused by them
            named = {"classes": list(data.classes)}
            checkpoint.save(
                checkpoint_slot, weights | {"rng": rng, "progress": asdict(state)} | named
            )

    with window, contention.watching_stops():
        fit(
            step,
            model=model,
            batches=train_loader.set_epoch,
            state=state,
            clock=clock,
            sink=sink,
            reporter=reporter,
            run=run,
            trainer="run",
            epochs=cfg.epochs,
            hooks=hooks,
            target=exp.target.accuracy,
            window=window,
            evaluate=lambda: evaluate(model, val_loader, device, run, data.num_classes),
            after_epoch=save,
            metrics=metrics,
        )
    test_loader = make_loader(data, data.test, exp.data, cfg.batch_size, device)
    # Told as each epoch's evaluation is: without a validation split, this one is the first
    # to read the weights a training that diverged left.
    test = judged(
        lambda: evaluate(model, test_loader, device, run, data.num_classes),
        metrics,
        model,
        state.step,
    )
    step.check_not_grown()  # its accuracy would be of a layer the test's forward made
    waited = clock.result()
    return RunSummary(
        test_accuracy=test.get("acc1"),
        test_top5=test.get("acc5"),
        test_loss=test.get("loss"),
        best_val_accuracy=state.best_val_accuracy,
        epochs=state.epoch,
        steps=state.step,
        steps_per_epoch=per_epoch,
        samples_per_step=exp.train.batch_size * exp.augment.batch_aug_m,
        epochs_to_target=state.epochs_to_target,
        time_to_target_s=state.time_to_target_s,
        throughput=state.samples / state.train_time_s if state.train_time_s else None,
        timed_samples=state.samples,
        throughput_spread=spread(state.epoch_throughputs),
        train_time_s=state.train_time_s,
        cpu_time_s=state.cpu_time_s,
        cpu_wait_share=waited.cpu_wait_share if waited else None,
        contention=waited.to_dict() if waited else None,
        **contention.judge(waited, state.epoch_throughputs).to_dict(),
        elapsed_s=state.elapsed_s,
        phases=per_step(state.phase_totals, len(state.step_times)) or None,
        phase_clock=timer.clock,
        step_time_spread=spread(state.step_times),
        peak_memory_bytes=peak_memory_bytes(device),
        gpu_memory=gpu_memory(device),
        gpu_utilization_pct=spread(state.gpu_utilization_pct),
    )


def spread(values: list[float]) -> dict[str, float] | None:
    """min/median/max of `values` (seconds of a step, say); None without any."""
    return Spread.of(values).min_median_max() if values else None
