"""Faults of `dlperf scale`: whatever stops a study - Ctrl-C's SIGINT or a scheduler's SIGTERM
to dlperf, SIGKILL of dlperf or of torchrun, a worker killed mid-point, a peer node lost -
every process it started (torchrun, the workers) is gone within STOP_S seconds, as the
process table shows, and the store says what happened. The faults strike once the workers
are past warm-up (the markers they write), however busy the machine is; the stop itself is
what is timed."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.distributed.launch import free_port, worker_pids
from dlperf.procs import alive
from dlperf.store import RunStore
from tests.distributed.test_study import (
    ENDLESS,
    EVENT_S,
    STOP_S,
    WEAK,
    seconds_until_gone,
    start_dlperf,
    stop_study,
    study_processes,
    torchrun_pid,
    wait_training,
    write_experiment,
)


@pytest.fixture
def exp_path(tmp_path: Path) -> Path:
    return write_experiment(tmp_path)


def _output(root: Path) -> tuple[str, str]:
    return (root / "stdout.txt").read_text(), (root / "stderr.txt").read_text()


@pytest.mark.faults  # over 10 s under load: make test-faults
def test_ctrl_c_or_sigterm_stops_every_worker(exp_path: Path, db: str, tmp_path: Path) -> None:
    """Ctrl-C's SIGINT to dlperf mid-point. SIGTERM takes the same path (dlperf.stopping
    raises both as KeyboardInterrupt in the main thread; the exit code is 128 + the first
    signal, 143 for SIGTERM as test_run_faults.py's SIGTERM stop of a run checks): a second
    study to SIGTERM re-proved it at three Python processes' start."""
    sig = signal.SIGINT
    proc = start_dlperf(tmp_path, "scale", str(exp_path), *ENDLESS)
    try:
        elapsed = stop_study(proc, tmp_path, sig)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130, _output(tmp_path)
    assert elapsed <= STOP_S
    (run,) = RunStore.open(db).list_runs(kind="scale")
    assert (run.status, run.error) == ("killed", "interrupted")


@pytest.mark.faults  # over 10 s under load: make test-faults
def test_sigkill_of_dlperf_leaves_no_process(exp_path: Path, db: str, tmp_path: Path) -> None:
    proc = start_dlperf(tmp_path, "scale", str(exp_path), *ENDLESS)
    try:
        elapsed = stop_study(proc, tmp_path, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert elapsed <= STOP_S
    (run,) = RunStore.open(db).list_runs(kind="scale")
    # Nothing ran in dlperf to mark it: stored as running, read as lost (its process is gone).
    assert run.status == "lost"


@pytest.mark.faults  # over 10 s under load: make test-faults
@pytest.mark.parametrize("victim", ["torchrun", "worker"])
def test_a_killed_launch_fails_the_point_and_leaves_nothing(
    victim: str, exp_path: Path, db: str, tmp_path: Path
) -> None:
    """SIGKILL of torchrun, or of rank 1, mid-point: torchrun and the other rank are gone
    within STOP_S, the point fails saying so and, with --on-failure stop, dlperf exits 1
    without starting the next point."""
    args = ["scale", str(exp_path), *ENDLESS, "--comm", "allreduce,fp16", "--on-failure", "stop"]
    proc = start_dlperf(tmp_path, *args, "--json")
    try:
        directory = wait_training(proc, tmp_path)
        launch = study_processes(tmp_path)
        del launch[proc.pid]
        target = torchrun_pid(launch) if victim == "torchrun" else worker_pids(directory)[1]
        os.kill(target, signal.SIGKILL)
        assert seconds_until_gone(tmp_path, list(launch), but=proc.pid) <= STOP_S
        code = proc.wait(timeout=EVENT_S)
    finally:
        proc.kill()
        proc.wait()
    out, err = _output(tmp_path)
    assert code == 1, err
    (row,) = json.loads(out)["rows"]  # stop: the fp16 point never started
    assert row["status"] == "failed"
    if victim == "torchrun":
        assert row["error"].startswith("torchrun failed (killed by SIGKILL)")
    else:
        # rank 1's, not rank 0's, whose collective it cut off
        assert row["error"].startswith("worker rank 1 failed (exit code -9")
        assert "Signal 9 (SIGKILL)" in row["error"], row["error"]
    (run,) = RunStore.open(db).list_runs(kind="scale")
    assert (run.status, run.error) == ("failed", row["error"])


@pytest.mark.faults  # over 10 s under load: make test-faults
def test_a_dead_peer_node_fails_the_point(exp_path: Path, db: str, tmp_path: Path) -> None:
    """Two nodes on loopback, node 1's dlperf SIGKILLed mid-point: its processes die with it,
    so node 0's see their collectives (or torchrun its rendezvous store) fail; node 0 stores
    the point failed and, within STOP_S, no process of either node runs."""
    node = ["scale", str(exp_path), *ENDLESS, "--nnodes", "2", "--rdzv", f"127.0.0.1:{free_port()}"]
    elsewhere = tmp_path / "node1"  # the other "host": its own directory and run store
    elsewhere.mkdir()
    node1_db = f"sqlite:///{elsewhere / 'node1.db'}"
    node1 = start_dlperf(elsewhere, *node, "--node-rank", "1", db=node1_db)
    node0 = start_dlperf(tmp_path, *node, "--node-rank", "0", "--json")
    try:
        wait_training(node0, tmp_path, workers=2)  # one per node, both under tmp_path
        before = study_processes(tmp_path)
        assert len(before) == 6  # per node: dlperf, torchrun, a worker
        node1.kill()
        assert seconds_until_gone(tmp_path, list(before)) <= STOP_S
        code = node0.wait(timeout=EVENT_S)
    finally:
        for proc in (node0, node1):
            proc.kill()
            proc.wait()
    out, err = _output(tmp_path)
    assert code == 1, err
    (row,) = json.loads(out)["rows"]
    assert row["status"] == "failed" and row["error"]
    (run,) = RunStore.open(db).list_runs(kind="scale")
    assert (run.status, run.error) == ("failed", row["error"])


@pytest.mark.faults  # over 10 s under load: make test-faults
@pytest.mark.parametrize(
    ("crash", "error"),
    [
        # Rank 1 dying of SIGKILL, its peer's collective cut off: the point names rank 1 in
        # test_a_killed_launch_fails_the_point_and_leaves_nothing[worker] (one torchrun start).
        ("1:3", ["worker rank 1 failed: RuntimeError: injected crash at step 3", 'File "']),
    ],
)
def test_a_failing_rank_is_blamed_not_its_peer(
    crash: str, error: list[str], cli: Callable, exp_path: Path, store: RunStore, monkeypatch
) -> None:
    """Rank 1 raises (or dies) on its own at step 3; rank 0 then fails too, its collective
    cut off, maybe within the same second (torchrun's resolution): the point names rank 1."""
    monkeypatch.setenv("DLPERF_SCALE_CRASH", crash)
    r = cli("scale", str(exp_path), "--workers", "2", *WEAK, "--steps", "20", "--json")
    assert r.code == 1
    (row,) = json.loads(r.out)["rows"]
    assert row["status"] == "failed"
    assert row["error"].startswith(error[0]) and error[1] in row["error"], row["error"]
    assert not any(alive(pid) for pid in row["worker_pids"])
    (run,) = store.list_runs(kind="scale")
    assert (run.status, run.error) == ("failed", row["error"])
