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
does (`engine.run`); feature extraction trains the head alone.

Both runs go into the store as one study, with per-epoch validation curves, the staleness
histogram in the asynchronous run's summary and a figure of both curves as an artifact.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from dlperf.config import Experiment
from dlperf.converge import staleness
from dlperf.data import ImageData, make_loader
from dlperf.engine.loop import EpochClock, Progress, Rows, fit
from dlperf.engine.run import prepare_run
from dlperf.engine.step import prepare, steps_per_epoch
from dlperf.engine.timers import PhaseTimer
from dlperf.engine.train import evaluate
from dlperf.progress import NullReporter, Reporter
from dlperf.store import RunStore
from dlperf.system import system_info


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
) -> tuple[list[dict[str, float]], list[int]]:
    """Train `model` in place; `reads[i]` is the version update i was computed on (None: the
    current one, i.e. synchronous SGD). Returns per-epoch validation metrics and staleness."""
    cfg = exp.train
    loader = make_loader(
        data, data.train, exp.data, cfg.batch_size, device, exp.augment, exp.run.seed
    )
    val_loader = make_loader(data, data.val, exp.data, cfg.batch_size, device)
    forward = StaleForward(model)
    per_epoch = steps_per_epoch(len(data.train), cfg.batch_size)
    step = prepare(model, cfg, exp.run, device, per_epoch, wrap=lambda _: forward)
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
        history.append(evaluate(model, val_loader, device, exp.run))
        return history[-1]

    clock = EpochClock(device, 0, PhaseTimer(device, enabled=False))
    fit(
        step, model, loader.set_epoch, state, clock, Rows(), reporter, exp.run,
        trainer="async" if reads else "sync", epochs=cfg.epochs, evaluate=validate,
        before_step=read if schedule else None,
    )  # fmt: skip
    stale = [i - (schedule[i] if schedule else i) for i in range(state.step)]
    return history, stale


def study(
    exp: Experiment,
    speeds: dict[str, float],
    store: RunStore,
    reporter: Reporter | None = None,
) -> dict[str, Any]:
    """Synchronous then emulated asynchronous SGD from the same initial weights, both stored
    as runs of one study."""
    reporter = reporter or NullReporter()
    p = prepare_run(exp, store, reporter)  # the model as a run starts it, for both runs
    models = {"sync": p.model, "async": copy.deepcopy(p.model)}
    per_epoch = steps_per_epoch(len(p.data.train), exp.train.batch_size)
    reads = read_versions(speeds, per_epoch * exp.train.epochs)
    study_id = store.create_study(f"staleness {exp.model.name}", "staleness")
    result: dict[str, Any] = {"study_id": study_id, "learners": speeds}
    if p.crowded:
        reporter.log(f"warning: {p.crowded}")
    for mode in ("sync", "async"):
        config = {**exp.to_dict(), "staleness": {"mode": mode, "learners": speeds}}
        with store.new_run(
            name=f"{exp.model.name} {mode}",
            kind="staleness",
            config=config,
            system=system_info(p.device, p.threads),
            study_id=study_id,
        ) as record:
            torch.manual_seed(exp.run.seed)  # both draw the random numbers a run draws
            history, stale = train(
                exp, p.data, models[mode], p.device, reads if mode == "async" else None, reporter
            )
            rows = [
                (f"val/{k}", e, v) for e, m in enumerate(history, start=1) for k, v in m.items()
            ]
            store.log_metrics(record.id, rows)
            counts = Counter(str(s) for s in stale)
            record.summary = {
                "steps_per_epoch": per_epoch,
                "val_accuracy": history[-1].get("acc1"),
                "val_loss": history[-1].get("loss"),
                "mean_staleness": sum(stale) / len(stale),
                "staleness_histogram": dict(sorted(counts.items(), key=lambda kv: int(kv[0]))),
            }
        result[mode] = {
            "run_id": record.id,
            "val_acc1": [m.get("acc1") for m in history],
            **record.summary,
        }
    return result
