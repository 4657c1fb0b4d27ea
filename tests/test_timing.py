"""dlperf.timing: the spread of repeated measurements, the timer, timed repetitions and
interleaved rounds, on the host and (with stand-in events here, real ones on a GPU) CUDA."""

from __future__ import annotations

import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
import torch
from scipy import stats

from dlperf import timing
from dlperf.timing import Spread, Timer, interleave, round_robin, t_half_width, timed
from tests.conftest import FakeEvent

CUDA = torch.device("cuda", 0)


def test_spread_by_hand() -> None:
    s = Spread.of([4.0, 1.0, 3.0, 2.0])
    # stdev of 1..4 is sqrt(5/3); t(0.975, 3) = 3.1824
    assert (s.n, s.min, s.median, s.max, s.mean) == (4, 1.0, 2.5, 4.0, 2.5)
    assert s.ci95 == pytest.approx(3.182446 * math.sqrt(5 / 3) / 2, rel=1e-6)
    assert s.to_dict() == {
        "n": 4,
        "min": 1.0,
        "median": 2.5,
        "max": 4.0,
        "mean": 2.5,
        "ci95": s.ci95,
    }
    assert s.min_median_max() == {"min": 1.0, "median": 2.5, "max": 4.0}
    one = Spread.of([0.5])
    assert (one.n, one.min, one.median, one.max, one.mean, one.ci95) == (
        1,
        0.5,
        0.5,
        0.5,
        0.5,
        None,
    )
    with pytest.raises(ValueError, match="no values"):
        Spread.of([])


def test_min_median_max_leaves_scipy_unimported() -> None:
    """A run's step times want min/median/max only: SciPy's stats module (about a second to
    import) is loaded when an interval is first read, not before."""
    code = (
        "import sys; from dlperf.timing import Spread; s = Spread.of([1.0, 2.0, 4.0]); "
        "assert s.min_median_max() == {'min': 1.0, 'median': 2.0, 'max': 4.0}; "
        "assert 'scipy.stats' not in sys.modules; assert s.ci95 > 0; "
        "assert 'scipy.stats' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


@pytest.mark.parametrize("values", [[1.0, 2.0], [0.1, 0.4, 0.2, 0.9, 0.3], [7.0] * 3 + [8.0] * 9])
def test_t_half_width_is_scipys_95_percent_interval(values: list[float]) -> None:
    sem = statistics.stdev(values) / math.sqrt(len(values))
    low, high = stats.t.interval(0.95, len(values) - 1, loc=statistics.fmean(values), scale=sem)
    assert t_half_width(values) == pytest.approx((high - low) / 2)
    assert t_half_width(values[:1]) is None


class FakeClock:
    """Seconds that pass only when a fake call runs: each call takes the next duration."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def call(self, name: str, log: list[str], seconds: float) -> Callable[[], None]:
        def fn() -> None:
            log.append(name)
            self.now += seconds

        return fn


def test_timed_warms_up_then_times_each_call_waiting_before_each_reading(
    syncs: list[str],
) -> None:
    clock, log = FakeClock(), []
    times = timed(clock.call("f", log, 0.25), 2, 3, torch.device("cpu"), clock)
    assert log == ["f"] * 5
    assert times == [0.25, 0.25, 0.25]
    assert syncs == ["cpu"] * 4  # after the warm-up and after each timed call
    assert timed(clock.call("g", log, 1.0), 1, 0, torch.device("cpu"), clock) == []
    assert log[-1] == "g" and syncs == ["cpu"] * 5  # the warm-up alone is waited for too


def test_interleave_warms_up_each_then_runs_rounds_in_the_same_order(syncs: list[str]) -> None:
    clock, log = FakeClock(), []
    contenders = {"a": clock.call("a", log, 1.0), "b": clock.call("b", log, 3.0)}
    ends: list[int] = []
    times = interleave(contenders, 2, 3, None, clock, on_round=lambda: ends.append(len(log)))
    assert log == ["a", "a", "b", "b"] + ["a", "b"] * 3
    assert times == {"a": [1.0] * 3, "b": [3.0] * 3}
    assert ends == [6, 8, 10]
    assert syncs == []  # device None: work on the host, nothing to wait for


def test_round_robin_keeps_what_each_contender_returns() -> None:
    log: list[str] = []

    def contender(name: str, value: float) -> Callable[[], float]:
        def measure() -> float:
            log.append(name)
            return value * len(log)

        return measure

    results = round_robin({"x": contender("x", 1.0), ("y", 2): contender("y", 10.0)}, 2)
    assert log == ["x", "y", "x", "y"]
    assert results == {"x": [1.0, 3.0], ("y", 2): [20.0, 40.0]}


def test_timer_measures_a_sleep_on_the_host() -> None:
    timer = Timer()
    for seconds in (0.05, 0.1):
        measured = timer.time(lambda seconds=seconds: time.sleep(seconds))
        assert seconds * 0.9 <= measured < seconds + 2.0  # a busy machine may sleep longer
    timer.start()
    time.sleep(0.02)
    assert 0.018 <= timer.stop() < 2.0


def gpu_work(seconds: float, log: list[str]) -> Callable[[], None]:
    def fn() -> None:
        log.append("work")
        FakeEvent.clock += seconds

    return fn


def test_cuda_repetitions_queue_and_are_waited_for_once(fake_events: list[str]) -> None:
    log: list[str] = []
    times = timed(gpu_work(0.5, log), 1, 4, CUDA, clock=lambda: 1 / 0)  # no host clock read
    assert times == pytest.approx([0.5] * 4) and log == ["work"] * 5
    assert FakeEvent.waits == 1  # one wait on the last event, none between the calls
    assert fake_events == []  # and no device-wide synchronise
    assert set(FakeEvent.streams) == {"stream of cuda:0"}


def test_cuda_timer_and_interleave_use_events(fake_events: list[str]) -> None:
    log: list[str] = []
    timer = Timer(CUDA)
    assert timer.time(gpu_work(0.25, log)) == pytest.approx(0.25)
    assert FakeEvent.waits == 1
    contenders = {"a": gpu_work(1.0, log), "b": gpu_work(2.0, log)}
    times = interleave(contenders, 1, 2, CUDA)
    assert times == {"a": pytest.approx([1.0, 1.0]), "b": pytest.approx([2.0, 2.0])}
    assert FakeEvent.waits == 1 + 2 + 4  # each warm-up, then each timed call
    assert fake_events == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: no GPU visible")
def test_cuda_events_agree_with_the_host_clock_on_a_real_gpu() -> None:
    device = torch.device("cuda", torch.cuda.current_device())
    a = torch.randn(4096, 4096, device=device)

    def work() -> None:
        for _ in range(20):
            a @ a

    events = timed(work, 2, 5, device)
    # The host clock around the same work, waited for: it adds only launch and wait costs,
    # small beside 20 large matmuls.
    host = [Timer().time(lambda: (work(), torch.cuda.synchronize(device))) for _ in range(5)]
    assert all(t > 0 for t in events)
    assert statistics.median(events) == pytest.approx(statistics.median(host), rel=0.5)


def test_marks_are_events_on_cuda_and_the_host_clock_elsewhere(fake_events: list[str]) -> None:
    """The DDP worker's gradient-ready marks: on a GPU a hook runs when its work is queued,
    so the mark is an event on the device's stream, read once the step has been waited for."""
    log: list[str] = []
    start = timing.mark(CUDA)
    gpu_work(0.5, log)()
    end = timing.mark(CUDA)
    assert isinstance(start, FakeEvent) and FakeEvent.waits == 0  # marking never waits
    assert timing.seconds_from(start, end) == pytest.approx(0.5)
    assert fake_events == []
    host = timing.mark(torch.device("cpu"))
    assert isinstance(host, float) and timing.seconds_from(host, timing.mark(None)) >= 0
    with pytest.raises(AssertionError, match="marks of one device"):
        timing.seconds_from(host, end)
