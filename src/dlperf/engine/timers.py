"""Phase timing kept out of the step's logic: the loop (data, h2d) and the training step
(forward, backward, optimizer) call `mark(phase)` after each phase, which is a no-op unless
phases are timed. Only in that mode is the device synchronised before each clock read, so
the other modes do not slow the step."""

from __future__ import annotations

import statistics
import time
from collections import defaultdict

import torch

from dlperf.system import synchronize

PHASES = ("data", "h2d", "forward", "backward", "optimizer")


class PhaseTimer:
    def __init__(self, device: torch.device, enabled: bool) -> None:
        self.device = device
        self.enabled = enabled
        self.recording = False
        self.totals: dict[str, float] = defaultdict(float)
        self.step_times: list[float] = []
        self._last = 0.0
        self._step_start = 0.0

    def start(self) -> None:
        """Start the clock at the top of an epoch (evaluation time is not a data wait)."""
        if self.enabled:
            synchronize(self.device)
            self._last = self._step_start = time.perf_counter()

    def mark(self, phase: str) -> None:
        if not self.enabled:
            return
        synchronize(self.device)
        now = time.perf_counter()
        if self.recording:
            self.totals[phase] += now - self._last
        self._last = now

    def end_step(self) -> None:
        if self.enabled:
            if self.recording:
                self.step_times.append(self._last - self._step_start)
            self._step_start = self._last

    def per_step(self) -> dict[str, float]:
        """Mean seconds per recorded step for each phase."""
        n = len(self.step_times)
        return {p: self.totals[p] / n for p in PHASES} if n else {}

    def spread(self) -> dict[str, float]:
        """min/median/max seconds of a whole step."""
        if not self.step_times:
            return {}
        return {
            "min": min(self.step_times),
            "median": statistics.median(self.step_times),
            "max": max(self.step_times),
        }
