"""dlperf.stopping: a stop signal raises once, waits out shielded blocks, and ends the
command with 128 + the signal, in this process (the signal raised here with
`signal.raise_signal`, whose handler runs before the call returns) and in real ones."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf import stopping
from dlperf.procs import alive
from dlperf.store import RunStore
from tests.conftest import TINY, CliResult
from tests.hooks import hook_env, install

DEADLINE_S = 300


@pytest.fixture(autouse=True)
def handlers() -> None:
    """stopping's handlers for the test (conftest puts pytest's back after it)."""
    stopping.install()


def test_the_first_signal_raises_and_sets_the_exit_code() -> None:
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGTERM)
    assert stopping.exit_code(0) == 143


def test_later_signals_raise_again_but_the_exit_code_is_the_firsts() -> None:
    """Outside a shielded block: a stop that a library swallowed is not lost."""
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGTERM)
    assert stopping.exit_code(0) == 130  # the first signal's
    assert stopping.requested()


def test_a_second_signal_during_a_stops_cleanup_does_not_cut_it() -> None:
    done = []
    with pytest.raises(KeyboardInterrupt) as caught:
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt as first:
            with stopping.shielded():
                signal.raise_signal(signal.SIGINT)  # a second Ctrl-C
                done.append("cleaned up")
            raise RuntimeError("not reached") from first
    assert done == ["cleaned up"]
    assert caught.value.__context__ is not None  # the second, raised as the cleanup ended


def test_a_signal_in_a_shielded_block_that_an_interrupt_leaves_is_not_raised_again() -> None:
    with pytest.raises(KeyboardInterrupt) as caught, stopping.shielded():
        signal.raise_signal(signal.SIGTERM)  # waits
        raise KeyboardInterrupt("already stopping")
    assert str(caught.value) == "already stopping"


def test_a_shielded_block_is_not_cut_and_raises_at_its_end() -> None:
    done = []
    with pytest.raises(KeyboardInterrupt), stopping.shielded():
        with stopping.shielded():
            signal.raise_signal(signal.SIGTERM)
            done.append("inner")
        done.append("outer")  # nested: the outermost block's end raises
    assert done == ["inner", "outer"]


def test_a_failed_shielded_block_raises_the_interrupt_from_its_error() -> None:
    with pytest.raises(KeyboardInterrupt) as caught, stopping.shielded():
        signal.raise_signal(signal.SIGINT)
        raise ValueError("the block's own failure")
    assert isinstance(caught.value.__context__, ValueError)


def test_unshielded_raises_a_pending_signal_as_it_begins() -> None:
    done = []
    with stopping.shielded():
        signal.raise_signal(signal.SIGTERM)
        with pytest.raises(KeyboardInterrupt), stopping.unshielded():
            done.append("body")
        done.append("after")  # shielded again, and the one interrupt is spent
    assert done == ["after"]


def test_run_exits_128_plus_the_signal_or_the_commands_code() -> None:
    def stopped() -> int:
        signal.raise_signal(signal.SIGTERM)
        return 0

    with pytest.raises(SystemExit) as caught:
        stopping.run(stopped)
    assert caught.value.code == 143
    with pytest.raises(SystemExit) as caught:
        stopping.run(lambda: 3, process=True)  # no stop: it leaves as sys.exit does
    assert caught.value.code == 3
    # Python's shutdown would put the default actions back for handled signals: a late one
    # would end the process by it (exit -15 or -2).
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN


def test_sighup_stops_unless_it_was_ignored_at_start() -> None:
    """A closed terminal or ssh session (SIGHUP) stops a command as SIGTERM does, exit 129;
    under `nohup` (SIGHUP ignored, inherited) it stays ignored, as nohup's user asked."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    stopping.install()
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    assert signal.SIGHUP not in stopping.taken()
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    stopping.install()
    assert signal.SIGHUP in stopping.taken()

    def hung_up() -> int:
        signal.raise_signal(signal.SIGHUP)
        return 0

    with pytest.raises(SystemExit) as caught:
        stopping.run(hung_up)
    assert caught.value.code == 129


def test_a_signal_while_a_run_is_made_or_marked_leaves_it_marked(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The windows that once left a run `running`: after its row was written and before its
    recording began, and while it was being marked finished."""
    create = store.create_run

    def create_then_signal(*args: object, **kwargs: object) -> int:
        run_id = create(*args, **kwargs)  # type: ignore[arg-type]
        signal.raise_signal(signal.SIGTERM)
        return run_id

    monkeypatch.setattr(store, "create_run", create_then_signal)
    body = []
    with pytest.raises(KeyboardInterrupt), store.new_run("a", "run", {}):
        body.append("ran")
    assert body == []  # the signal is raised as the body begins
    [run] = store.list_runs()
    assert (run.status, run.error) == ("killed", "interrupted")

    stopping.install()
    monkeypatch.undo()
    finish = store.finish_run

    def signal_then_finish(*args: object, **kwargs: object) -> None:
        signal.raise_signal(signal.SIGINT)
        finish(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "finish_run", signal_then_finish)
    with pytest.raises(KeyboardInterrupt), store.new_run("b", "run", {}):
        pass
    assert store.get_run(2).status == "finished"  # its work was done; then the stop


def test_an_interrupt_out_of_exec_still_exits_with_the_code(tmp_path: Path) -> None:
    """CPython up to 3.13 marks a KeyboardInterrupt that escapes `exec` of a string as
    unhandled even when a caller handles it, and ends the process by SIGINT (-2, no
    traceback): how a SIGTERMed `staleness` once exited in CI. A real `dlperf run`, SIGTERMed
    from such code at step 2, exits 143 with its run `killed`. (Which code each signal gives
    is the same mapping in and out of `exec`: SIGINT's 130 and SIGHUP's 129 are checked in
    this process above, and from real processes by tests/sweep/test_sweep.py's SIGINT and
    test_sighup_stops_the_children_as_sigterm_does.)"""
    (tmp_path / "exp.toml").write_text(TINY.format(epochs=50))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "dlperf", "--db", db, "run", "exp.toml"],
        cwd=tmp_path,
        env={**os.environ, **hook_env("signal_in_exec", "2:TERM")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, stderr = proc.communicate(timeout=DEADLINE_S)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "Traceback" not in stderr
    store = RunStore.open(db)
    assert [(r.status, r.error) for r in store.list_runs()] == [("killed", "interrupted")]


def test_a_run_started_with_sighup_ignored_trains_through_it(
    cli: Callable[..., CliResult], store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`nohup dlperf run ...`: the run sends itself SIGHUP at step 2 (as a closed terminal
    would) and finishes, exit 0, its run `finished`. Through the real entry point in this
    process: SIGHUP ignored as the command starts is all that nohup leaves a new process (exec
    keeps an ignored signal ignored). A real process's SIGHUP, not ignored, is
    test_sighup_stops_the_children_as_sigterm_does's."""
    # 256 training images: an epoch of 8 steps, SIGHUP at step 2 of them
    limited = TINY.format(epochs=1).replace("\n[train]", "\nlimit = 256\n[train]")
    (tmp_path / "exp.toml").write_text(limited)
    install(monkeypatch, "signal_in_exec", "2:HUP")
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # what nohup does (conftest restores it)
    result = cli("run", str(tmp_path / "exp.toml"))
    assert result.code == 0, result.err
    assert [r.status for r in store.list_runs()] == ["finished"]


POOL_WORKER = """
import multiprocessing, time
from dlperf import stopping
def command():
    child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(600,))
    child.start()  # a pool's worker that waits for work that never comes
    print(child.pid, flush=True)
    time.sleep(600)
    return 0
stopping.run(command, process=True)
"""


def test_a_stopped_command_does_not_wait_for_its_pool_workers() -> None:
    """multiprocessing's exit handler joins every child it started: one left waiting (the
    report's drawing pool, its shutdown cut by a second Ctrl-C) held the exit for ever."""
    proc = subprocess.Popen(
        [sys.executable, "-c", POOL_WORKER], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        worker = int(proc.stdout.readline())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=DEADLINE_S) == 143
    finally:
        proc.kill()
        proc.wait()
    assert not alive(worker)


SUPERVISED = """
import atexit, sys, time
from pathlib import Path
from dlperf import stopping
from dlperf.procs import Supervisor
supervisor = Supervisor()
sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
def command():
    with supervisor:
        child = supervisor.start(sleeper, Path(sys.argv[1]))
        print(child.pid, flush=True)
        time.sleep(600)
    return 0
atexit.register(lambda: print(supervisor.children[0].returncode, flush=True))
stopping.run(command, process=True)
"""


def test_sighup_stops_the_children_as_sigterm_does(tmp_path: Path) -> None:
    """SIGHUP to a command with a child (a sweep worker, torchrun): exit 129, the child
    stopped by the supervisor's SIGTERM, not left to die with its parent (before: exit -1)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SUPERVISED, str(tmp_path / "child.txt")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        proc.send_signal(signal.SIGHUP)
        assert proc.wait(timeout=DEADLINE_S) == 129
        assert proc.stdout.read().split() == [str(-signal.SIGTERM)]
    finally:
        proc.kill()
        proc.wait()
    assert not alive(child)


@pytest.mark.skipif(not hasattr(signal, "SIGXCPU"), reason="SIGXCPU is POSIX's")
def test_a_run_stopped_by_the_cpu_time_limit_stores_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stop's run stores "interrupted"; one a CPU-time limit's SIGXCPU stopped stores the
    limit's line (it stored "interrupted" too, and the record did not say why)."""
    assert stopping.stopped_by() == "interrupted"
    monkeypatch.setattr(stopping._state, "received", signal.SIGXCPU)
    monkeypatch.setattr(stopping._state, "cpu_s", 6.0)
    said = stopping.stopped_by()
    assert not said.startswith("error:") and "SIGXCPU" in said, said
