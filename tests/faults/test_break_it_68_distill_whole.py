"""Break-it round 68, F6: a distill stopped after its last stage, as a sweep now is.

Before: a stop that landed once every stage's run was stored finished (as the last stage's run
was marked finished, as its "run N finished" line came, or while the study's figure was drawn)
exited 130 with "distill study 1 stopped; continue it (the stages that finished are skipped):
... --resume 1" and no table: the stop line of a study with nothing left to run, whose named
command only reused every stage. Round 68 settled a sweep whose every point is stored finished
(tests/faults/test_break_it_68_sweep_whole.py); distill still said the line.

Now a distill study whose every stage is stored finished is whole, as `run` treats a run the
stop found stored finished: its outcome is settled, one stop does not count (the table and the
figure, exit 0, no "continue it" line), a second ends what is left, exit 128 + the first, with
no line. A stop before the last stage finished still says the line, exit 130. Every stop is
sent by the process itself at the moment named, so nothing races a timer.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlperf.distill import runner
from dlperf.report import distill as report_distill
from dlperf.store import RunStore
from tests.conftest import CliResult, write_distill_exp

Cli = Callable[..., CliResult]

STOPPED = "distill study 1 stopped; continue it"
# The teacher is the baseline (the student is its model, same recipe): runs 1 teacher, 2
# select, 3 pretrain, 4 finetune.
STUDENT = "student  │ 3 │ 2 > 3 > 4"


def _args(tmp_path: Path) -> list[str]:
    path = write_distill_exp(tmp_path)
    return ["distill", str(path), "--unlabeled", "digits:holdout=0.5", "--top-k", "3"]


def _whole(r: CliResult, store: RunStore) -> None:
    """The output of a distill left alone: the table, the verdict and the figure, exit 0."""
    assert STOPPED not in r.err, r.err  # before: this line, exit 130, no table
    assert r.code == 0, (r.code, r.err)
    assert STUDENT in r.out, r.out
    assert "best K = 3" in r.out, r.out
    saved = [
        line.removeprefix("saved ") for line in r.err.splitlines() if line.startswith("saved ")
    ]
    assert len(saved) == 1 and Path(saved[0]).is_file(), r.err
    assert [run.status for run in store.list_runs()] == ["finished"] * 4


def _kill(signum: int = signal.SIGINT) -> None:
    """A stop signal to this process: its handler runs here, at once."""
    os.kill(os.getpid(), signum)


def test_a_stop_as_the_last_stage_is_said_finished_prints_the_whole_study(
    cli: Cli, store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = runner._Study.stage

    def stage(self: runner._Study, name: str, *args: Any) -> runner.Staged:
        staged = real(self, name, *args)  # its "finetune K=3: run 4 finished" line said
        if name == "finetune":
            _kill()
        return staged

    monkeypatch.setattr(runner._Study, "stage", stage)
    r = cli(*_args(tmp_path))
    _whole(r, store)
    assert "finetune K=3: run 4 finished" in r.err
    # The command's own stages are not said reused: it trained them.
    assert "reused" not in r.out, r.out


def test_a_stop_as_the_last_stage_is_stored_finished_prints_the_whole_study(
    cli: Cli, store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stop lands as run_experiment hands back the finetune run it stored finished (its
    mark is shielded, the stop raised once it is written): the stage's tags were not set yet."""
    real = runner.run_experiment

    def run_experiment(exp: Any, *args: Any, **kwargs: Any) -> Any:
        result = real(exp, *args, **kwargs)
        if exp.run.name.endswith("-finetune-k3"):
            _kill()
        return result

    monkeypatch.setattr(runner, "run_experiment", run_experiment)
    r = cli(*_args(tmp_path))
    _whole(r, store)
    # Tagged as its stage, as a finetune run the stop did not cut is (the report reads them)
    assert store.get_run(4).tags["stage"] == "finetune"
    assert store.get_run(4).tags["top_k"] == "3"


def test_a_stop_as_the_figure_is_drawn_does_not_unsay_the_study(
    cli: Cli, store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = report_distill.distill_figure

    def drawn(*args: Any) -> Any:
        _kill()
        return real(*args)

    monkeypatch.setattr(report_distill, "distill_figure", drawn)
    _whole(cli(*_args(tmp_path)), store)


def test_a_second_stop_ends_what_is_left_without_the_line(
    cli: Cli, store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def drawn(*args: Any) -> Any:
        _kill(signal.SIGTERM)
        _kill(signal.SIGINT)  # insists: ends the command, 128 + the first
        raise AssertionError("the second stop did not end the command")

    monkeypatch.setattr(report_distill, "distill_figure", drawn)
    r = cli(*_args(tmp_path))
    assert r.code == 128 + signal.SIGTERM, (r.code, r.err)  # before: 143 and the line
    assert "continue it" not in r.err, r.err
    assert "AssertionError" not in r.err, r.err
    assert [run.status for run in store.list_runs()] == ["finished"] * 4


def test_a_stop_before_the_last_stage_finished_still_says_the_line(
    cli: Cli, store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = runner._Study.stage

    def stage(self: runner._Study, name: str, *args: Any) -> runner.Staged:
        staged = real(self, name, *args)
        if name == "pretrain":
            _kill()
        return staged

    monkeypatch.setattr(runner._Study, "stage", stage)
    args = _args(tmp_path)
    r = cli(*args)
    assert r.code == 130, (r.code, r.err)
    assert r.err.splitlines()[-1] == (
        f"{STOPPED} (the stages that finished are skipped): dlperf {' '.join(args)} --resume 1"
    )
    assert "best K" not in r.out
    assert [run.status for run in store.list_runs()] == ["finished"] * 3
