"""The profiled window (dlperf.engine.profiler) as a component of the one training loop: it
records the steps after `start_after`, labels their phases, says once that the trace is
written, and fits the run or says how to make it fit."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch
from torch import nn

from dlperf.config import ProfileConfig, RunConfig, TrainConfig
from dlperf.engine.profiler import ProfileWindow, check_fits, trace_name
from dlperf.engine.step import build_step
from dlperf.engine.timers import PhaseTimer
from dlperf.engine.train_loop import Progress, TimedBatches, train_loop
from dlperf.errors import UserError

CPU = torch.device("cpu")


def test_the_window_traces_its_steps_labelled_by_phase(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
    path = tmp_path / "trace" / trace_name("rank0")
    window = ProfileWindow(ProfileConfig(enabled=True, warmup=1, active=2), CPU, 2, path)
    written: list[Path] = []
    window.on_written = written.append
    timer = PhaseTimer(CPU, enabled=False, labels=window.labels)
    step = build_step(model, TrainConfig(lr=0.1), "fp32", CPU, 8, timer=timer)
    data = [(torch.randn(5, 4), torch.randint(3, (5,)))] * 8
    with window:
        batches = [(1, TimedBatches(data, lambda x, y: (x, y), timer.mark))]
        train_loop(step, batches, [window], Progress(), trainer="run", model=model)
    assert written == [path]  # once, after steps 3 (warm-up) and 4, 5 (recorded)
    trace = json.loads(gzip.decompress(path.read_bytes()))
    names = {event.get("name") for event in trace["traceEvents"]}
    assert {f"dlperf::{p}" for p in ("data", "h2d", "forward", "backward", "optimizer")} <= names
    steps = {n for n in names if isinstance(n, str) and n.startswith("ProfilerStep#")}
    assert len(steps) == 2


def test_a_disabled_window_writes_nothing(tmp_path: Path) -> None:
    window = ProfileWindow(ProfileConfig(), CPU, 0, tmp_path / "t.json.gz")
    assert not any(window.after_step() for _ in range(5))
    assert not (tmp_path / "t.json.gz").exists()


def test_the_window_and_a_timed_step_must_fit_the_run() -> None:
    run = RunConfig(warmup_steps=2, profile=ProfileConfig(enabled=True, warmup=1, active=2))
    check_fits(run, 6)  # steps 3..5 profiled, 6 timed
    with pytest.raises(UserError, match=r"records steps 3\.\.5"):
        check_fits(run, 5)
    check_fits(RunConfig(), 1)  # nothing profiled: nothing to fit
