"""Break-it round 50, fixer G2: sweep workers stopped by their CPU-time limit.

T3 C2 (message): under a soft CPU-time limit (`prlimit --cpu=7:60 dlperf sweep sw.toml --jobs
2`) each worker is stopped by its own SIGXCPU, as a plain `run` is: it marks its run `killed`
with the limit's line and its fix, and exits 152. The sweep then said of every point "point 2/3
failed: sweep worker stopped by SIGXCPU (exit code 152)", naming neither the limit nor the fix,
called "failed" a point whose run is stored `killed`, and counted it nowhere at the end. Now a
point is what its run is stored as: "point 1/1 killed: the CPU-time limit (ulimit -t) stopped
the command after ...: raise it, ...", and `run 1 killed: ...` at the end (exit 1, as for a
failed point). A worker stopped before it stored its run (no run yet, or one left running) is
stored `killed` too, as "sweep worker stopped by SIGXCPU (the CPU-time limit, ulimit -t: raise
it, or give each worker less to do; exit code 152)". `--resume` runs a killed point again.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from dlperf import procs
from dlperf.config import Experiment
from dlperf.store import RunStore
from dlperf.sweep.runner import SweepResult, SweepRun, _Child, finished_runs
from dlperf.sweep.summary import SweepPointResult, SweepRow
from tests.conftest import CliResult

# A worker stopped by its soft CPU-time limit, as dlperf.sweep.worker is: `stopping` turns the
# SIGXCPU into a stop, the run is marked killed with the limit's line (as run_experiment marks
# it), and the process exits 128 + SIGXCPU. Sent by hand under a soft limit set here, so that
# no test burns seconds of CPU or waits on the kernel's clock.
STOPPED = """
import os, resource, signal, sys, time
from dlperf import stopping
from dlperf.store import RunStore

def main():
    resource.setrlimit(resource.RLIMIT_CPU, (3600, resource.RLIM_INFINITY))
    print("training", file=sys.stderr, flush=True)
    store = RunStore.open(sys.argv[1])
    try:
        os.kill(os.getpid(), signal.SIGXCPU)
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        if sys.argv[2] != "0":
            store.finish_run(int(sys.argv[2]), "killed", error=stopping.stopped_by())
        raise
    return 0

stopping.run(main, process=True)
"""

LIMIT = "the CPU-time limit (ulimit -t) stopped the command after 0 s of CPU (SIGXCPU, exit 152)"


def _tiny(root: Path) -> Experiment:
    return Experiment.model_validate(
        {
            "model": {"name": "smallcnn"},
            "data": {"name": "digits", "limit": 64},
            "train": {"epochs": 1},
            "run": {"out_dir": str(root / "runs")},
        }
    )


def _collect(tmp_path: Path, marks: bool, made: bool = True) -> tuple[RunStore, Any, int | None]:
    """A real worker process stopped by SIGXCPU under its soft CPU-time limit, collected by a
    sweep of a real store; the point's run made (`made`) and marked killed by it (`marks`)."""
    store = RunStore.open(str(tmp_path / "s.db"))
    study = store.create_study("sw", "sweep")
    exp = _tiny(tmp_path)
    run_id = (
        store.create_run("p", "run", exp.to_dict(), exp.config_hash(), None, study)
        if made
        else None
    )
    directory = tmp_path / "p1"
    directory.mkdir()
    marked = str(run_id if marks and run_id is not None else 0)
    with (directory / "worker.log").open("wb") as log:
        command = [sys.executable, "-c", STOPPED, str(tmp_path / "s.db"), marked]
        proc = subprocess.Popen(command, stderr=log)
        proc.wait(timeout=120)
    assert proc.returncode == 152
    sweep = cast(SweepRun, SimpleNamespace(store=store, study_id=study, since=0))
    result = SweepRun._collect(sweep, _Child(cast(Any, None), exp, proc, directory))
    return store, result, run_id


def test_a_point_whose_worker_its_cpu_limit_stopped_is_what_its_run_is_stored(
    tmp_path: Path,
) -> None:
    store, result, run_id = _collect(tmp_path, marks=True)
    assert run_id is not None
    run = store.get_run(run_id)
    assert run.status == "killed" and run.error is not None
    assert run.error.startswith("the CPU-time limit (ulimit -t) stopped the command after ")
    assert "(SIGXCPU, exit 152" in run.error
    assert "raise it, or give the command less to do" in run.error
    # before: ("failed", "sweep worker stopped by SIGXCPU (exit code 152)\ntraining")
    assert (result.run_id, result.status, result.error) == (run_id, "killed", run.error)


@pytest.mark.parametrize("made", [True, False], ids=["run-left-running", "no-run-yet"])
def test_a_worker_its_cpu_limit_stopped_before_it_stored_its_run_is_killed(
    tmp_path: Path, made: bool
) -> None:
    store, result, _ = _collect(tmp_path, marks=False, made=made)
    expected = (
        "sweep worker stopped by SIGXCPU (the CPU-time limit, ulimit -t: raise it, or give "
        "each worker less to do; exit code 152)\ntraining"
    )
    # before: failed, "sweep worker stopped by SIGXCPU (exit code 152)"
    assert (result.status, result.error) == ("killed", expected)
    run = store.get_run(result.run_id)
    assert (run.status, run.error) == ("killed", expected)
    # a killed point is not finished: the sweep run again (--resume) trains it again
    assert not finished_runs(store, run.study_id, True)


def test_the_point_line_says_killed_with_the_stored_error() -> None:
    logged: list[str] = []
    point = SimpleNamespace(index=0)
    state = cast(
        SweepRun,
        SimpleNamespace(
            sweep=SimpleNamespace(points=[point]),
            results={},
            reporter=SimpleNamespace(log=logged.append),
            on_failure="continue",
        ),
    )
    result = SweepPointResult(3, "killed", f"{LIMIT}: raise it, or give the command less to do")
    assert SweepRun.finished(state, cast(Any, point), result) is True
    # the point's status as its run is stored (the collected result's, tested above)
    assert logged == [f"point 1/1 killed: {result.error}"]


BASE = """
[model]
name = "smallcnn"
[data]
name = "digits"
limit = 64
[train]
epochs = 1
[run]
threads = 1
"""


def test_the_sweep_command_says_a_killed_point_at_the_end_and_exits_1(
    cli: Callable[..., CliResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "sw.toml").write_text(
        'name = "sw"\nbase = "base.toml"\n[grid]\n"train.lr" = [0.01]\n'
    )
    error = f"{LIMIT}: raise it, or give the command less to do"
    row = SweepRow.of(SweepPointResult(1, "killed", error), {"train.lr": 0.01})

    def killed(*args: Any, **kwargs: Any) -> SweepResult:
        return SweepResult(1, "sw", {"train.lr": [0.01]}, None, [row], [], None, {}, "d")

    monkeypatch.setattr("dlperf.sweep.run_sweep", killed)
    monkeypatch.setattr("dlperf.report.sweep.sweep_figures", lambda store, result: [])
    result = cli("sweep", "sw.toml", "--jobs", "2")
    # before: exit 0 and nothing said of it (only "failed" points were)
    assert result.code == 1
    assert f"run 1 killed: {error}" in result.err


def test_ended_names_the_cpu_limit_for_a_caught_sigxcpu_and_a_killing_one() -> None:
    assert procs.ended_how(152) == (
        "stopped by SIGXCPU (the CPU-time limit, ulimit -t: raise it, or give each worker less "
        "to do; exit code 152)"
    )
    assert procs.ended_how(-24) == (
        "killed by SIGXCPU (the CPU-time limit, ulimit -t: raise it, or give each worker "
        "less to do)"
    )
    assert procs.ended_how(143) == "stopped by SIGTERM (exit code 143)"
