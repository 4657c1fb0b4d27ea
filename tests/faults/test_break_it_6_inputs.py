"""Break-it round 6 (issue 41): inputs that `track`, the device file and `staleness` took.

`TrackedRun.log` took a step the store cannot keep and failed the run at the block's end,
losing its metrics (F5), and stored a bool value as 1.0 where a bool step is refused (F6).
A `DLPERF_DEVICES` naming a missing file was ignored silently (F7). `staleness --speeds`
overflowed a float, or built a list of 1e18 gradient times (F8).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import dlperf
from dlperf.converge import staleness
from dlperf.converge.staleness import MAX_GRADIENTS


@pytest.mark.parametrize("step", [2**70, 2**31, -(2**31) - 1], ids=["2**70", "2**31", "-2**31-1"])
def test_log_refuses_a_step_the_store_cannot_keep(db: str, step: int) -> None:
    """F5 (A-hugestep, A-pgstep): metrics.step is a 32-bit INTEGER on PostgreSQL, so the
    bound is the same on every backend; one UserError at the call, the run's metrics kept."""
    with dlperf.track("huge-step") as run:
        run.log(1, loss=2.0)
        with pytest.raises(dlperf.UserError, match="step"):
            run.log(step, loss=1.0)
        run.log(2**31 - 1, loss=1.0)
        run.log(-(2**31), loss=0.5)  # a negative step is taken on purpose
    store = dlperf.Store(db)
    assert store.run(run.id).status == "finished"
    assert store.metrics(run.id, "loss") == [(-(2**31), 0.5), (1, 2.0), (2**31 - 1, 1.0)]


@pytest.mark.parametrize(
    "value",
    [True, False, np.bool_(True), np.array(False), torch.tensor(True)],
    ids=["True", "False", "np", "np-array", "tensor"],
)
def test_log_refuses_a_bool_value(db: str, value: Any) -> None:
    """F6 (A-bool, A-npbool): a bool was stored as 1.0 while a bool step is refused."""
    with dlperf.track("bool") as run:
        run.log(1, loss=2.0)
        with pytest.raises(dlperf.UserError, match="metric train/done is a number"):
            run.log(2, loss=1.0, done=value)
    store = dlperf.Store(db)
    assert store.run(run.id).status == "finished"
    assert store.metric_keys(run.id) == ["train/loss"]
    assert store.metrics(run.id, "loss") == [(1, 2.0)]


def test_a_missing_device_file_is_an_error(
    cli: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """F7 (O18): DLPERF_DEVICES naming a missing file was ignored, exit 0."""
    missing = tmp_path / "no-such-devices.toml"
    monkeypatch.setenv("DLPERF_DEVICES", str(missing))
    result = cli("devices")
    assert result.code == 2
    assert "DLPERF_DEVICES" in result.err and str(missing) in result.err
    assert "Traceback" not in result.err
    assert len(result.err.strip().splitlines()) <= 2  # the error line and at most a hint


@pytest.mark.parametrize(
    "speeds, horizon, named",
    [
        (["a=1e300"], "1e300", "not a finite number"),
        (["a=1e9"], "1e9", f"{MAX_GRADIENTS:,}"),
        (["a=1e6", "b=1e6"], "6", f"{MAX_GRADIENTS:,}"),  # the cap counts every learner
    ],
    ids=["overflow", "too-many", "together"],
)
def test_staleness_refuses_speeds_it_cannot_simulate(
    cli: Callable[..., Any], speeds: list[str], horizon: str, named: str
) -> None:
    """F8 (G04, G11): an OverflowError traceback, or a list of 1e18 floats that never ends."""
    result = cli("staleness", "--speeds", ",".join(speeds), "--horizon", horizon)
    assert result.code == 2
    assert named in result.err
    assert "Traceback" not in result.err


def test_from_speeds_takes_up_to_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cap is a bound, not a guess: exactly MAX_GRADIENTS gradients are built, one more is
    refused, counted over every learner (a small cap, so the test builds few)."""
    monkeypatch.setattr(staleness, "MAX_GRADIENTS", 5)
    assert len(staleness.from_speeds({"a": 1.0}, 5.0)["a"]) == 5
    with pytest.raises(dlperf.UserError, match="gradients"):
        staleness.from_speeds({"a": 1.0}, 6.0)
    with pytest.raises(dlperf.UserError, match="gradients"):
        staleness.from_speeds({"a": 1.0, "b": 1.0}, 3.0)
