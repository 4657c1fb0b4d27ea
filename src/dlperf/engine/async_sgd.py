"""Asynchronous SGD emulated in one process, next to synchronous SGD on the same data.

The staleness simulator gives the order in which the server applies gradients and the weight
version each was computed on. Training replays that schedule with the engine's one training
step (`engine.step`, so `run.precision`, clipping and the schedule apply as in any run):
update i takes the i-th batch of the data stream, its forward pass runs through the server
model at the weights of the version it read, and the gradient lands on the server's live
weights, which the experiment's optimizer and schedule then update. Synchronous SGD is the same
loop with every forward pass at the current weights, so one learner (never stale) trains
exactly like synchronous SGD. BatchNorm statistics travel with the gradient: the forward pass
starts from the read version's running statistics and leaves its update of them on the server.
Both start from the experiment's model.weights, at their resolution and statistics, as a run
does (`engine.build`); feature extraction trains the head alone.

Metrics go to the `MetricSink` the caller hands in as the loop logs them; the study that
records both runs in the store is dlperf.experiment.staleness.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from dlperf.config import Experiment
from dlperf.converge import staleness
from dlperf.data import ImageData, make_loader
from dlperf.engine.loop import EpochClock, MetricSink, Progress, Rows, fit
from dlperf.engine.step import prepare, steps_per_epoch
from dlperf.engine.timers import PhaseTimer
from dlperf.engine.train import evaluate
from dlperf.progress import Reporter


def read_versions(speeds: dict[str, float], updates: int) -> list[int]:
    """The version each of the first `updates` gradients read, in the order they are applied."""
    total = sum(speeds.values())
    horizon = updates / total + max(1.0 / s for s in speeds.values())
    gradients = staleness.simulate(staleness.from_speeds(speeds, horizon))
    # Each learner finishes floor(horizon·s) ≥ updates·s/total gradients, together ≥ updates.
    assert len(gradients) >= updates
    return [g.read_version for g in gradients[:updates]]


class _ReadAs(torch.autograd.Function):
    """The value of a stale copy of a weight, with its gradient going to the live weight."""

    @staticmethod
    def forward(ctx: Any, live: torch.Tensor, stale: torch.Tensor) -> torch.Tensor:
        return stale.clone()  # a copy: the output must not alias a snapshot later reads reuse

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


class StaleForward:
    """The forward pass of `model` at the weights of the version last `read`: a learner that
    computed its gradient on old weights. Gradients land on `model`'s live parameters, so the
    shared training step optimizes `model` while this forward pass runs on the old weights."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.state: Mapping[str, torch.Tensor] | None = None

    def read(self, state: Mapping[str, torch.Tensor] | None) -> None:
        """Run the next forward passes at `state` (a `state_dict` of `model`; None: the live
        weights). Its buffers are copied into `model` now, so BatchNorm starts from the read
        version's running statistics and the server keeps what the forward pass makes of them."""
        self.state = state
        if state is not None:
            for name, buffer in self.model.named_buffers():
                buffer.copy_(state[name])

    def __call__(self, x: torch.Tensor) -> Any:
        if self.state is None:
            return self.model(x)
        weights = {
            name: _ReadAs.apply(p, self.state[name]) for name, p in self.model.named_parameters()
        }
        return torch.func.functional_call(self.model, weights, (x,))


def train(
    exp: Experiment,
    data: ImageData,
    model: nn.Module,
    device: torch.device,
    reads: list[int] | None,
    reporter: Reporter,
    sink: MetricSink | None = None,
) -> tuple[list[dict[str, float]], list[int]]:
    """Train `model` in place, its metrics streamed to `sink` (default: kept in memory);
    `reads[i]` is the version update i was computed on (None: the current one, i.e.
    synchronous SGD). Returns per-epoch validation metrics and staleness. A loss that is not
    finite raises the loop's `Diverged`."""
    cfg = exp.train
    loader = make_loader(
        data, data.train, exp.data, cfg.batch_size, device, exp.augment, exp.run.seed
    )
    val_loader = make_loader(data, data.val, exp.data, cfg.batch_size, device)
    forward = StaleForward(model)
    per_epoch = steps_per_epoch(len(data.train), cfg.batch_size)
    step = prepare(
        model, cfg, exp.run, device, per_epoch, wrap=lambda _: forward, classes=data.num_classes
    )
    # Weights kept only while some later update still reads them.
    schedule = reads or []
    last_read = {v: i for i, v in enumerate(schedule)}
    snapshots: dict[int, Mapping[str, torch.Tensor]] = {}
    state, history = Progress(), []

    def read() -> None:
        """Keep the weights later updates read; read those this update was computed on."""
        version = state.step
        for v in [v for v in snapshots if last_read.get(v, -1) < version]:
            del snapshots[v]
        if last_read.get(version, -1) >= version:
            snapshots[version] = copy.deepcopy(model.state_dict())
        forward.read(snapshots[schedule[version]])

    def validate() -> dict[str, float]:
        history.append(evaluate(model, val_loader, device, exp.run, data.num_classes))
        return history[-1]

    clock = EpochClock(device, 0, PhaseTimer(device, enabled=False))
    fit(
        step,
        model=model,
        batches=loader.set_epoch,
        state=state,
        clock=clock,
        sink=sink or Rows(),
        reporter=reporter,
        run=exp.run,
        trainer="async" if reads else "sync",
        epochs=cfg.epochs,
        evaluate=validate,
        before_step=read if schedule else None,
    )
    stale = [i - (schedule[i] if schedule else i) for i in range(state.step)]
    return history, stale
