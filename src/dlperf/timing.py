"""One way to time work and to summarise the times.

A clock read on the host measures queued GPU work only once the device has finished it, so
every reading here waits for the device first. On a CUDA device that wait would stall the
host between the calls it times, so there the time is that of CUDA events recorded on the
device's current stream, read after a single wait on the last of them. Elsewhere (CPU, MPS,
or `device=None` for work that runs on the host alone, such as a subprocess) the device is
synchronised and a host clock read.

Repetitions of several contenders run in rounds, each contender once per round in the same
order (`round_robin`, `interleave`), so that a drift in the speed of a busy machine hits all
of them alike rather than whichever ran while it lasted.

torch and SciPy are imported where they are used: a TensorFlow worker times with this module
too, without torch's start-up.
"""

from __future__ import annotations

import functools
import itertools
import math
import statistics
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from dlperf.system import synchronize

if TYPE_CHECKING:
    import torch

Clock = Callable[[], float]
"""A host clock in seconds: time.perf_counter (wall time, the default) or time.process_time
(CPU time of this process, which on a CPU with one thread leaves out time other jobs took).
CUDA events time the work on a CUDA device whatever the host clock."""

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


@dataclass(frozen=True)
class Spread:
    """Repeated measurements summarised: `ci95` is the half-width of the 95% confidence
    interval of the mean (Student's t), None for fewer than two values. It is worked out
    when first read: it needs SciPy, whose stats module takes about a second to import,
    and most readers (a run's step times) want only min/median/max."""

    n: int
    min: float
    median: float
    max: float
    mean: float
    values: tuple[float, ...] = field(repr=False)

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if not values:
            raise ValueError("no values to summarise")
        return cls(
            n=len(values),
            min=min(values),
            median=statistics.median(values),
            max=max(values),
            mean=statistics.fmean(values),
            values=tuple(values),
        )

    @functools.cached_property
    def ci95(self) -> float | None:
        return t_half_width(self.values)

    def to_dict(self) -> dict[str, Any]:
        return {**self.min_median_max(), "n": self.n, "mean": self.mean, "ci95": self.ci95}

    def min_median_max(self) -> dict[str, float]:
        """The three keys the records written before this class (runs, benchmarks) hold."""
        return {"min": self.min, "median": self.median, "max": self.max}


def t_half_width(values: Sequence[float]) -> float | None:
    """The half-width of the 95% confidence interval of the mean of `values`, Student's t:
    t(0.975, n-1) * s / sqrt(n), since s is estimated from the values themselves (1.96 s
    would assume a known sigma). None for fewer than two values."""
    if len(values) < 2:
        return None
    from scipy import stats

    sem = statistics.stdev(values) / math.sqrt(len(values))
    return float(stats.t.ppf(0.975, len(values) - 1)) * sem


def events_device(device: torch.device | None) -> torch.device | None:
    """`device` if its work is timed by CUDA events, else None (a host clock times it)."""
    return device if device is not None and device.type == "cuda" else None


def now(device: torch.device | None, clock: Clock = time.perf_counter) -> float:
    """The host clock once `device` has finished its queued work."""
    if device is not None:
        synchronize(device)
    return clock()


def record_event(device: torch.device) -> torch.cuda.Event:
    """A timing CUDA event recorded on `device`'s current stream (the run's device, which
    need not be the current one: run.device = "cuda:1")."""
    import torch

    event = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    event.record(torch.cuda.current_stream(device))
    return event


def mark(device: torch.device | None) -> float | torch.cuda.Event:
    """This moment of `device`'s work, without waiting for it: on a CUDA device an event on
    its stream (read by `seconds_from` once a later event has completed); elsewhere the
    host clock, since on the host the work queued before this call is done."""
    cuda = events_device(device)
    return record_event(cuda) if cuda is not None else time.perf_counter()


def seconds_from(start: float | torch.cuda.Event, end: float | torch.cuda.Event) -> float:
    """Seconds between two marks of one device (events: `end` must have completed)."""
    if isinstance(start, float) and isinstance(end, float):
        return end - start
    assert not isinstance(start, float) and not isinstance(end, float), "marks of one device"
    return float(start.elapsed_time(end) / 1e3)  # torch answers in milliseconds


def reading(
    device: torch.device | None, clock: Clock = time.perf_counter
) -> float | torch.cuda.Event:
    """This moment of `device`'s work: on a CUDA device an event on its stream (completed once
    the host waits on it), elsewhere `clock` once the device has finished its queued work."""
    cuda = events_device(device)
    return record_event(cuda) if cuda is not None else now(device, clock)


class Timer:
    """Times one span at a time of work on `device` (None: work on the host alone):
    start(), then stop() returns the seconds between them."""

    def __init__(self, device: torch.device | None = None, clock: Clock = time.perf_counter):
        self.device = device
        self.clock = clock
        self._start: float | torch.cuda.Event | None = None

    def start(self) -> None:
        self._start = reading(self.device, self.clock)

    def stop(self) -> float:
        assert self._start is not None, "start() comes before stop()"
        end = reading(self.device, self.clock)
        if not isinstance(end, float):
            end.synchronize()
        return seconds_from(self._start, end)

    def time(self, fn: Callable[[], object]) -> float:
        """Seconds of one call of `fn`."""
        self.start()
        fn()
        return self.stop()


def timed(
    fn: Callable[[], object],
    warmup: int,
    reps: int,
    device: torch.device | None = None,
    clock: Clock = time.perf_counter,
) -> list[float]:
    """Seconds of each of `reps` consecutive calls of `fn`, after `warmup` uncounted calls
    (waited for, also when `reps` is 0). On a CUDA device the calls queue back to back, an
    event after each, and the host waits once, at the end."""
    for _ in range(warmup):
        fn()
    marks = [reading(device, clock)]
    for _ in range(reps):
        fn()
        marks.append(reading(device, clock))
    if not isinstance(marks[-1], float):
        marks[-1].synchronize()  # events on one stream complete in order: every mark is done
    return [seconds_from(a, b) for a, b in itertools.pairwise(marks)]


def round_robin(
    contenders: Mapping[K, Callable[[], T]],
    rounds: int,
    on_round: Callable[[], object] | None = None,
) -> dict[K, list[T]]:
    """What each contender returns (its own measurement: images/s, say), once per round in
    the same order every round; `on_round` is called after each round (progress)."""
    results: dict[K, list[T]] = {key: [] for key in contenders}
    for _ in range(rounds):
        for key, measure in contenders.items():
            results[key].append(measure())
        if on_round is not None:
            on_round()
    return results


def interleave(
    contenders: Mapping[K, Callable[[], object]],
    warmup: int,
    rounds: int,
    device: torch.device | None = None,
    clock: Clock = time.perf_counter,
    on_round: Callable[[], object] | None = None,
) -> dict[K, list[float]]:
    """Seconds of each contender's call in each of `rounds` rounds (round_robin), after
    `warmup` uncounted calls of each, contender by contender."""
    for fn in contenders.values():
        timed(fn, warmup, 0, device, clock)
    timer = Timer(device, clock)
    calls = {key: functools.partial(timer.time, fn) for key, fn in contenders.items()}
    return round_robin(calls, rounds, on_round)
