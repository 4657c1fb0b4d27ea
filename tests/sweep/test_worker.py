"""dlperf.sweep.worker: one point of a parallel sweep, from its config file to its result
file, in this process with a fake trainer (tests/sweep/test_sweep.py starts real workers)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dlperf.store import RunStore
from dlperf.sweep import runner, worker
from dlperf.sweep.summary import SweepPointResult

CONFIG = {"model": {"name": "smallcnn"}, "data": {"name": "digits"}, "train": {"lr": 0.3}}


def test_a_point_runs_in_the_store_of_dlperf_db_and_writes_its_result(
    tmp_path: Path, store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    study = store.create_study("lr", "sweep")
    seen: list[Any] = []

    def fake(
        exp: Any, used: RunStore, study_id: int, since: int, reporter: Any
    ) -> SweepPointResult:
        seen.append((exp.train.lr, str(used.engine.url), study_id, since))
        return SweepPointResult(7, "finished", None, 0.9)

    # where main takes it from: it imports the runner once it takes the stop signals
    monkeypatch.setattr(runner, "run_point", fake)
    config, result = tmp_path / "point.json", tmp_path / "result.json"
    config.write_text(json.dumps(CONFIG))
    assert worker.main([str(config), str(result), str(study), "4"]) == 0
    assert seen == [(0.3, str(store.engine.url), study, 4)]  # $DLPERF_DB, as the fixture set it
    assert SweepPointResult.from_dict(json.loads(result.read_text())) == SweepPointResult(
        7, "finished", None, 0.9
    )
    assert not list(tmp_path.glob("result.part*"))  # written by rename


def test_a_config_that_no_longer_validates_fails_naming_the_file(
    tmp_path: Path, store: RunStore
) -> None:
    config = tmp_path / "point.json"
    config.write_text(json.dumps({**CONFIG, "train": {"lr": "fast"}}))
    # Its one line for dlperf to record as the point's failure (round 27: a traceback)
    assert worker.main([str(config), str(tmp_path / "result.json"), "1", "0"]) == 2
    said = json.loads((tmp_path / "result.json").read_text())
    assert list(said) == ["error"] and "point.json" in said["error"], said
    assert "\n" not in said["error"]
