"""Break-it round 61, U2 causes 1 and 2: a sweep whose point's run is deleted under it.

Before: a point's run deleted (`dlperf runs delete`) while its sweep still ran was ranked from
the sweep's own results: the sweep named the deleted run its winner (exit 0, the store holding
only the other run), or its end read the run and failed "error: no run 1 in the store", exit 2,
the points that finished unranked and no figures drawn. And `runs delete --force` of the point
a `--jobs 1` sweep trains in its own process stopped the whole sweep, whose only line was
"sweep study 1 stopped; continue it ...", no word of the delete that stopped it.

Now the sweep's end leaves a point whose run is gone out of the ranking in one warning line
and exits 1, as for a point that did not finish; and a `--jobs 1` sweep a delete stopped says so
first, naming the delete's pid and the run it deletes (the sweep still stops: its point
trains in its own process). Under `--jobs N` the delete stops that point's worker alone, as
before, but the sweep recorded the point killed in a run it made anew for it ("sweep worker
stopped by SIGTERM"), the deleted point back in the store: now the point is said to be
stopped by the delete, and no run is made for it.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlperf.store import RunStore, query
from dlperf.sweep import runner
from tests.conftest import TINY, CliResult
from tests.faults.test_store_faults import DEADLINE_S, _ended, _parked

Cli = Callable[..., CliResult]

SWEEP = """\
base = "base.toml"
[grid]
"train.lr" = [0.1, 0.03]
[set]
"data.limit" = 64
"""


def _write(tmp_path: Path) -> None:
    (tmp_path / "base.toml").write_text(TINY.format(epochs=1))
    (tmp_path / "sw.toml").write_text(SWEEP)


def test_a_point_whose_run_was_deleted_meanwhile_is_left_out_of_the_ranking(
    cli: Cli, store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Point 1's run deleted once point 2 starts (as `runs delete 1` from another terminal
    does): the winner is run 2, the one left, with one warning line for point 1, exit 1."""
    _write(tmp_path)
    real = runner.run_point

    def deleting(exp: Any, *args: Any) -> Any:
        if exp.train.lr == 0.03:  # point 2: point 1's run is stored finished by now
            store.delete_runs([1])
        return real(exp, *args)

    monkeypatch.setattr(runner, "run_point", deleting)
    done = cli("sweep", "sw.toml", "--json")
    assert done.code == 1, done.err
    said = json.loads(done.out)
    assert [p["run_id"] for p in said["points"]] == [2]
    assert said["winner"] == 2
    assert said["deleted"] == [{"point": 1, "params": {"train.lr": 0.1}, "run_id": 1}]
    warned = [line for line in done.err.splitlines() if line.startswith("warning:")]
    assert warned == [
        "warning: point 1/2 (train.lr=0.1): its run 1 was deleted while the sweep ran; "
        "left out of the ranking (run the sweep again to train it anew)"
    ]
    assert "no run 1" not in done.err
    assert [r.id for r in store.list_runs()] == [2]


@pytest.mark.faults
def test_runs_delete_force_of_a_jobs_1_point_says_it_stopped_the_sweep(
    db: str, tmp_path: Path
) -> None:
    """The delete stops the sweep's own process (the point trains in it): the sweep says that a
    `runs delete` stopped it and which run it deletes, before its line to continue it."""
    _write(tmp_path)
    proc = _parked(tmp_path, db, ["sweep", "sw.toml"], 1, "sw.txt")
    store = RunStore.open(db)
    try:
        stopped = query.stop(store, [store.get_run(1)])
        assert [s.said() for s in stopped] == [
            (f"stopped run 1: pid {proc.pid} marked it killed", False)
        ]
        assert _ended(proc) == 143  # 128 + SIGTERM
        store.delete_runs([1], force=True)
    finally:
        proc.kill()
        proc.join()
        store.engine.dispose()
    lines = (tmp_path / "sw.txt").read_text().splitlines()
    said = (
        f"point 1/2 stopped: `dlperf runs delete` (pid {os.getpid()}) is deleting its run 1, "
        "which stops the sweep (--jobs 1 trains each point in the sweep's own process)"
    )
    assert lines[-2:] == [
        said,
        "sweep study 1 stopped; continue it (the points that finished are skipped): "
        f"dlperf --db {db} sweep sw.toml --resume 1",
    ], lines


@pytest.mark.faults
def test_runs_delete_force_of_a_jobs_2_point_makes_no_run_anew(db: str, tmp_path: Path) -> None:
    """Both workers parked at their first step: the delete stops one, the sweep says why and
    makes no run for it; a stop of the sweep then ends the other."""
    _write(tmp_path)
    proc = _parked(tmp_path, db, ["sweep", "sw.toml", "--jobs", "2"], 1, "sw.txt")
    store = RunStore.open(db)
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(running := [r for r in store.list_runs() if r.status == "running"]) < 2:
            assert time.monotonic() < deadline, (tmp_path / "sw.txt").read_text()
            time.sleep(0.1)
        run = store.get_run(min(r.id for r in running))
        point = 1 if run.config["train"]["lr"] == 0.1 else 2
        query.stop(store, [run])
        store.delete_runs([run.id], force=True)
        said = (
            f"point {point}/2 killed: `dlperf runs delete` (pid {os.getpid()}) is deleting its "
            f"run {run.id}"
        )
        while f"point {point}/2 killed" not in (err := (tmp_path / "sw.txt").read_text()):
            assert proc.is_alive() and time.monotonic() < deadline, err
            time.sleep(0.1)
        assert said in err.splitlines(), err
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGTERM)
        assert _ended(proc) == 143
        other = max(r.id for r in running)
        assert [(r.id, r.status) for r in store.list_runs()] == [(other, "killed")]
    finally:
        proc.kill()
        proc.join()
        store.engine.dispose()
