"""Phase timing kept out of the step's logic: the loop (data, h2d) and the training step
(forward, backward, optimizer) call `mark(phase)` after each phase, which is a no-op unless
phases are timed, so the other modes do not slow the step.

On a CUDA device each mark records a CUDA event on the device's current stream, and the
step's events are read after one wait, on its last event, at the end of the step: a phase is
the time the GPU spent between two marks, and the host is not held up between phases.
Elsewhere (CPU, MPS) the device is synchronised at each mark and the host clock read."""

from __future__ import annotations

from collections import defaultdict

import torch
from torch.profiler import record_function

from dlperf.timing import reading, seconds_from

PHASES = ("data", "h2d", "forward", "backward", "optimizer")
SPAN = "dlperf::"  # the prefix of the phase ranges in a profiler trace
# The range of the work between two epochs (evaluation, checkpoint): no training phase, and
# left out of the steps by a trace's reader (dlperf.traces.EPOCH_END).
EPOCH_END = "epoch_end"
# The phase that follows each mark; "optimizer" ends the step (the next "data" range is opened
# after the profiler's own step marker, so that the ranges nest inside ProfilerStep#N).
_NEXT = dict(zip(PHASES, (*PHASES[1:], None), strict=True))


def per_step(totals: dict[str, float], steps: int) -> dict[str, float]:
    """Mean seconds per step of each phase from its `totals` over `steps` steps ({}: none)."""
    return {p: totals.get(p, 0.0) / steps for p in PHASES} if steps else {}


class PhaseLabels:
    """`dlperf::<phase>` ranges in a profiler trace, opened and closed at the phase marks while
    `active` (a profiled window), so that a trace's reader can tell every operator's phase."""

    def __init__(self) -> None:
        self.active = False
        self._open: record_function | None = None

    def begin(self) -> None:
        """Open a step's first phase (data)."""
        if self.active:
            self._switch(PHASES[0])

    def mark(self, phase: str) -> None:
        """`phase` has ended: close its range and open the next phase's."""
        if self.active:
            self._switch(_NEXT.get(phase))

    def end_epoch(self) -> None:
        """The epoch's steps are done: label what follows, until the next epoch's first
        phase, as the work between epochs."""
        if self.active:
            self._switch(EPOCH_END)

    def close(self) -> None:
        self._switch(None)

    def _switch(self, phase: str | None) -> None:
        if self._open is not None:
            self._open.__exit__(None, None, None)
            self._open = None
        if phase is not None:
            self._open = record_function(SPAN + phase)
            self._open.__enter__()  # type: ignore[no-untyped-call]


class PhaseTimer:
    def __init__(
        self, device: torch.device, enabled: bool, labels: PhaseLabels | None = None
    ) -> None:
        self.device = device
        self.enabled = enabled
        self.labels = labels
        self.recording = False
        self.totals: dict[str, float] = defaultdict(float)
        self.step_times: list[float] = []
        self.events = device.type == "cuda"
        self._start: float | torch.cuda.Event = 0.0  # where the step began
        self._marks: list[tuple[str, float | torch.cuda.Event]] = []
        self._epoch_totals: dict[str, float] = {}  # the totals as the epoch started
        self._epoch_steps = 0  # the recorded steps as the epoch started

    def start(self) -> None:
        """Start the clock at the top of an epoch (evaluation time is not a data wait); what
        is recorded from here on is the epoch's (`epoch_phases`)."""
        if self.enabled:
            self._start, self._marks = reading(self.device), []
            self._epoch_totals, self._epoch_steps = dict(self.totals), len(self.step_times)

    def mark(self, phase: str) -> None:
        if self.labels is not None:
            self.labels.mark(phase)
        if self.enabled:
            self._marks.append((phase, reading(self.device)))

    def end_step(self) -> None:
        """Add the step's phases from its marks; the next step starts at its last one."""
        if not self.enabled:
            return
        last = self._marks[-1][1]
        if not isinstance(last, float):
            last.synchronize()  # events on one stream complete in order: every mark is done
        if self.recording:
            previous = self._start
            for phase, at in self._marks:
                self.totals[phase] += seconds_from(previous, at)
                previous = at
            self.step_times.append(seconds_from(self._start, last))
        self._start, self._marks = last, []

    @property
    def clock(self) -> str | None:
        """What times the phases: "cuda_events", "host" (synchronise, read the host clock),
        or None when phases are not timed."""
        if not self.enabled:
            return None
        return "cuda_events" if self.events else "host"

    def per_step(self) -> dict[str, float]:
        """Mean seconds per recorded step for each phase, over every step recorded."""
        return per_step(self.totals, len(self.step_times))

    def epoch_phases(self) -> tuple[dict[str, float], list[float]]:
        """The seconds of each phase, and the step times, recorded since `start` (the epoch's
        own, not the run's so far)."""
        totals = {p: self.totals[p] - self._epoch_totals.get(p, 0.0) for p in PHASES}
        return totals, self.step_times[self._epoch_steps :]
