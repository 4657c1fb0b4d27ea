"""dlperf.engine.timers: phase marks summed into per-step means, only while recording,
each step starting where the last one ended; a no-op when phases are not timed; and the
`dlperf::<phase>` ranges a profiler trace gets. The clock is a fake (no sleeps)."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from dlperf.engine import timers
from dlperf.engine.timers import PHASES, PhaseLabels, PhaseTimer

CPU = torch.device("cpu")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The readings the timer takes, in order, from a list the test fills."""
    readings: list[float] = []

    def reading(device: torch.device) -> float:
        if not readings:
            raise AssertionError("the timer read the clock more often than expected")
        return readings.pop(0)

    monkeypatch.setattr(timers, "reading", reading)
    return readings


def one_step(timer: PhaseTimer) -> None:
    for phase in PHASES:
        timer.mark(phase)
    timer.end_step()


def test_a_disabled_timer_reads_no_clock_and_reports_nothing(clock: list[float]) -> None:
    timer = PhaseTimer(CPU, enabled=False)
    timer.recording = True
    timer.start()
    one_step(timer)  # the clock fixture raises on any reading
    assert timer.clock is None and timer.per_step() == {} and timer.step_times == []


def test_phases_are_the_times_between_marks_and_steps_chain(clock: list[float]) -> None:
    timer = PhaseTimer(CPU, enabled=True)
    assert timer.clock == "host"
    timer.recording = True
    # start at 10; step 1: data 1, h2d 0.5, forward 2, backward 3, optimizer 0.5 (ends at 17)
    clock += [10.0, 11.0, 11.5, 13.5, 16.5, 17.0]
    timer.start()
    one_step(timer)
    # step 2 starts where step 1 ended (17): each phase 1 s
    clock += [18.0, 19.0, 20.0, 21.0, 22.0]
    one_step(timer)
    assert timer.step_times == [7.0, 5.0]
    assert timer.per_step() == {
        "data": 1.0, "h2d": 0.75, "forward": 1.5, "backward": 2.0, "optimizer": 0.75
    }  # fmt: skip


def test_steps_before_recording_are_not_counted(clock: list[float]) -> None:
    timer = PhaseTimer(CPU, enabled=True)
    clock += [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]  # a warm-up step
    timer.start()
    one_step(timer)
    timer.recording = True
    clock += [7.0, 8.0, 9.0, 10.0, 15.0]  # starts at 5, where the warm-up step ended
    one_step(timer)
    assert timer.step_times == [10.0]
    assert timer.per_step()["data"] == 2.0 and timer.per_step()["optimizer"] == 5.0


def test_start_restarts_the_clock_at_an_epochs_top(clock: list[float]) -> None:
    timer = PhaseTimer(CPU, enabled=True)
    timer.recording = True
    clock += [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    timer.start()
    one_step(timer)
    # evaluation between the epochs is not data wait
    clock += [100.0, 101.0, 102.0, 103.0, 104.0, 105.0]
    timer.start()
    one_step(timer)
    assert timer.step_times == [5.0, 5.0]


def test_labels_name_each_phase_in_a_profiled_window() -> None:
    labels = PhaseLabels()
    timer = PhaseTimer(CPU, enabled=False, labels=labels)
    labels.begin()  # inactive: nothing opened
    labels.active = True
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        labels.begin()
        for phase in PHASES:
            torch.ones(2).sum()
            timer.mark(phase)
        labels.close()
    names = [e.name for e in prof.events() if e.name.startswith(timers.SPAN)]
    assert names == [timers.SPAN + p for p in PHASES]
