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

from dlperf.timing import now, record_event, seconds_between

PHASES = ("data", "h2d", "forward", "backward", "optimizer")
SPAN = "dlperf::"  # the prefix of the phase ranges in a profiler trace
# The phase that follows each mark; "optimizer" ends the step (the next "data" range is opened
# after the profiler's own step marker, so that the ranges nest inside ProfilerStep#N).
_NEXT = dict(zip(PHASES, (*PHASES[1:], None), strict=True))


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
        self._last = 0.0
        self._step_start = 0.0
        self._start_event: torch.cuda.Event | None = None
        self._marks: list[tuple[str, torch.cuda.Event]] = []

    def start(self) -> None:
        """Start the clock at the top of an epoch (evaluation time is not a data wait)."""
        if not self.enabled:
            return
        if self.events:
            self._start_event, self._marks = record_event(self.device), []
        else:
            self._last = self._step_start = now(self.device)

    def mark(self, phase: str) -> None:
        if self.labels is not None:
            self.labels.mark(phase)
        if not self.enabled:
            return
        if self.events:
            self._marks.append((phase, record_event(self.device)))
            return
        reading = now(self.device)
        if self.recording:
            self.totals[phase] += reading - self._last
        self._last = reading

    def end_step(self) -> None:
        if not self.enabled:
            return
        if self.events:
            self._read_events()
            return
        if self.recording:
            self.step_times.append(self._last - self._step_start)
        self._step_start = self._last

    @property
    def clock(self) -> str | None:
        """What times the phases: "cuda_events", "host" (synchronise, read the host clock),
        or None when phases are not timed."""
        if not self.enabled:
            return None
        return "cuda_events" if self.events else "host"

    def _read_events(self) -> None:
        """Add the step's phases from its events; the next step starts at its last one."""
        assert self._start_event is not None, "start() comes before the first step"
        last = self._marks[-1][1]
        last.synchronize()  # events on one stream complete in order: every mark is done
        if self.recording:
            previous = self._start_event
            for phase, event in self._marks:
                self.totals[phase] += seconds_between(previous, event)
                previous = event
            self.step_times.append(seconds_between(self._start_event, last))
        self._start_event, self._marks = last, []

    def per_step(self) -> dict[str, float]:
        """Mean seconds per recorded step for each phase."""
        n = len(self.step_times)
        return {p: self.totals[p] / n for p in PHASES} if n else {}
