"""The one training loop (dlperf.engine.train_loop) with fakes: the order it calls its
components in, the step count the hooks see, where it stops, and the data wait marked by
the batch iterator's wrapper; and fit, its adapter for epochs of a data set."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import pytest
import torch
from torch import nn

from dlperf.config import RunConfig, ScheduleConfig, TrainConfig
from dlperf.engine.hooks import Hooks, StepEnd
from dlperf.engine.loop import Diverged, EpochClock, Rows, fit
from dlperf.engine.step import build_step
from dlperf.engine.timers import PhaseTimer
from dlperf.engine.train_loop import Batch, Component, Progress, TimedBatches, train_loop
from dlperf.progress import NullReporter


class Recorder(Component):
    """Writes every call it gets into `calls`, named `name`."""

    def __init__(self, name: str, calls: list[str]) -> None:
        self.name, self.calls = name, calls

    def on_epoch_start(self, epoch: int, batches: Iterable[Batch]) -> None:
        self.calls.append(f"{self.name} start {epoch}")

    def on_step_end(self, done: StepEnd) -> None:
        self.calls.append(f"{self.name} step {done.step} x={done.x}")

    def on_epoch_end(self, epoch: int) -> None:
        self.calls.append(f"{self.name} end {epoch}")


def double(x: Any, y: Any) -> Any:
    return 2 * x


def test_components_are_called_in_order_around_each_step() -> None:
    calls: list[str] = []
    epochs = [(1, [(10, 0), (11, 0)]), (2, [(12, 0)])]
    state = Progress()
    components = [Recorder("a", calls), Recorder("b", calls)]
    train_loop(double, epochs, components, state, trainer="t", model=None)
    assert calls == [
        "a start 1", "b start 1",
        "a step 1 x=10", "b step 1 x=10", "a step 2 x=11", "b step 2 x=11",
        "a end 1", "b end 1",
        "a start 2", "b start 2", "a step 3 x=12", "b step 3 x=12", "a end 2", "b end 2",
    ]  # fmt: skip
    assert state.step == 3


def test_the_step_count_goes_on_from_the_state_and_reaches_the_hooks() -> None:
    seen: list[StepEnd] = []

    class Hook:
        def start(self, trainer: str, model: nn.Module) -> None:
            pass

        def step_end(self, event: StepEnd) -> None:
            seen.append(event)

    state = Progress(step=7)  # a resumed run
    batches = [(1, [(1, "a"), (2, "b")])]
    train_loop(double, batches, [Hooks([Hook()])], state, trainer="t", model="m", rank=1, world=2)
    assert [(e.step, e.x, e.y, e.stepped, e.model, e.rank, e.world) for e in seen] == [
        (8, 1, "a", 2, "m", 1, 2),
        (9, 2, "b", 4, "m", 1, 2),
    ]


def test_steps_stop_mid_epoch_which_still_ends_and_no_later_epoch_is_drawn() -> None:
    calls: list[str] = []
    drawn: list[int] = []

    def epochs() -> Iterable[tuple[int, list[Batch]]]:
        for epoch in (1, 2, 3):
            drawn.append(epoch)
            yield epoch, [(epoch * 10 + i, 0) for i in range(2)]

    state = Progress()
    train_loop(double, epochs(), [Recorder("c", calls)], state, trainer="t", model=None, steps=3)
    assert state.step == 3
    assert calls[-2:] == ["c step 3 x=20", "c end 2"]
    assert drawn == [1, 2]  # detection's epochs draw random numbers: the third must not


def test_no_steps_asked_takes_none_and_draws_nothing() -> None:
    def endless() -> Iterable[Batch]:
        raise AssertionError("no batch may be drawn")
        yield  # a generator

    state = Progress()
    train_loop(double, [(1, endless())], [], state, trainer="t", model=None, steps=0)
    assert state.step == 0


def test_timed_batches_mark_the_wait_and_the_copy_around_collate() -> None:
    marks: list[str] = []

    def collate(x: int, y: int) -> Batch:
        marks.append("collate")
        return x + 1, y

    timed = TimedBatches([(1, 0), (2, 0)], collate, marks.append)
    assert len(timed) == 2
    assert list(timed) == [(2, 0), (3, 0)]
    assert marks == ["data", "collate", "h2d"] * 2


def test_an_endless_source_is_not_restarted_between_loops() -> None:
    """A worker's compute-only copy runs a loop per chunk over the same endless source."""
    timed = TimedBatches(iter([(i, 0) for i in range(5)]), lambda x, y: (x, y), lambda _: None)
    xs: list[int] = []
    step = lambda x, y: xs.append(x)  # noqa: E731
    train_loop(step, [(1, timed)], [], Progress(), trainer="t", model=None, steps=2)
    train_loop(step, [(1, timed)], [], Progress(), trainer="t", model=None, steps=2)
    assert xs == [0, 1, 2, 3]


@pytest.mark.parametrize("max_steps", [None, 3])
def test_fit_counts_steps_epochs_and_samples_through_the_loop(max_steps: int | None) -> None:
    torch.manual_seed(0)
    device = torch.device("cpu")
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
    step = build_step(model, TrainConfig(lr=0.1, epochs=2), "fp32", device, 2)
    data = [(torch.randn(5, 4), torch.randint(3, (5,))) for _ in range(2)]
    timer = PhaseTimer(device, enabled=True)
    clock = EpochClock(device, 1, timer)
    rows = Rows()
    state = fit(
        step,
        model=model,
        batches=lambda epoch: data,
        state=Progress(),
        clock=clock,
        sink=rows,
        reporter=NullReporter(),
        run=RunConfig(log_every=1),
        trainer="run",
        epochs=2,
        max_steps=max_steps,
        evaluate=lambda: {"acc1": 0.5},
    )
    steps = max_steps or 4
    assert state.step == steps and state.epoch == 2
    assert state.samples == 5 * (steps - 1)  # the first step warms up
    assert [r[1] for r in rows if r[0] == "train/loss"] == list(range(1, steps + 1))
    assert [r[1] for r in rows if r[0] == "epoch/train_loss"] == [1, 2]
    assert [r[2] for r in rows if r[0] == "val/acc1"] == [0.5, 0.5]
    assert {r[0] for r in rows} >= {"phase/forward_s", "epoch/throughput", "epoch/lr"}


def test_a_loss_not_finite_at_the_first_step_is_not_blamed_on_the_learning_rate() -> None:
    # The first step's loss comes from the initial weights, before any update.
    first = str(Diverged(1, 1, float("nan"), 0.05))
    assert first.startswith("loss became nan at step 1 (epoch 1); before any update, so the model")
    assert "train.lr" not in first
    later = str(Diverged(2, 1, float("nan"), 0.05))
    assert later == (
        "loss became nan at step 2 (epoch 1); try a lower train.lr (now 0.05), "
        'train.grad_clip = 1.0, or run.precision = "fp32"'
    )


class _NanAtThirdCall(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.calls = nn.Linear(4, 3), 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.fc(x) * (math.nan if self.calls == 3 else 1.0)


def test_divergence_names_the_learning_rate_set_not_the_scheduled_one() -> None:
    """A cosine run set to 10 said "try a lower train.lr (now 9.6194)": the step's
    scheduled rate, a value the user never wrote (round 18)."""
    device = torch.device("cpu")
    model = _NanAtThirdCall()
    cfg = TrainConfig(lr=10.0, epochs=2, schedule=ScheduleConfig(kind="cosine"))
    step = build_step(model, cfg, "fp32", device, 2)
    data = [(torch.randn(5, 4), torch.randint(3, (5,))) for _ in range(2)]
    rows = Rows()
    with pytest.raises(Diverged) as e:
        fit(
            step,
            model=model,
            batches=lambda epoch: data,
            state=Progress(),
            clock=EpochClock(device, 1, PhaseTimer(device, enabled=False)),
            sink=rows,
            reporter=NullReporter(),
            run=RunConfig(log_every=1),
            trainer="run",
            epochs=2,
        )
    said = "loss became nan at step 3 (epoch 2); try a lower train.lr (now 10)"
    assert str(e.value).startswith(said)
    scheduled = {r[1]: r[2] for r in rows if r[0] == "train/lr"}
    assert scheduled[3] != 10.0  # the rate at that step is stored as train/lr
