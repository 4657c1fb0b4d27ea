"""Break-it round 27, what the lead fixed beside the testers' causes.

- L1: a stopped sweep that continued an older study of its name (the newest ran other
  points) named the newest study in its stop line, and suggested `--resume` of that study,
  which holds other points.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_break_it_26_stops import BASE, SWEEP, _stop

Cli = Callable[..., CliResult]


def test_a_stopped_sweep_names_the_older_study_it_continued(
    cli: Cli, store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "sw.toml").write_text(SWEEP)
    older = store.create_study("sw", "sweep")  # no runs yet: every run a point of this sweep
    newest = store.create_study("sw", "sweep")
    store.create_run("other", "train", {"not": "a point"}, study_id=newest)
    studies: list[int] = []

    def stopped(self: Any, *rest: Any, **kwargs: Any) -> Any:
        studies.append(self.study_id)
        _stop()

    monkeypatch.setattr("dlperf.sweep.runner.SweepRun.run_here", stopped)
    result = cli("sweep", "sw.toml")
    assert result.code == 130, (result.out, result.err)
    assert studies == [older]
    line = result.err.splitlines()[-1]
    assert line.startswith(f"sweep study {older} stopped"), result.err
    assert line.endswith(f"--resume {older}"), line


# --- L2: dlperf.run drops its run's warnings -----------------------------------------------

SOFTMAX = """
import torch, torch.nn as nn
def build(num_classes=10, in_channels=1):
    return nn.Sequential(nn.Flatten(), nn.LazyLinear(num_classes), nn.Softmax(dim=1))
"""


def test_dlperf_run_gives_its_warnings_as_python_warnings(tmp_path: Path) -> None:
    """Before: `dlperf run` printed "warning: model ... returns probabilities" and dlperf.run
    said nothing (its reporter dropped every line); a notebook shows Python's warnings."""
    import dlperf

    (tmp_path / "net.py").write_text(SOFTMAX)
    config = {
        "model": {"name": f"{tmp_path / 'net.py'}:build"},
        "data": {"name": "digits", "limit": 64},
        "train": {"epochs": 1, "batch_size": 32},
        "run": {"threads": 1, "warmup_steps": 1, "checkpoint": False,
                "out_dir": str(tmp_path / "runs")},
    }  # fmt: skip
    with pytest.warns(UserWarning, match="returns probabilities") as caught:
        result = dlperf.run(config, store=str(tmp_path / "runs.db"))
    assert result.status == "finished"
    said = [str(w.message) for w in caught if "probabilities" in str(w.message)]
    assert len(said) == 1 and not said[0].startswith("warning:"), said
