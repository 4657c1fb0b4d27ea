"""Break-it round 68, V3 cause 3: a sweep stopped just as its last point finished.

Before: SIGINT to `dlperf sweep --jobs 2 --resume 1` as its last point's "finished" line came
left every point stored finished, yet the sweep exited 130 with "sweep study 1 stopped;
continue it (the points that finished are skipped): ... --resume 1" and no ranking: the stop
line of a study with nothing left to run, whose named command only ranked it. So did a stop
that landed while the whole study was ranked or its figures drawn.

Now a study whose every point is stored finished when the stop is handled is whole, as `run`
treats a run the stop found stored finished: the sweep ranks it, draws its figures, prints its
tables and exits 0, with no "continue it" line. A stop before the last point finished still
stops the sweep with that line (exit 130). The stop is sent by the process itself from the
point's own finish (or the figures' drawing), so nothing races a timer.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlperf.report import sweep as report_sweep
from dlperf.store import RunStore
from dlperf.sweep import runner
from dlperf.sweep.summary import SweepPointResult
from tests.conftest import TINY, CliResult

Cli = Callable[..., CliResult]

SWEEP = """\
base = "base.toml"
[grid]
"train.lr" = [0.1, 0.03]
[set]
"data.limit" = 64
"""

STOPPED = "sweep study 1 stopped; continue it"


@pytest.fixture
def sweep_toml(tmp_path: Path) -> Path:
    (tmp_path / "base.toml").write_text(TINY.format(epochs=1))
    path = tmp_path / "sw.toml"
    path.write_text(SWEEP)
    return path


def stop_on_finish(monkeypatch: pytest.MonkeyPatch, point: int) -> None:
    """SIGINT this process as point `point` (1-based) is said finished: its handler runs
    here, as the point's "finished" line is written, the run already stored finished."""
    real = runner.SweepRun.finished

    def finished(self: runner.SweepRun, at: Any, result: SweepPointResult) -> bool:
        going_on = real(self, at, result)
        if at.index + 1 == point:
            os.kill(os.getpid(), signal.SIGINT)
        return going_on

    monkeypatch.setattr(runner.SweepRun, "finished", finished)


def test_a_stop_as_the_last_point_finishes_ranks_the_whole_study(
    cli: Cli, store: RunStore, sweep_toml: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stop_on_finish(monkeypatch, 2)
    r = cli("sweep", str(sweep_toml))
    assert STOPPED not in r.err, r.err  # before: this line, exit 130, no table
    assert r.code == 0, (r.code, r.err)
    assert "point 2/2 finished: run 2" in r.err
    assert "points ranked by test accuracy" in r.out
    assert "winner: run" in r.out
    assert [run.status for run in store.list_runs()] == ["finished", "finished"]
    # The figures are drawn, as a sweep left alone draws them.
    saved = [
        line.removeprefix("saved ") for line in r.err.splitlines() if line.startswith("saved ")
    ]
    assert any(path.endswith("study-1/val_error.png") for path in saved), r.err
    assert all(Path(path).is_file() for path in saved), saved


def test_a_stop_as_the_whole_study_is_drawn_does_not_unsay_it(
    cli: Cli, store: RunStore, sweep_toml: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = report_sweep.sweep_figures

    def drawn(*args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **kwargs)

    monkeypatch.setattr(report_sweep, "sweep_figures", drawn)
    r = cli("sweep", str(sweep_toml))
    assert STOPPED not in r.err, r.err  # before: this line, exit 130, no table
    assert r.code == 0, (r.code, r.err)
    assert "points ranked by test accuracy" in r.out


def test_a_stop_before_the_last_point_finishes_still_stops_the_sweep(
    cli: Cli, store: RunStore, sweep_toml: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stop_on_finish(monkeypatch, 1)
    r = cli("sweep", str(sweep_toml))
    assert r.code == 130, (r.code, r.err)
    assert r.err.splitlines()[-1] == (
        f"{STOPPED} (the points that finished are skipped): dlperf sweep {sweep_toml} --resume 1"
    )
    assert "points ranked" not in r.out
