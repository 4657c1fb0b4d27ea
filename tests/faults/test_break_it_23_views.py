"""Break-it round 23, P3 causes C1 and C5: what `runs show` and `dlperf sweep` leave out.

C1: `runs show` of a `dlperf.track` run kept only its val/ and epoch/ keys, and its table only
the columns of a training run's epochs: with `log(step, loss=...)`, the API's own example,
both `epochs` and `steps` were {}; a custom val/f1 gave a table of bare step numbers.
C5: two `dlperf sweep` of one study at once each ranked only the points it ran itself and
named a winner that was not the study's best (a point another process held was dropped).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import dlperf
from dlperf.store import RunStore
from tests.conftest import CliResult, fresh_store_url
from tests.sweep.test_runner import BASE, Log, sweep_of

Cli = Callable[..., CliResult]
EVENT_S = 300  # generous: how long a test waits for another process to reach a point


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "bi23v")


def _words(out: str) -> list[list[str]]:
    """Each printed line's words, the table's rules left out."""
    return [[w for w in line.split() if w not in "│┃"] for line in out.splitlines()]


# --- C1: every key a tracked run logged ---------------------------------------------------------


def test_runs_show_gives_every_key_a_tracked_run_logged(store_url: str, cli: Cli) -> None:
    with dlperf.track("tv", config={"lr": 0.1}, store=store_url) as r:
        for s in range(3):
            r.log(s, loss=1.0 / (s + 1), **{"val/f1": 0.5 + s / 10})
    document = json.loads(cli("--db", store_url, "runs", "show", "1", "--json").out)
    assert document["epochs"] == {"train/loss": [1.0, 0.5, 1 / 3], "val/f1": [0.5, 0.6, 0.7]}
    assert document["steps"] == {"train/loss": [0, 1, 2], "val/f1": [0, 1, 2]}
    shown = cli("--db", store_url, "runs", "show", "1")
    assert shown.code == 0, shown.err
    lines = _words(shown.out)
    # One column per key, the keys as stored (what `runs plot --key` takes).
    assert ["step", "train/loss", "val/f1"] in lines
    assert ["0", "1", "0.5"] in lines and ["2", "0.3333", "0.7"] in lines


def test_runs_show_of_a_run_logging_only_loss_is_not_empty(store_url: str, cli: Cli) -> None:
    with dlperf.track("loss-only", store=store_url) as r:
        for s in (10, 20):
            r.log(s, loss=2.0 / s)
    document = json.loads(cli("--db", store_url, "runs", "show", "1", "--json").out)
    assert document["epochs"] == {"train/loss": [0.2, 0.1]}
    assert document["steps"] == {"train/loss": [10, 20]}
    lines = _words(cli("--db", store_url, "runs", "show", "1").out)
    assert ["step", "train/loss"] in lines and ["20", "0.1"] in lines


def test_a_training_runs_epoch_table_is_unchanged(store: RunStore, cli: Cli) -> None:
    """A training run's per-step train/ rows stay out of its per-epoch table."""
    config = {"model": {"name": "smallcnn"}, "data": {"name": "digits"}, "train": {}, "run": {}}
    run = store.create_run("trained", "run", config)
    store.log_metrics(run, [("train/loss", 1, 2.0), ("train/loss", 2, 1.0), ("val/acc1", 1, 0.5)])
    store.finish_run(run, "finished", summary={"test_accuracy": 0.5, "epochs": 1})
    document = json.loads(cli("runs", "show", str(run), "--json").out)
    assert document["epochs"] == {"val/acc1": [0.5]} and "steps" not in document


# --- C5: two sweeps of one study rank the whole study -------------------------------------------

# A `dlperf sweep` process whose points "train" by storing a finished run whose test accuracy
# is the point's lr (no model: the test is about which points each sweep ranks). The point of
# lr HELD waits, once it holds its claim, until the test says go: so the two sweeps' order is
# set by files, not by how fast either runs.
SWEEPER = f"""
import sys, time
from pathlib import Path
from dlperf.cli import main
from dlperf.sweep import runner
from dlperf.sweep.summary import SweepPointResult

events, me, held = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])

def wait(name):
    deadline = time.monotonic() + {EVENT_S}
    while not (events / name).exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{{me}}: no {{name}} within {EVENT_S} s")
        time.sleep(0.05)

def point(exp, store, study_id, since, reporter):
    if exp.train.lr == held:
        (events / f"{{me}}-holds").touch()
        wait(f"{{me}}-go")
    run = store.create_run("p", "run", exp.to_dict(), exp.config_hash(), None, study_id)
    summary = {{"test_accuracy": exp.train.lr}}
    store.finish_run(run, "finished", summary)
    return SweepPointResult.of_run(run, "finished", summary)

runner.run_point = point
runner.check_points = lambda *args: None  # the points are not trained: nothing to check
sys.argv = ["dlperf", *sys.argv[4:]]
main()
"""


def _sweeper(events: Path, me: str, held: float, *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-c", SWEEPER, str(events), me, str(held), *args]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def _event(events: Path, name: str, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + EVENT_S
    while not (events / name).exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"no {name} within {EVENT_S} s"
        time.sleep(0.05)


@pytest.mark.faults
def test_two_sweeps_of_one_study_rank_the_whole_study(store_url: str, tmp_path: Path) -> None:
    (tmp_path / "base.toml").write_text(BASE.format(out=tmp_path / "runs"))
    sweep = tmp_path / "lr.toml"
    sweep.write_text('base = "base.toml"\n[grid]\n"train.lr" = [0.9, 0.2]\n')
    events = tmp_path / "events"
    events.mkdir()
    args = ("--db", store_url, "sweep", str(sweep), "--json")
    # A holds point 1 (lr 0.9, the study's best) until told; B then skips it and holds point 2.
    first = _sweeper(events, "a", 0.9, *args, "--new")
    second: subprocess.Popen[str] | None = None
    try:
        _event(events, "a-holds", first)
        second = _sweeper(events, "b", 0.2, *args)
        _event(events, "b-holds", second)
        (events / "a-go").touch()  # A finishes point 1; point 2 is still B's
        out, err = first.communicate(timeout=EVENT_S)
        assert first.returncode == 0, err
        a = json.loads(out)
        [run_a] = [p["run_id"] for p in a["points"]]
        assert a["winner"] == run_a
        [held] = a["held_elsewhere"]
        assert held["point"] == 2 and held["params"] == {"train.lr": 0.2}
        assert held["holder"]["pid"] == second.pid and held["run_id"] is None
        assert f"pid {second.pid}" in " ".join(err.split())
        (events / "b-go").touch()
        out, err = second.communicate(timeout=EVENT_S)
        assert second.returncode == 0, err
        b = json.loads(out)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
    # B ranks the whole study: point 1, which A ran, is among its points and is the winner.
    assert b["study_id"] == a["study_id"] and b["held_elsewhere"] == []
    by_lr = {p["params"]["train.lr"]: p for p in b["points"]}
    assert by_lr[0.9]["run_id"] == run_a and by_lr[0.9]["skipped"] is True
    assert by_lr[0.2]["skipped"] is False
    assert b["winner"] == run_a
    store = RunStore.open(store_url)
    assert sorted(r.status for r in store.list_runs(study_id=b["study_id"])) == ["finished"] * 2


def test_the_sweeps_table_says_its_winner_is_over_the_finished_points_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from dlperf.cli.sweep import _print_summary
    from dlperf.sweep.runner import SweepResult
    from dlperf.sweep.summary import SweepPointResult, SweepRow, axis_winners, group_rows

    row = SweepRow.of(SweepPointResult.of_run(3, "finished", {"test_accuracy": 0.9}), {"lr": 1})
    groups = group_rows([row])
    held = {"point": 2, "params": {"lr": 2}, "seed": 0, "run_id": 4,
            "holder": {"pid": 4321, "host": "h1"}}  # fmt: skip
    axes: dict[str, list[object]] = {"lr": [1, 2]}
    result = SweepResult(1, "s", axes, None, [row], groups, 3, axis_winners(groups, axes), "d",
                         [held])  # fmt: skip
    _print_summary(result, None)
    out = " ".join(capsys.readouterr().out.split())
    assert "winner: run 3" in out
    assert (
        "point 2 (lr=2) is still run by pid 4321 on h1 (run 4): the ranking and winner are "
        "over the finished points only"
    ) in out


def test_a_point_whose_holder_ended_unfinished_is_not_said_to_be_still_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Left by the fixer of C5: a held point whose process has since died (its run `lost`)
    was said to be "still run by pid N", with no run, though nobody runs it any more."""
    from dlperf.cli.sweep import _print_summary
    from dlperf.procs import this_process
    from dlperf.store import runstore
    from dlperf.sweep.runner import SweepResult, SweepRun, point_key

    sweep = sweep_of(tmp_path, "[0.1, 0.2]")
    store = RunStore.open(str(tmp_path / "s.db"))
    study = store.create_study("lr", "sweep")
    point = sweep.points[1]
    gone = {**this_process(), "pid": 2**22 + 1}  # above Linux's pid_max: no process has it
    monkeypatch.setattr(runstore, "this_process", lambda: gone)
    run_id = store.create_run("p", "run", point.exp.to_dict(), system={}, study_id=study)
    monkeypatch.undo()
    log = Log()
    state = SweepRun(sweep, store, study, tmp_path, None, log, "continue", 0, held={1: gone})
    held = state.held_elsewhere(point, point_key(point.exp.to_dict(), True))
    assert held["ended"] is True and held["run_id"] == run_id  # before: None, "still run"
    assert (
        f"pid {gone['pid']} on {gone['host']}, which held it, ended (run {run_id} lost)"
        in (log.lines[-1])
    )
    result = SweepResult(study, "lr", {}, None, [], [], None, {}, "d", [held])
    _print_summary(result, None)
    out = " ".join(capsys.readouterr().out.split())
    assert f"point 2 (train.lr=0.2) was left unfinished by pid {gone['pid']}" in out
