"""The fourteenth break-it round (issue 41: "every mistake one line, every count right"), C7:
a run stopped and continued.

`dlperf run` stopped by SIGSTOP (or Ctrl-Z's SIGTSTP) for 20 s mid-training, then continued
by SIGCONT, counted the 20 s as training: throughput fell 5,173 -> 1,368 samples/s and
train_time_s rose 7.4 -> 28.0 s, and nothing said so (the host was busy, so the reliability note
blamed other processes; on a quiet host a stopped process is not runnable, is not counted as
waiting for a CPU, and the numbers would simply have been wrong). A run now counts its
continuations (a SIGCONT handler, chained to any earlier one, while it trains) and measures
each epoch's stopped time (the smaller of its wall time less the busiest thread's time on or
waiting for a CPU, from schedstat, and the time from the last step's end to the
continuation); an epoch stopped for 1% of its wall time or more marks the run
unreliable, its note naming the epoch(s) and about how long, its figures (`stops`,
`stopped_s`, `stopped_in`) stored with the run's contention."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import FrameType

import pytest

from dlperf import contention
from dlperf.contention import Contention, judge
from dlperf.engine.hooks import HOOKS_ENV, StepEnd
from dlperf.paths import atomic_write
from dlperf.procs import proc_stat
from tests.conftest import TINY, CliResult
from tests.forked import dlperf_process

DEADLINE_S = 300
HOLD_ENV = "DLPERF_TEST_HOLD_AT_STEP"
PAUSE_S = 1.0  # how long the test keeps the run stopped
LIMITED = ("--set", "data.limit=256")  # 8 steps an epoch


class HoldAt:
    """A test hook (DLPERF_HOOKS=tests.faults.test_break_it_14_stopped:HoldAt): when global step
    N is done, write DIR/held and spin, runnable, until DIR/go exists, so that a test can stop
    the run inside a known epoch however busy the machine is. It spins rather than sleeps: a
    sleeping thread is neither on nor waiting for a CPU, which is what a stop looks like."""

    def __init__(self) -> None:
        step, _, folder = os.environ[HOLD_ENV].partition(":")
        self.step, self.folder = int(step), Path(folder)

    def start(self, trainer: str, model: object) -> None:
        pass

    def step_end(self, event: StepEnd) -> None:
        if event.step != self.step:
            return
        atomic_write(self.folder / "held", f"{os.getpid()}\n")
        go, deadline = self.folder / "go", time.monotonic() + DEADLINE_S
        while not go.exists() and time.monotonic() < deadline:
            pass


def _wait_for(path: Path, proc: BaseProcess) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not path.exists():
        assert proc.is_alive(), f"the run ended ({proc.exitcode}) before {path.name}"
        assert time.monotonic() < deadline, f"no {path.name} after {DEADLINE_S} s"
        time.sleep(0.02)


def _wait_stopped(proc: BaseProcess) -> None:
    """Until the kernel shows `proc` stopped: on a busy machine a process waiting for a CPU
    takes a SIGSTOP only once it runs, and a SIGCONT sent before that cancels the stop (the
    run then was never stopped, and rightly said only that it waited for a CPU)."""
    deadline = time.monotonic() + DEADLINE_S
    assert proc.pid is not None
    while (stat := proc_stat(proc.pid)) is None or stat[0] not in "Tt":
        assert proc.is_alive(), f"the run ended ({proc.exitcode}) before it stopped"
        assert time.monotonic() < deadline, f"not stopped after {DEADLINE_S} s"
        time.sleep(0.01)


@pytest.mark.faults  # a real run in a process of its own: 10-25 s on a busy machine
def test_a_run_stopped_and_continued_says_so_and_for_how_long(
    cli: Callable[..., CliResult], db: str, tmp_path: Path
) -> None:
    (tmp_path / "exp.toml").write_text(TINY.format(epochs=2))
    err, stdout = tmp_path / "stderr.txt", tmp_path / "stdout.json"
    with pytest.MonkeyPatch.context() as env:  # the hook is the child's alone
        env.setenv(HOOKS_ENV, f"{__name__}:HoldAt")
        env.setenv(HOLD_ENV, f"5:{tmp_path}")  # in epoch 1 (8 steps), past its 2 warm-up steps
        # forked in tmp_path (db's cwd): a real process for the stop, no fresh interpreter
        proc = dlperf_process(["--db", db, "run", "exp.toml", *LIMITED, "--json"], err, stdout)
    assert proc.pid is not None
    try:
        _wait_for(tmp_path / "held", proc)
        os.kill(proc.pid, signal.SIGSTOP)
        _wait_stopped(proc)
        before = time.monotonic()
        time.sleep(PAUSE_S)  # the stop's length, not a wait for the run
        os.kill(proc.pid, signal.SIGCONT)
        at_most = time.monotonic() - before
        (tmp_path / "go").write_text("")
        proc.join(timeout=DEADLINE_S)
    finally:
        proc.kill()
        proc.join()
    assert proc.exitcode == 0, err.read_text()
    result = json.loads(stdout.read_text())
    # before: reliable true (on a quiet host), no word of the stop, its seconds in train_time_s
    assert result["reliable"] is False
    note = result["reliability_note"]
    assert note.startswith("stopped: the process was stopped (SIGSTOP or Ctrl-Z) and continued")
    assert "in epoch 1: " in note and "epoch 2" not in note
    waited = result["contention"]
    assert waited["stops"] == 1 and waited["stopped_in"] == ["epoch 1"]
    assert PAUSE_S * 0.9 <= waited["stopped_s"] <= at_most + 1.0, waited
    assert f"for about {waited['stopped_s']:.1f} s" in note
    # the note is the run's, as `runs show` tells it
    shown = cli("runs", "show", "1")
    assert shown.code == 0, shown.err
    assert "stopped (SIGSTOP or Ctrl-Z)" in " ".join(shown.out.split())
    stored = json.loads(cli("runs", "show", "1", "--json").out)
    assert stored["summary"]["contention"]["stopped_in"] == ["epoch 1"]
    # and the doctor names it (before: no finding on a quiet host)
    findings = json.loads(cli("doctor", "1", "--json").out)["findings"]
    (stop,) = [f for f in findings if f["rule"] == "stopped"]
    assert stop["severity"] == "warning" and "in epoch 1" in stop["evidence"], stop
    assert stop["figures"]["stopped_in"] == ["epoch 1"], stop


def _stopped_then_continued(seconds: float) -> None:
    """Stop this process (SIGSTOP) and have a child continue it once it has been seen stopped
    for `seconds`."""
    code = (
        "import os, signal, sys, time\n"
        "pid, deadline = int(sys.argv[1]), time.monotonic() + 60\n"
        "while open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[0] != 'T':\n"
        "    if time.monotonic() > deadline: break\n"
        "    time.sleep(0.01)\n"
        f"time.sleep({seconds})\n"
        "os.kill(pid, signal.SIGCONT)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code, str(os.getpid())])
    os.kill(os.getpid(), signal.SIGSTOP)
    child.wait(timeout=DEADLINE_S)


def test_the_stopwatch_measures_a_stop_and_names_its_span() -> None:
    watch = contention.Stopwatch()
    with contention.watching_stops():
        watch.start()
        watch.stop("epoch 1")
        watch.start()
        _stopped_then_continued(0.5)
        watch.stop("epoch 2")
    stops, seconds, where = watch.result()
    assert (stops, where) == (1, ("epoch 2",))
    assert seconds is not None and 0.45 <= seconds < 30


def test_a_sleep_before_the_last_step_is_not_counted_as_the_stop() -> None:
    """A thread asleep (a GPU sync, OpenMP threads waiting on each other on a busy host) is
    neither on nor waiting for a CPU, as if stopped: the time since the last step's end bounds
    the stop more tightly there."""
    watch = contention.Stopwatch()
    with contention.watching_stops():
        watch.start()
        time.sleep(1.0)
        contention.beat()  # a step ended
        _stopped_then_continued(0.3)
        watch.stop("epoch 1")
    stops, seconds, _ = watch.result()
    assert stops == 1
    assert seconds is not None and 0.25 <= seconds < 1.0  # schedstat alone: 1.3 s or more


def test_a_span_that_sleeps_is_not_a_stop() -> None:
    """Without a continuation nothing is counted, however long the threads slept: a run that
    was not stopped is judged as before."""
    watch = contention.Stopwatch()
    with contention.watching_stops():
        watch.start()
        time.sleep(0.2)
        watch.stop("epoch 1")
    assert watch.result() == (0, None, ())


def test_a_continue_without_a_stop_does_not_mark_the_span() -> None:
    watch = contention.Stopwatch()
    with contention.watching_stops():
        watch.start()
        # A step ends just before the continuation, so the span since that beat (what a stop
        # may have taken at most) is the signal's own microseconds: start() reads every
        # thread's schedstat after its beat, and a busy host preempting the test there made
        # that time (and the span's 1%) look like a stop
        contention.beat()
        os.kill(os.getpid(), signal.SIGCONT)
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:  # runnable: on or waiting for a CPU
            pass
        watch.stop("epoch 1")
    stops, seconds, where = watch.result()
    assert stops == 1 and where == ()  # under 1% of the span: not a stop worth a mark
    assert seconds is not None and seconds < 0.002


def test_watching_stops_chains_the_handler_there_and_restores_it() -> None:
    seen: list[int] = []

    def earlier(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)

    previous = signal.signal(signal.SIGCONT, earlier)
    try:
        counted = contention.continued()
        with contention.watching_stops(), contention.watching_stops():  # nested: counts once
            os.kill(os.getpid(), signal.SIGCONT)
            for _ in range(1000):  # the handler runs at the next bytecode
                if seen:
                    break
        assert seen == [signal.SIGCONT]
        assert contention.continued() == counted + 1
        assert signal.getsignal(signal.SIGCONT) is earlier
    finally:
        signal.signal(signal.SIGCONT, previous)


def test_watching_stops_off_the_main_thread_counts_nothing() -> None:
    """Python takes signals in the main thread only (the API run from a thread)."""
    errors: list[BaseException] = []

    def watch() -> None:
        try:
            with contention.watching_stops():
                pass
        except BaseException as error:  # what the thread would have raised
            errors.append(error)

    thread = threading.Thread(target=watch)
    thread.start()
    thread.join(timeout=DEADLINE_S)
    assert errors == []
    assert signal.getsignal(signal.SIGCONT) == signal.SIG_DFL


def test_the_stop_is_the_marks_first_clause_and_survives_the_store() -> None:
    window = Contention(
        wall_s=28.0,
        cpu_wait_share=0.5,
        source="schedstat",
        others_share=0.92,
        stops=1,
        stopped_s=20.04,
        stopped_in=("epoch 17",),
    )
    note = judge(window).note
    assert note == (
        "stopped: the process was stopped (SIGSTOP or Ctrl-Z) and continued once, for about "
        "20.0 s in epoch 17: its times count that as training; contended: its threads waited "
        "for a CPU 50% of their runnable time, other processes took 92% of the cores "
        "(per-thread run delay)"
    )
    again = Contention.stored(json.loads(json.dumps(window.to_dict())))
    assert judge(again).note == note
    unmeasured = Contention(1.0, 0.0, "loadavg", stops=2, stopped_in=("epoch 1", "epoch 3"))
    assert judge(unmeasured).note == (
        "stopped: the process was stopped (SIGSTOP or Ctrl-Z) and continued 2 times, for a "
        "time schedstat could not measure, in epoch 1, epoch 3: its times count that as training"
    )
    # a run that was not stopped is judged as before
    assert judge(Contention(1.0, 0.0, "schedstat")).reliable


@pytest.fixture(autouse=True)
def _sigcont_as_it_was() -> Iterator[None]:
    """Each test leaves SIGCONT's handler as it found it (Python's default)."""
    assert signal.getsignal(signal.SIGCONT) == signal.SIG_DFL
    yield
    assert signal.getsignal(signal.SIGCONT) == signal.SIG_DFL
