"""The training loop: plain code, read top to bottom.

Metric keys written to the store (step = global step for `train/`, epoch number 1..E for
the others): train/loss, train/lr; epoch/train_loss, epoch/train_acc1, epoch/time_s,
epoch/throughput, epoch/lr; val/loss, val/acc1, val/acc5; phase/<phase>_s.

Test hook (an environment variable, read only here, once per run before the loop):
- DLPERF_TEST_PAUSE_AT_STEP="N:PATH": when global step N is done (its losses flushed as
  usual, its epoch not yet evaluated or checkpointed), write the file PATH atomically and
  wait there until a signal ends the process, so that a test can interrupt a run at an
  exact step however busy the machine is.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dlperf.config import Experiment
from dlperf.data import ImageData, Loader, make_loader
from dlperf.engine import checkpoint
from dlperf.engine.checks import check_batch_fits
from dlperf.engine.optim import build_optimizer, build_scheduler
from dlperf.engine.precision import DTYPES
from dlperf.engine.timers import PhaseTimer
from dlperf.errors import UserError
from dlperf.progress import NullReporter, Reporter
from dlperf.store import Store
from dlperf.system import peak_memory_bytes, synchronize

PAUSE_ENV = "DLPERF_TEST_PAUSE_AT_STEP"


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
    samples: int = 0
    best_val_accuracy: float = 0.0
    epochs_to_target: int | None = None
    time_to_target_s: float | None = None
    epoch_throughputs: list[float] = field(default_factory=list)


class PauseAt:
    """The DLPERF_TEST_PAUSE_AT_STEP hook (see the module docstring); a no-op when unset."""

    def __init__(self) -> None:
        value = os.environ.get(PAUSE_ENV, "")
        step, _, marker = value.partition(":")
        if value and not (step.isdigit() and marker):
            raise UserError(f"{PAUSE_ENV} must be STEP:PATH, not {value!r}")
        self.step = int(step) if value else None
        self.marker = Path(marker)

    def maybe(self, step: int) -> None:
        if step != self.step:
            return
        tmp = self.marker.with_name(self.marker.name + ".tmp")
        tmp.write_text(f"{step}\n")
        os.replace(tmp, self.marker)  # the test sees the whole file or none
        while True:  # left only by a signal that ends the process (SIGINT, SIGTERM, SIGKILL)
            time.sleep(60)


class MetricBuffer:
    """Collects per-step losses as device tensors and writes them in batches, so the host
    waits for the device once per flush rather than once per step."""

    def __init__(self, store: Store, run_id: int) -> None:
        self.store, self.run_id = store, run_id
        self.losses: list[tuple[int, torch.Tensor, float]] = []
        self.rows: list[tuple[str, int, float]] = []
        self.last_loss = math.nan

    def flush(self, epoch: int) -> None:
        if self.losses:
            values = torch.stack([loss for _, loss, _ in self.losses]).float().tolist()
            pending = list(zip(self.losses, values, strict=True))
            self.losses.clear()
            for (step, _, lr), value in pending:
                self.rows += [("train/loss", step, value), ("train/lr", step, lr)]
                if not math.isfinite(value):
                    self.store.log_metrics(self.run_id, self.rows)
                    self.rows.clear()
                    raise Diverged(step, epoch, value, lr)
            self.last_loss = values[-1]
        self.store.log_metrics(self.run_id, self.rows)
        self.rows.clear()


@torch.no_grad()
def evaluate(
    model: nn.Module, loader: Loader, device: torch.device, exp: Experiment
) -> dict[str, float]:
    model.eval()
    loss_sum = torch.zeros((), device=device)
    top1 = torch.zeros((), device=device, dtype=torch.long)
    top5 = torch.zeros((), device=device, dtype=torch.long)
    n = 0
    autocast = torch.autocast(device.type, DTYPES[exp.run.precision], exp.run.precision != "fp32")
    memory_format = torch.channels_last if exp.run.channels_last else torch.preserve_format
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
    store: Store,
    run_id: int,
    checkpoint_slot: checkpoint.Slot,
    resume: dict[str, Any] | None = None,
    reporter: Reporter | None = None,
) -> dict[str, Any]:
    reporter = reporter or NullReporter()
    cfg, run = exp.train, exp.run
    check_batch_fits(cfg.batch_size, data)
    memory_format = torch.channels_last if run.channels_last else torch.preserve_format
    train_loader = make_loader(
        data, data.train, exp.data, cfg.batch_size, device, exp.augment, run.seed
    )
    val_loader = make_loader(data, data.val, exp.data, cfg.batch_size, device)
    steps_per_epoch = len(train_loader)

    model.to(device=device, memory_format=memory_format)
    optimizer = build_optimizer(model, cfg)
    scheduler = build_scheduler(optimizer, cfg, steps_per_epoch)
    scaler = torch.amp.GradScaler(device.type, enabled=run.precision == "fp16")
    autocast = torch.autocast(device.type, DTYPES[run.precision], run.precision != "fp32")
    criterion = nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
    forward = torch.compile(model) if run.compile else model

    state = Progress()
    if resume is not None:
        model.load_state_dict(resume["model"])
        optimizer.load_state_dict(resume["optimizer"])
        scheduler.load_state_dict(resume["scheduler"])
        scaler.load_state_dict(resume["scaler"])
        checkpoint.set_rng_state(resume["rng"])
        state = Progress(**resume["progress"])

    timer = PhaseTimer(device, enabled=run.timing == "phases")
    timer.recording = run.warmup_steps == 0
    metrics = MetricBuffer(store, run_id)
    pause = PauseAt()
    process_steps = 0  # warm-up is per process: a resumed run compiles and warms up again
    for epoch in range(state.epoch + 1, cfg.epochs + 1):
        reporter.task(f"epoch {epoch}/{cfg.epochs}", total=steps_per_epoch)
        model.train()
        train_loader.set_epoch(epoch)
        loss_sum = torch.zeros((), device=device)
        correct = torch.zeros((), device=device, dtype=torch.long)
        seen = samples = 0
        synchronize(device)
        epoch_start = clock = time.perf_counter()
        timer.start()
        for x, y in train_loader:
            timer.mark("data")
            x = x.to(device, non_blocking=True, memory_format=memory_format)
            y = y.to(device, non_blocking=True)
            timer.mark("h2d")
            with autocast:
                out = forward(x)
                loss = criterion(out, y)
            timer.mark("forward")
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            timer.mark("backward")
            if cfg.grad_clip is not None:
                scaler.unscale_(optimizer)
                nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            scaler.step(optimizer)
            scaler.update()
            lr = scheduler.get_last_lr()[0]
            scheduler.step()
            timer.mark("optimizer")

            state.step += 1
            process_steps += 1
            metrics.losses.append((state.step, loss.detach(), lr))
            loss_sum += loss.detach() * len(y)
            correct += (out.argmax(1) == y).sum()
            seen += len(y)
            if process_steps == run.warmup_steps:
                synchronize(device)
                clock = time.perf_counter()
                timer.recording = True
            elif process_steps > run.warmup_steps:
                samples += len(y)
            timer.end_step()
            if state.step % run.log_every == 0:
                metrics.flush(epoch)
            pause.maybe(state.step)
            reporter.advance(1, status=f"loss {metrics.last_loss:.4f}")
        metrics.flush(epoch)

        synchronize(device)
        now = time.perf_counter()
        if process_steps > run.warmup_steps and samples:
            state.train_time_s += now - clock
            state.samples += samples
            state.epoch_throughputs.append(samples / (now - clock))
        val = evaluate(model, val_loader, device, exp)
        state.epoch = epoch
        state.elapsed_s += time.perf_counter() - epoch_start
        accuracy = val.get("acc1", math.nan)
        state.best_val_accuracy = max(state.best_val_accuracy, accuracy)
        target = exp.target.accuracy
        if target is not None and state.epochs_to_target is None and accuracy >= target:
            state.epochs_to_target, state.time_to_target_s = epoch, state.elapsed_s

        rows = [
            ("epoch/train_loss", epoch, loss_sum.item() / seen),
            ("epoch/train_acc1", epoch, correct.item() / seen),
            ("epoch/lr", epoch, lr),
        ] + [(f"val/{k}", epoch, v) for k, v in val.items()]
        if run.timing != "off":
            rows.append(("epoch/time_s", epoch, now - epoch_start))
            if samples:
                rows.append(("epoch/throughput", epoch, state.epoch_throughputs[-1]))
        rows += [(f"phase/{p}_s", epoch, s) for p, s in timer.per_step().items()]
        store.log_metrics(run_id, rows)
        reporter.log(
            f"epoch {epoch}/{cfg.epochs}  train loss {rows[0][2]:.4f}  "
            f"val loss {val.get('loss', math.nan):.4f}  val acc {accuracy:.4f}"
        )
        if run.checkpoint:
            checkpoint.save(
                checkpoint_slot,
                {
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "scaler": scaler.state_dict(),
                    "rng": checkpoint.rng_state(),
                    "progress": asdict(state),
                },
            )

    test_loader = make_loader(data, data.test, exp.data, cfg.batch_size, device)
    test = evaluate(model, test_loader, device, exp)
    throughputs = state.epoch_throughputs
    return {
        "test_accuracy": test.get("acc1"),
        "test_top5": test.get("acc5"),
        "test_loss": test.get("loss"),
        "best_val_accuracy": state.best_val_accuracy,
        "epochs": state.epoch,
        "steps": state.step,
        "steps_per_epoch": steps_per_epoch,
        "samples_per_step": cfg.batch_size * exp.augment.batch_aug_m,
        "epochs_to_target": state.epochs_to_target,
        "time_to_target_s": state.time_to_target_s,
        "throughput": state.samples / state.train_time_s if state.train_time_s else None,
        "throughput_spread": {
            "min": min(throughputs),
            "median": statistics.median(throughputs),
            "max": max(throughputs),
        }
        if throughputs
        else None,
        "train_time_s": state.train_time_s,
        "elapsed_s": state.elapsed_s,
        "phases": timer.per_step() or None,
        "step_time_spread": timer.spread() or None,
        "peak_memory_bytes": peak_memory_bytes(device),
    }
