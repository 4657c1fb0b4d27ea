"""`dlperf report` stopped midway, as a real process: SIGKILL must take its drawing workers
with it, and Ctrl-C must leave no partial site. Each waits on what the report has done (its
workers started, a page drawn) before the signal, however busy the machine is."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

import dlperf
from dlperf.procs import alive
from dlperf.store import RunStore

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

RUNS = 30  # pages enough that the report is still drawing when the signal comes
DEADLINE_S = 120.0  # generous: the machine may be shared
T = TypeVar("T")
SOURCE = str(Path(dlperf.__file__).parents[1])  # the dlperf under test, in the subprocess too


def _report(tmp_path: Path) -> subprocess.Popen[str]:
    store = RunStore.open(f"sqlite:///{tmp_path / 'dlperf.db'}")
    for i in range(RUNS):
        run_id = store.create_run(f"r{i}", "run", {})
        store.log_metrics(run_id, [("train/loss", step, 1 / step) for step in range(1, 51)])
        store.finish_run(run_id, "finished")
    env = {**os.environ, "DLPERF_DB": f"sqlite:///{tmp_path / 'dlperf.db'}",
           "PYTHONPATH": SOURCE}  # fmt: skip
    command = [sys.executable, "-m", "dlperf", "report", "--last", str(RUNS), "--out", "site"]
    # Output to files, not pipes: workers that outlive the report would hold a pipe open.
    with open(tmp_path / "out.txt", "w") as out, open(tmp_path / "err.txt", "w") as err:
        return subprocess.Popen(command, cwd=tmp_path, env=env, stdout=out, stderr=err)


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _wait_for(what: str, check: Callable[[], T]) -> T:
    """`check()` once it is true (polled), or the test fails after DEADLINE_S."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    pytest.fail(f"waited {DEADLINE_S} s for {what}")


@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2
    or not Path(f"/proc/self/task/{os.getpid()}/children").exists(),
    reason="2 drawing workers need 2 usable cores, and finding them Linux's /proc",
)
def test_sigkill_takes_the_drawing_workers_with_it(tmp_path: Path) -> None:
    """Before: the 2 workers lived on with parent pid 1, still there 40 s later."""
    report = _report(tmp_path)
    workers: list[int] = []
    try:
        workers = _wait_for(
            "2 drawing workers", lambda: _children(report.pid)[1:] and _children(report.pid)
        )
        report.kill()
        report.wait(timeout=DEADLINE_S)
        _wait_for("the workers to die", lambda: not any(map(alive, workers)))
    finally:
        report.kill()
        report.wait()
        for pid in filter(alive, workers):  # a failed test leaves nothing running either
            os.kill(pid, signal.SIGKILL)


def test_ctrl_c_leaves_no_partial_site(tmp_path: Path) -> None:
    """Before: 4 pages of the 31 were left in the site's directory."""
    report = _report(tmp_path)
    try:
        _wait_for("a page drawn", lambda: any((tmp_path / "site").rglob("*.html")))
        report.send_signal(signal.SIGINT)
        report.wait(timeout=DEADLINE_S)
    finally:
        report.kill()
        report.wait()
    assert report.returncode == 130, (tmp_path / "err.txt").read_text()
    assert not (tmp_path / "site").exists(), list((tmp_path / "site").rglob("*"))
