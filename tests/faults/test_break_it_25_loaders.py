"""Break-it round 25, the signals tester (P4), causes C1 and C2 for the torchvision loader's
DataLoader workers: one killed (SIGKILL, as the OOM killer sends) ended `dlperf run` with
torch's 92-line traceback, and once torch's SIGCHLD handler raised inside the run's marking,
leaving it `running` (C1); a stop signal to the process group while workers were alive
sometimes printed torch's "Exception ignored in _MultiProcessingDataLoaderIter.__del__"
traceback (C2). Each signal waits on what the process has done (an epoch's line, its
workers in the process table), never on a timer."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import dlperf
from dlperf import stopping
from dlperf.store import RunStore
from tests.faults.test_break_it_22_stops import DEADLINE_S, _wait_for

SOURCE = str(Path(dlperf.__file__).parents[1])  # the dlperf under test, in the subprocess too
EXAMPLE = Path(__file__).parents[2] / "examples" / "digits_smallcnn.toml"


def _workers(pid: int) -> list[int]:
    """`pid`'s forked children (DataLoader workers share its command line)."""
    try:
        own = Path(f"/proc/{pid}/cmdline").read_bytes()
        found = " ".join(p.read_text() for p in Path(f"/proc/{pid}/task").glob("*/children"))
    except OSError:  # the process has ended
        return []
    children = []
    for child in found.split():
        with contextlib.suppress(OSError):
            if Path(f"/proc/{child}/cmdline").read_bytes() == own:
                children.append(int(child))
    return children


@contextlib.contextmanager
def _training(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """`dlperf run` of digits through the torchvision loader with 2 workers, for many epochs,
    in a session of its own (a signal to its group reaches the workers, as a terminal's or a
    scheduler's does); killed with its group whatever the test's outcome."""
    env = {**os.environ, "PYTHONPATH": SOURCE, "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable, "-m", "dlperf", "--db", f"sqlite:///{tmp_path / 'runs.db'}", "run",
        str(EXAMPLE), "--set", "run.threads=1", "--set", "train.epochs=200",
        "--set", f"run.out_dir={tmp_path / 'out'}", "--set", "data.loader=torchvision",
        "--set", "data.num_workers=2",
    ]  # fmt: skip
    err = tmp_path / "err.txt"
    with open(err, "w") as stream:
        proc = subprocess.Popen(
            command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=stream,
            start_new_session=True,
        )  # fmt: skip
    try:
        yield proc, err
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _status(tmp_path: Path) -> tuple[str, str | None]:
    store = RunStore.open(f"sqlite:///{tmp_path / 'runs.db'}")
    try:
        (run,) = store.list_runs()
        return run.status, run.error
    finally:
        store.engine.dispose()


@pytest.mark.faults
@pytest.mark.timeout(300)
def test_c1_a_killed_loader_worker_is_one_line_and_the_run_failed(tmp_path: Path) -> None:
    """Before: exit 1 behind torch's traceback ("DataLoader worker (pid(s) N) exited
    unexpectedly"), and once the run left `running` by torch's SIGCHLD handler raising
    inside its marking."""
    killed: list[int] = []
    with _training(tmp_path) as (proc, err):
        _wait_for("the second epoch", lambda: "epoch 1/" in err.read_text())
        # Workers are made anew each epoch: one killed as its epoch ends may not be missed,
        # so another is killed until the run ends.
        while proc.poll() is None:
            _wait_for("a loader worker", lambda: proc.poll() is not None or _workers(proc.pid))
            for worker in _workers(proc.pid)[:1]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker, signal.SIGKILL)
                    killed.append(worker)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=15)
    said = err.read_text()
    lines = [line for line in said.splitlines() if not line.startswith("epoch ")]
    assert proc.returncode == 1, said
    assert "Traceback" not in said, said
    assert len(lines) == 1 and lines[0].startswith("error: "), said
    assert any(f"pid {pid}" in lines[0] for pid in killed), said
    assert "SIGKILL" in lines[0], said
    status, error = _status(tmp_path)
    assert status == "failed" and error is not None and "SIGKILL" in error


@pytest.mark.faults
@pytest.mark.timeout(300)
def test_c2_a_stop_to_the_group_with_loader_workers_alive_is_silent(tmp_path: Path) -> None:
    """Before: 2 stops in 9 printed torch's "Exception ignored in
    _MultiProcessingDataLoaderIter.__del__" traceback (its workers died of the group's
    SIGTERM, and its SIGCHLD handler raised in the iterator's finaliser)."""
    with _training(tmp_path) as (proc, err):
        _wait_for("the second epoch", lambda: "epoch 1/" in err.read_text())
        _wait_for("2 loader workers", lambda: len(_workers(proc.pid)) == 2)
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=DEADLINE_S)
    said = err.read_text()
    lines = [line for line in said.splitlines() if not line.startswith("epoch ")]
    assert proc.returncode == 143, said
    assert "Traceback" not in said and "Exception ignored" not in said, said
    assert len(lines) <= 1, said
    assert _status(tmp_path)[0] == "killed"


class _Teardown:
    """An object whose finaliser fails, as a DataLoader iterator's does when its workers died
    of the stop (RuntimeError) or the stop landed in its __init__ (AttributeError)."""

    def __del__(self) -> None:
        raise RuntimeError("DataLoader worker (pid 1) is killed by signal: Terminated.")


def _finalised() -> str:
    """What Python's unraisable hook printed for one failing finaliser."""
    stream = io.StringIO()
    with contextlib.redirect_stderr(stream):
        _Teardown()  # no reference kept: finalised at once
    return stream.getvalue()


def test_c2_a_finalisers_error_after_a_stop_is_not_printed() -> None:
    """Before: only a KeyboardInterrupt was held back; any other error a finaliser raised
    once the stop had come (the loader's teardown) was printed with its traceback."""
    saved_hook = sys.unraisablehook
    saved = {sig: signal.getsignal(sig) for sig in stopping.STOP_SIGNALS}
    try:
        sys.unraisablehook = sys.__unraisablehook__  # Python's, which prints (not pytest's)
        stopping.install()
        assert "RuntimeError: DataLoader worker" in _finalised()  # no stop: printed as ever
        stopping.noted(signal.SIGTERM)
        assert _finalised() == ""
    finally:
        stopping.install()  # a fresh state: no stop requested
        sys.unraisablehook = saved_hook
        for sig, handler in saved.items():
            signal.signal(sig, handler)
