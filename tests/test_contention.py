"""dlperf.contention: CPU wait measured from the kernel's per-thread run delay, the marks it
gives, and `dlperf run` on a core another process keeps busy (issue 39)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from dlperf import contention
from dlperf.contention import Contention, Reading, between, combine, judge
from dlperf.system import auto_threads, crowding
from tests.conftest import CliResult

SCHEDSTAT = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/schedstat").exists()
needs_schedstat = pytest.mark.skipif(not SCHEDSTAT, reason="needs Linux's per-thread schedstat")


def reading(at: float, threads: dict[int, tuple[int, int]], pressure: int | None = 0) -> Reading:
    return Reading(at, threads, involuntary_switches=0, pressure_us=pressure, load1=0.0)


def test_share_is_the_waiting_part_of_runnable_thread_time() -> None:
    start = reading(0.0, {1: (1_000, 0), 2: (0, 0)})
    # thread 1 ran 3 s and waited 1 s; thread 2 ran 1 s and waited 3 s; thread 3 was born
    # in the window (counted from birth); a thread that ended is lost with its figures
    end = reading(2.0, {1: (3e9 + 1_000, 1e9), 2: (1e9, 3e9), 3: (0, 0)}, pressure=1_000_000)
    window = between(start, end)
    assert window.source == "schedstat"
    assert window.cpu_wait_share == pytest.approx(0.5)
    assert window.run_s == pytest.approx(4.0) and window.wait_s == pytest.approx(4.0)
    assert window.host_pressure == pytest.approx(0.5)
    assert window.contended and "50% of their runnable time" in window.note()


def test_waiting_on_its_own_family_is_not_contention() -> None:
    """Two workers and their communication threads on two cores wait on each other: the
    threads' wait is kept, but the window is contended only when other processes (the host's
    busy time less the family's CPU time) took 10% of the cores or more."""
    threads = {1: (0, 0)}, {1: (3_000_000_000, 1_000_000_000)}  # waited 25%
    start = Reading(0.0, threads[0], 0, None, 0.0, host_busy_s=100.0, family_cpu_s=50.0)
    own = Reading(2.0, threads[1], 0, None, 0.0, host_busy_s=104.0, family_cpu_s=53.9)
    alone = between(start, own)
    cores = len(contention.usable_cpus())
    assert alone.cpu_wait_share == pytest.approx(0.25)
    assert alone.others_share == pytest.approx(0.1 / (2.0 * cores))
    assert not alone.contended and judge(alone).reliable
    neighbour = Reading(2.0, threads[1], 0, None, 0.0, host_busy_s=104.0, family_cpu_s=52.0)
    crowded = between(start, neighbour)
    assert crowded.others_share == pytest.approx(min(1.0, 2.0 / (2.0 * cores)))
    assert crowded.contended and "other processes took" in crowded.note()


def test_without_schedstat_the_load_average_stands_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(contention, "usable_cpus", lambda: {0, 1})
    loaded = Reading(0.0, {}, 0, None, load1=8.0)
    window = between(loaded, Reading(1.0, {}, 3, None, load1=8.0))
    assert window.source == "loadavg" and window.cpu_wait_share == pytest.approx(0.75)
    assert window.involuntary_switches == 3 and window.host_pressure is None
    assert "load average" in window.note()


def test_stretches_combine_by_their_thread_time() -> None:
    a = Contention(1.0, 0.0, "schedstat", run_s=3.0, wait_s=0.0, involuntary_switches=1)
    b = Contention(3.0, 0.5, "schedstat", run_s=1.0, wait_s=1.0, involuntary_switches=2)
    both = combine([a, b])
    assert both is not None and both.cpu_wait_share == pytest.approx(0.2)
    assert both.wall_s == 4.0 and both.involuntary_switches == 3
    assert combine([]) is None
    assert Contention.worst([a, b]) is b


def test_marks_say_why_a_number_is_not_to_be_trusted() -> None:
    calm = Contention(1.0, 0.01, "schedstat", 1.0, 0.01)
    assert judge(calm, [100.0, 101.0, 99.0, 100.5]).reliable
    assert judge(None).reliable  # not measured is not a mark
    spoiled = judge(Contention(1.0, 0.4, "schedstat", 1.0, 0.66))
    assert not spoiled.reliable and spoiled.note and spoiled.note.startswith("contended")
    spread = judge(calm, [100.0, 60.0, 140.0, 100.0, 30.0])
    assert not spread.reliable and spread.note and "interquartile range" in spread.note
    assert judge(calm, [100.0, 50.0]).reliable  # two values are too few to judge a spread


def test_threads_follow_the_free_cores() -> None:
    assert auto_threads(0.2) == 1  # never below one
    assert auto_threads(1.4) == 1
    assert crowding(2, 1.0) is not None and "run.threads = 1" in str(crowding(2, 1.0))
    assert crowding(1, 1.0) is None and crowding(2, None) is None


@needs_schedstat
def test_a_busy_core_is_measured(busy_core: int) -> None:
    """Threads pinned to the core a busy process holds wait about half their time; the
    busy process takes that core from the free ones."""
    code = (
        "import os, json\n"
        f"os.sched_setaffinity(0, {{{busy_core}}})\n"
        "from dlperf import contention\n"
        "w = contention.Window(); w.start()\n"
        "x = 0\n"
        "for i in range(3_000_000): x += i\n"
        "print(json.dumps(w.stop().to_dict()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    window = json.loads(out.stdout)
    assert window["source"] == "schedstat" and window["cpu_wait_share"] > 0.25, window
    assert contention.free_cores() <= len(contention.usable_cpus()) - 0.5


@needs_schedstat
def test_the_busy_core_is_a_neighbours_not_the_tests_own(busy_core: int) -> None:
    """A window this process measures in its own thread, pinned to the fixture's busy core,
    counts the busy process as another's: the fixture's process is no descendant of the test
    (a CI run read such a window as uncontended while the hog was the test's child)."""
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {busy_core})
    try:
        window = contention.Window()
        # Stretches of about a second alone, until the window is long enough to read others'
        # time: how long that is grows with the processes of this worker's family (its fork
        # server's children counted, each a tick of error), which a busy suite makes many.
        for _ in range(30):
            window.start()
            x = 0
            for i in range(10_000_000):
                x += i
            window.stop()
            measured = window.result()
            if measured is not None and not measured.others_too_short:
                break
    finally:
        os.sched_setaffinity(0, allowed)
    assert measured is not None and measured.others_share is not None, measured
    assert measured.others_share > 0.25 and measured.contended, measured


def pinned_dlperf(
    root: Path, cpus: set[int], threads: str
) -> tuple[Path, list[str], dict[str, str]]:
    """A small digits experiment in `root` with `run.threads = threads`, and the command
    line and environment that run `dlperf` pinned to `cpus` against a store in `root`."""
    exp = root / "exp.toml"
    exp.write_text(
        '[model]\nname = "smallcnn"\n[data]\nname = "digits"\nlimit = 256\n'
        "[train]\nepochs = 1\nbatch_size = 32\nlr = 0.05\n"
        f'[run]\nthreads = {threads}\nwarmup_steps = 1\ncheckpoint = false\nout_dir = "{root}"\n'
    )
    env = {**os.environ, "DLPERF_DB": f"sqlite:///{root / 'dlperf.db'}"}
    pinned = f"import os; os.sched_setaffinity(0, {cpus}); "
    return exp, [sys.executable, "-c", pinned + "from dlperf.__main__ import main; main()"], env


@needs_schedstat
def test_run_on_a_busy_core_is_marked_and_warned(
    busy_core: int, tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    """`dlperf run` sharing its only core with a busy process: the measured CPU wait and the
    mark in its result and in the store; no threads warning (one thread cannot be fewer).
    The run trains in this process's thread, pinned to that core while it runs (a process of
    its own spent most of its time importing torch on half a core); `runs show` reads it
    from the same store (the `cli` fixture's)."""
    exp, _, env = pinned_dlperf(tmp_path, {busy_core}, "1")
    assert env["DLPERF_DB"] == os.environ["DLPERF_DB"]
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {busy_core})
    try:
        done = cli("run", str(exp), "--json")
    finally:
        os.sched_setaffinity(0, allowed)
    assert done.code == 0, done.err
    result = json.loads(done.out)
    assert result["cpu_wait_share"] > 0.25 and result["reliable"] is False
    assert "contended: its threads waited for a CPU" in result["reliability_note"]
    assert result["contention"]["source"] == "schedstat"
    assert "usable cores are free" not in done.err
    shown = cli("runs", "show", str(result["run_id"]))
    assert shown.code == 0, shown.err
    assert "reliability_note" in shown.out or "contended" in shown.out
    assert "cpu_wait_share" in shown.out or "CPU wait" in shown.out


# What threads a run takes, and the warning, are settled before training: one step on a few
# held-out images is enough to see both.
FEWEST = (
    "--set",
    "data.limit=32",
    "--set",
    "data.val_fraction=0.05",
    "--set",
    "data.test_fraction=0.05",
)


@needs_schedstat
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable cores")
def test_auto_threads_leave_the_busy_core(
    busy_core: int, tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    """On two cores with one held by a busy process, run.threads = 2 is warned about before
    training, in one line with the figure and the fix, and run.threads = "auto" takes one
    thread (two threads sharing the free core would wait on each other at every step). Both
    runs train in this process's thread, pinned to the two cores while they run."""
    import torch

    cpus = sorted(os.sched_getaffinity(0))[:2]
    assert busy_core in cpus
    exp, _, env = pinned_dlperf(tmp_path, set(cpus), '"auto"')
    assert env["DLPERF_DB"] == os.environ["DLPERF_DB"]
    allowed, threads = os.sched_getaffinity(0), torch.get_num_threads()
    os.sched_setaffinity(0, set(cpus))
    try:
        auto = cli("run", str(exp), *FEWEST, "--json")
        two = cli("run", str(exp), "--set", "run.threads=2", *FEWEST, "--json")
    finally:
        os.sched_setaffinity(0, allowed)
        torch.set_num_threads(threads)
    assert auto.code == 0, auto.err
    assert json.loads(auto.out)["threads"] == 1
    assert "usable cores are free" not in auto.err
    assert two.code == 0, two.err
    (warning,) = [line for line in two.err.splitlines() if "usable cores are free" in line]
    assert warning.startswith("warning: only ") and "of 2 usable cores are free" in warning
    assert 'set run.threads = 1 (or "auto")' in " ".join(two.err.split())


def test_a_window_too_short_for_the_clock_ticks_does_not_guess_who_took_the_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Host and process CPU times are read in clock ticks (10 ms at 100 Hz): over a few
    dozen milliseconds their difference reads 0% or 100% of a core by chance (issue 38's
    flaky busy-core study: 6 steps in 8-37 ms stretches read a busy neighbour as 0%). Too
    short a window leaves the share unmeasured, and its wait alone decides, said so."""
    monkeypatch.setattr(contention, "usable_cpus", lambda: {0})
    threads = {1: (0, 0)}, {1: (30_000_000, 10_000_000)}  # waited 25%
    start = Reading(0.0, threads[0], 0, None, 0.0, host_busy_s=100.0, family_cpu_s=50.0,
                    family_processes=2)  # fmt: skip
    # the neighbour took half the core, but the ticks fell to the family
    end = Reading(0.04, threads[1], 0, None, 0.0, host_busy_s=100.04, family_cpu_s=50.04,
                  family_processes=2)  # fmt: skip
    short = between(start, end)
    assert short.others_share is None and short.contended
    assert "too short" in short.note() and "0.04 s" in short.note()
    long_end = replace(end, at=2.0, host_busy_s=102.0, family_cpu_s=51.0)
    assert between(start, long_end).others_share == pytest.approx(0.5)


def test_the_share_of_other_processes_spans_all_a_windows_stretches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Five 0.1 s stretches are each too short to tell, but the window from the first
    stretch's start to the last one's end (1 s, its gaps the family's own work) is not:
    the share is read over it once, instead of averaging five guesses."""
    monkeypatch.setattr(contention, "usable_cpus", lambda: {0})
    readings = []
    for i in range(5):  # a neighbour takes 40% of the core throughout, but each
        start, end = 0.2 * i, 0.2 * i + 0.1  # stretch's ticks fall to the family
        lag = 0.04 if i else 0.0
        for at, family in ((start, 50 + 0.6 * start - lag), (end, 50 + 0.6 * end)):
            readings.append(Reading(at, {1: (int(at * 6e8), int(at * 4e8))}, 0, None, 0.0,
                                    host_busy_s=100 + at, family_cpu_s=family,
                                    family_processes=2))  # fmt: skip
    readings[-1] = replace(readings[-1], at=1.0, host_busy_s=101.0, family_cpu_s=50.6)
    feed = iter(readings)
    monkeypatch.setattr(contention, "read", lambda *a, **k: next(feed))
    window = contention.Window()
    for _ in range(5):
        window.start()
        assert window.stop() is not None
    whole = window.result()
    # each stretch alone reads the neighbour as 0%
    assert all(
        between(a, b).others_share in (None, 0.0)
        for a, b in zip(readings[::2], readings[1::2], strict=True)
    )
    assert whole is not None and whole.others_share == pytest.approx(0.4)
    assert whole.contended
