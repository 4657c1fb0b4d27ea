"""Break-it round 38, the cause it left (T2 C8): `dlperf.track` wrote the rows a call left
held only at the next call, so a loop SIGKILLed during a long pause after them (an
evaluation, a checkpoint's write) lost the rows logged in the second before it. A timer now
writes them FLUSH_SECONDS after, when no call has."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dlperf

# Logs one row, says so, then pauses as a long evaluation would, until killed.
_PAUSING_CHILD = """
import json, sys, threading
import dlperf
with dlperf.track("paused", store=sys.argv[1]) as run:
    run.log(1, loss=0.5)
    with open(sys.argv[2], "w") as f:
        json.dump(run.id, f)
    threading.Event().wait()
"""


def _steps(db: Path, run_id: int) -> list[int]:
    stored = dlperf.Store(str(db))
    if "train/loss" not in stored.metric_keys(run_id):
        return []
    return [step for step, _ in stored.metrics(run_id, "loss")]


def test_rows_held_in_a_pause_are_written_before_the_kill(tmp_path: Path) -> None:
    db, marker = tmp_path / "t.db", tmp_path / "logged.json"
    child = subprocess.Popen([sys.executable, "-c", _PAUSING_CHILD, str(db), str(marker)])
    try:
        deadline = time.monotonic() + 120  # generous: a loaded machine, torch's import
        while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), f"the child wrote no marker (exit {child.poll()})"
        run_id = json.loads(marker.read_text())
        # The row is written while the child pauses, with no further call: waited for as the
        # event it is (60 s against a 1 s timer); before the fix it never came.
        deadline = time.monotonic() + 60
        while not _steps(db, run_id) and time.monotonic() < deadline:
            time.sleep(0.1)
        child.send_signal(signal.SIGKILL)
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert _steps(db, run_id) == [1]


def test_the_timer_ends_with_the_block(tmp_path: Path) -> None:
    db = str(tmp_path / "t.db")
    with dlperf.track("t", store=db) as run:
        run.log(1, loss=0.5)  # the first call: held, a timer set
        timer = run._timer
        assert timer is not None and timer.daemon
    timer.join(timeout=30)  # the block's end cancelled it: it ends without a write
    assert not timer.is_alive() and run._timer is None
    assert _steps(Path(db), run.id) == [1]  # written once, by the block's end
