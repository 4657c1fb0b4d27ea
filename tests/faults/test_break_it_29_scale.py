"""Break-it round 29 (signals, caps, load), `dlperf scale`:
C3. A worker SIGSTOPped mid-point held its peer in the all-reduce and the study waited, silent,
    for gloo's 30-minute timeout: now a process of the launch that stays stopped (state T)
    past a bound that grows with the point's warm-up fails the point in one line naming it,
    its pid and its state, and no process of the study is left."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.distributed import launch
from dlperf.procs import alive
from dlperf.store import RunStore
from tests.distributed.test_study import ENDLESS, EVENT_S, study_processes, write_experiment

BOUND_S = 2.0  # the test's bound for a stopped worker (dlperf's own is a minute or more)


def _stop_rank_1(root: Path, stopped: list[int], done: threading.Event) -> None:
    """SIGSTOP rank 1 once it is past its warm-up (its marker), its pid into `stopped`."""
    deadline = time.monotonic() + EVENT_S
    while not done.is_set() and time.monotonic() < deadline:
        marks = list(root.glob("dlperf_runs/**/p0/rank-1.training"))
        if marks:
            pid = int(marks[0].with_suffix(".pid").read_text())
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
            return
        time.sleep(0.05)


@pytest.mark.faults  # over 10 s under load: make test-faults
def test_a_stopped_worker_fails_the_point_in_one_line(
    cli: Callable, tmp_path: Path, store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(launch, "STOPPED_MIN_S", BOUND_S)
    monkeypatch.setattr(launch, "STOPPED_WARMUPS", 0)
    stopped: list[int] = []
    done = threading.Event()
    stopper = threading.Thread(target=_stop_rank_1, args=(tmp_path, stopped, done))
    stopper.start()
    try:
        r = cli("scale", str(write_experiment(tmp_path)), *ENDLESS, "--json")
    finally:
        done.set()
        stopper.join()
        for pid in stopped:  # a failed test leaves no stopped worker behind
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    (pid,) = stopped
    assert r.code == 1, r.err
    (row,) = json.loads(r.out)["rows"]
    said = f"worker rank 1 (pid {pid}) was stopped (state T: SIGSTOP, kill -STOP or Ctrl-Z) for "
    assert row["status"] == "failed" and row["error"].startswith(said), row["error"]
    assert row["error"].endswith(" s while its peers waited for it"), row["error"]
    assert sum(said in line for line in r.err.splitlines()) == 1, r.err
    assert "Traceback" not in r.err
    (run,) = store.list_runs(kind="scale")
    assert (run.status, run.error) == ("failed", row["error"])
    assert not alive(pid) and study_processes(tmp_path) == {}


@pytest.mark.parametrize(
    ("warmups_s", "bound_s"), [([], 60.0), ([3.0], 60.0), ([30.0, 12.0], 300.0)]
)
def test_the_bound_for_a_stopped_process_grows_with_the_warm_up(
    tmp_path: Path, warmups_s: list[float], bound_s: float
) -> None:
    """No worker past its warm-up: a minute; then ten warm-ups (from a rank's pid file to its
    marker, the longest of the ranks'), never under the minute."""
    for rank, warmup_s in enumerate(warmups_s):
        pid, mark = tmp_path / f"rank-{rank}.pid", tmp_path / f"rank-{rank}.training"
        pid.write_text("1")
        mark.write_text("")
        started = time.time() - 100 + rank  # the ranks start at other times
        os.utime(pid, (started, started))
        os.utime(mark, (started + warmup_s, started + warmup_s))
    assert launch.stopped_bound_s(tmp_path) == pytest.approx(bound_s)
