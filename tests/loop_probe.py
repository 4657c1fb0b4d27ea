"""A test hook (dlperf.engine.hooks) that notes, for each trainer, every step number its hooks
see and whether the one training loop (dlperf.engine.train_loop.train_loop) took that step:
DLPERF_TEST_LOOP_PROBE=PREFIX appends "STEP LOOP" lines (LOOP 1 or 0) to
PREFIX.<trainer>.steps, rank 0 only. Installed beside tests.hooks' own with `add_probe`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from torch import nn

from dlperf.engine.hooks import HOOKS_ENV, StepEnd
from dlperf.engine.train_loop import train_loop

PROBE_ENV = "DLPERF_TEST_LOOP_PROBE"


class LoopProbe:
    def __init__(self) -> None:
        self.prefix = os.environ[PROBE_ENV]

    def start(self, trainer: str, model: nn.Module) -> None:
        pass

    def step_end(self, event: StepEnd) -> None:
        if event.rank != 0:
            return
        frame = sys._getframe(1)
        while frame is not None and frame.f_code is not train_loop.__code__:
            frame = frame.f_back  # type: ignore[assignment]
        with open(f"{self.prefix}.{event.trainer}.steps", "a") as f:
            f.write(f"{event.step} {int(frame is not None)}\n")


probe = LoopProbe


def add_probe(monkeypatch: pytest.MonkeyPatch, prefix: Path) -> None:
    """Add the probe to the hooks this test and its processes run (tests.hooks.install sets
    PYTHONPATH for them)."""
    hooks = os.environ.get(HOOKS_ENV, "")
    monkeypatch.setenv(HOOKS_ENV, ",".join(filter(None, [hooks, "tests.loop_probe:probe"])))
    monkeypatch.setenv(PROBE_ENV, str(prefix))


def steps_seen(prefix: Path, trainer: str) -> list[tuple[int, bool]]:
    """The (step, taken by the loop) lines the probe wrote for `trainer`."""
    lines = Path(f"{prefix}.{trainer}.steps").read_text().split("\n")
    return [(int(s), flag == "1") for s, flag in (line.split() for line in lines if line)]
