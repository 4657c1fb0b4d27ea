"""dlperf.engine.train_loop with fakes: Progress's epoch bookkeeping (best accuracy, NaN as
no accuracy, the first epoch at target), where a step limit stops the loop (mid-epoch,
before the next epoch's batches are drawn, at once when already reached), and
TimedBatches' marks around the batch iterator. (tests/engine/test_loop.py has the
components' call order and fit.)"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from dlperf.engine.hooks import StepEnd
from dlperf.engine.train_loop import Batch, Component, Progress, TimedBatches, train_loop


class Counter(Component):
    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.steps: list[int] = []

    def on_epoch_start(self, epoch: int, batches: Iterable[Batch]) -> None:
        self.starts.append(epoch)

    def on_step_end(self, done: StepEnd) -> None:
        self.steps.append(done.step)

    def on_epoch_end(self, epoch: int) -> None:
        self.ends.append(epoch)


def test_end_epoch_keeps_the_best_accuracy_and_the_elapsed_time() -> None:
    state = Progress()
    state.end_epoch(1, 2.0, 0.5, None)
    state.end_epoch(2, 3.0, 0.4, None)
    assert (state.epoch, state.elapsed_s, state.best_val_accuracy) == (2, 5.0, 0.5)


def test_an_epoch_without_validation_images_has_no_accuracy() -> None:
    state = Progress()
    state.end_epoch(1, 1.0, math.nan, 0.9)
    assert state.best_val_accuracy is None and state.epochs_to_target is None
    state.end_epoch(2, 1.0, 0.2, None)
    state.end_epoch(3, 1.0, math.nan, None)
    assert state.best_val_accuracy == 0.2


def test_the_target_is_noted_at_the_first_epoch_that_reaches_it() -> None:
    state = Progress()
    for epoch, (seconds, accuracy) in enumerate([(1.0, 0.8), (2.0, 0.9), (4.0, 0.95)], 1):
        state.end_epoch(epoch, seconds, accuracy, target=0.9)
    assert (state.epochs_to_target, state.time_to_target_s) == (2, 3.0)


def drawn(log: list[int], epoch: int, n: int) -> Iterator[Batch]:
    """n batches of an epoch, writing each draw into `log`."""
    for i in range(n):
        log.append(epoch * 10 + i)
        yield i, None


def test_a_step_limit_stops_mid_epoch_and_draws_no_later_epoch() -> None:
    log: list[int] = []
    epochs = ((e, drawn(log, e, 3)) for e in (1, 2, 3))
    counter, taken = Counter(), []

    def step(x: Any, y: Any) -> Any:
        taken.append(x)

    state = train_loop(step, epochs, [counter], Progress(step=10), trainer="t", model=None,
                       steps=4)  # fmt: skip
    assert state.step == 14 and taken == [0, 1, 2, 0]
    assert counter.steps == [11, 12, 13, 14]
    assert (counter.starts, counter.ends) == ([1, 2], [1, 2])  # the cut epoch still ends
    assert log == [10, 11, 12, 20]  # epoch 2's second batch and epoch 3 never drawn


def test_zero_steps_left_returns_before_any_epoch_starts() -> None:
    def epochs() -> Iterator[tuple[int, list[Batch]]]:
        raise AssertionError("no epoch may be drawn")
        yield  # pragma: no cover

    counter = Counter()
    state = train_loop(lambda x, y: None, epochs(), [counter], Progress(step=5), trainer="t",
                       model=None, steps=0)  # fmt: skip
    assert state.step == 5 and counter.starts == []


def test_the_step_event_carries_the_batch_what_the_step_returned_and_the_rank() -> None:
    seen: list[StepEnd] = []

    class Watch(Component):
        def on_step_end(self, done: StepEnd) -> None:
            seen.append(done)

    train_loop(lambda x, y: x + y, [(1, [(1, 2)])], [Watch()], Progress(), trainer="ddp",
               model="M", rank=1, world=2)  # fmt: skip
    assert seen == [StepEnd("ddp", 1, 1, 2, 3, "M", 1, 2)]


def test_timed_batches_mark_the_wait_and_the_transfer_around_each_batch() -> None:
    marks: list[str] = []

    def source() -> Iterator[Batch]:
        for i in range(2):
            marks.append(f"drawn {i}")
            yield i, -i

    def collate(x: Any, y: Any) -> Batch:
        marks.append(f"collate {x}")
        return x * 10, y

    batches = TimedBatches(source(), collate, marks.append)
    assert list(batches) == [(0, 0), (10, -1)]
    assert marks == ["drawn 0", "data", "collate 0", "h2d", "drawn 1", "data", "collate 1", "h2d"]


def test_timed_batches_have_their_sources_length_and_an_endless_one_none() -> None:
    assert len(TimedBatches([(1, 1)] * 3, lambda x, y: (x, y), lambda p: None)) == 3
    endless = TimedBatches(iter([(1, 1)]), lambda x, y: (x, y), lambda p: None)
    with pytest.raises(TypeError, match="an endless source has no length"):
        len(endless)
