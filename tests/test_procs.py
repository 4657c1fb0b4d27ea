"""The supervisor of the processes dlperf starts: a timeout stops a child and what it left in
its process group, and how a child ended reads the same for every launcher."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

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


def test_how_a_process_ended() -> None:
    assert how(0) == "exit code 0" and how(2) == "exit code 2"
    assert how(-9) == "killed by SIGKILL" and how(-signal.SIGRTMIN - 1).startswith("killed by")
