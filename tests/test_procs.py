"""The supervisor of the processes dlperf starts: a timeout stops a child and what it left in
its process group, and how a child ended reads the same for every launcher."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dlperf import procs, stopping
from dlperf.procs import STOP_GRACE_S, Supervisor, alive, how


@pytest.mark.skipif(sys.platform != "linux", reason="process groups and /proc as on Linux")
def test_a_timeout_stops_the_child_and_its_group(tmp_path: Path) -> None:
    pid = tmp_path / "pid"
    # The shell ignores SIGTERM, and its sleep is in its group: both need the SIGKILL.
    script = f"trap '' TERM; sleep 600 & echo $! > {pid}.tmp && mv {pid}.tmp {pid}; wait"
    started = time.monotonic()
    with pytest.raises(TimeoutError), Supervisor() as supervisor:
        child = supervisor.start(["/bin/sh", "-c", script], tmp_path / "log")
        while not pid.exists():
            time.sleep(0.05)
        supervisor.wait(timeout_s=0.5)
    assert time.monotonic() - started >= STOP_GRACE_S  # SIGTERM first, then the grace
    assert child.returncode == -signal.SIGKILL
    sleeper = int(pid.read_text())
    deadline = time.monotonic() + 10
    while alive(sleeper):
        assert time.monotonic() < deadline, "the child's group outlived the stop"
        time.sleep(0.05)


def test_wait_returns_at_the_first_failure(tmp_path: Path) -> None:
    with Supervisor() as supervisor:
        supervisor.start([sys.executable, "-c", "import time; time.sleep(600)"], tmp_path / "a")
        supervisor.start([sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "b")
        assert supervisor.wait(timeout_s=120) == [None, 3]
        supervisor.stop()
    assert [c.returncode for c in supervisor.children] == [-signal.SIGTERM, 3]


def test_a_stop_signal_as_a_child_starts_still_stops_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The signal lands once the child runs and before `start` returns: it waits until the
    child is on the list that the stop signals, so the child is stopped with the rest."""
    popen = subprocess.Popen

    def popen_then_signal(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        child = popen(*args, **kwargs)
        signal.raise_signal(signal.SIGTERM)
        return child

    stopping.install()  # conftest puts pytest's handlers back after the test
    monkeypatch.setattr(procs.subprocess, "Popen", popen_then_signal)
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    with pytest.raises(KeyboardInterrupt), Supervisor() as supervisor:
        supervisor.start(sleeper, tmp_path / "log")
    [child] = supervisor.children
    assert child.returncode == -signal.SIGTERM


def test_how_a_process_ended() -> None:
    assert how(0) == "exit code 0" and how(2) == "exit code 2"
    assert how(-9) == "killed by SIGKILL" and how(-signal.SIGRTMIN - 1).startswith("killed by")
