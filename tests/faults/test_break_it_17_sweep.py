"""Break-it round 17, part E, cause D: two `dlperf sweep` commands on one file started 3 s
apart each made a study of their own and trained every point twice. The window was the
check of every point (data loaded, every model run dry), between looking for the study and
making it. The study is now looked for again after the checks, so a sweep whose study
appeared meanwhile joins it; it is still made only after the checks, so a refused sweep
stores nothing (docs/sweep.md).

The other sweep is played by the check itself: it makes the study and finishes one point,
as a sweep started moments earlier would, while this one checks (no timing race)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dlperf.store import RunStore
from dlperf.store.studies import studies_named
from dlperf.sweep import runner
from dlperf.sweep.runner import run_sweep
from tests.sweep.test_runner import FakeTrainer, Log, sweep_of


def test_a_sweep_joins_the_study_another_sweep_made_while_it_checked(
    tmp_path: Path, store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweep = sweep_of(tmp_path)
    trainer = FakeTrainer()  # a point "trains" by storing a finished run (no model)
    monkeypatch.setattr(runner, "run_point", trainer)
    check = runner.check_points
    other: list[int] = []

    def check_while_another_sweep_starts(*args: Any) -> None:
        check(*args)
        other.append(store.create_study(sweep.name, "sweep"))
        trainer(sweep.points[0].exp, store, other[0], 0, None)  # its first point, finished

    monkeypatch.setattr(runner, "check_points", check_while_another_sweep_starts)
    log = Log()
    result = run_sweep(sweep, store, reporter=log)
    assert studies_named(store, sweep.name, "sweep") == other == [result.study_id]
    assert trainer.lrs == [0.1, 0.3, 0.2]  # 0.1 by the other sweep, once; then this one's two
    assert log.lines[0] == "sweep 'lr', study 1: 3 points, 1 finished before, 2 to run"
    assert [r.skipped for r in result.points] == [True, False, False]
