"""Break-it round 30, fixer S1: what a `dlperf.track` run stores and shows.

C1 (P3 F1). A tracked run whose config is {} / None or made only of experiment sections was
taken for an engine run: its val/* metrics were moved to invented steps (epoch x 20) and an
`epoch` series made up, in Store.frame and the exports. It keeps the steps it logged.
C2 (P3 F3). A step logged twice for one metric: metrics() and the exports kept both values,
Store.frame kept the last. Every view keeps every value logged, as MLflow and TensorBoard do.
C3 (P3 F4). A tracked run's summary `final.<metric>` was the last call's value, not the
value at the highest step (steps logged out of order, or by threads).
C4 (P3 F6). Logging a 0-d tensor that requires grad printed torch's UserWarning from api.py.
C5 (P3 F7). `log(1.0, ...)` said "a step is a whole number, got 1.0": an integral float is
taken as its int.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

import dlperf
from dlperf.errors import UserError
from tests.conftest import CliResult

Cli = Callable[..., CliResult]


def test_c1_tracked_run_keeps_its_steps(db: str, cli: Cli, tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ids = []
    for config in (None, {"train": {"lr": 0.2}}):  # api.md's "tiny" example; its lr example
        with dlperf.track("t", config=config, store=db) as run:
            for step in (1, 2, 3):
                run.log(step, loss=1.0 / step)
            run.log(3, **{"val/acc1": 0.9})
        ids.append(run.id)
    store = dlperf.Store(db)
    for run_id in ids:
        frame = store.frame(run_id)
        assert list(frame.columns) == ["train/loss", "val/acc1"]  # no `epoch` made up
        assert frame["val/acc1"].dropna().to_dict() == {3: 0.9}

    out = tmp_path / "tb"
    result = cli("runs", "export", *map(str, ids), "--to", "tensorboard", "--out", str(out))
    assert result.code == 0, result.err
    for run_id in ids:
        (directory,) = out.glob(f"run-{run_id}-*")
        events = EventAccumulator(str(directory), size_guidance={"scalars": 0})
        events.Reload()
        assert sorted(events.Tags()["scalars"]) == ["train/loss", "val/acc1"]
        assert [e.step for e in events.Scalars("val/acc1")] == [3]


def test_c2_a_step_logged_twice_is_two_rows_in_every_view(db: str, cli: Cli) -> None:
    with dlperf.track("rep", store=db) as run:
        run.log(1, loss=1.0)
        run.log(1, loss=2.0)
        run.log(2, loss=3.0, **{"val/acc1": 0.5})
    store = dlperf.Store(db)
    assert store.metrics(run.id, "loss") == [(1, 1.0), (1, 2.0), (2, 3.0)]
    frame = store.frame(run.id)
    assert list(frame.index) == [1, 1, 2]
    assert list(frame["train/loss"]) == [1.0, 2.0, 3.0]
    assert frame["val/acc1"].isna().tolist() == [True, True, False]
    result = cli("runs", "show", str(run.id), "--json")
    assert result.code == 0, result.err
    shown = json.loads(result.out)
    assert shown["epochs"]["train/loss"] == [1.0, 2.0, 3.0]
    assert shown["steps"]["train/loss"] == [1, 1, 2]


def test_c3_final_is_the_value_at_the_highest_step(db: str) -> None:
    with dlperf.track("nm", store=db) as run:
        run.log(3, loss=3.0, acc=0.3)
        run.log(1, loss=1.0, acc=0.1)
        run.log(3, loss=5.0)  # of equal steps, the last logged
        run.log(2, loss=2.0, acc=0.2)
    final = dlperf.Store(db).run(run.id).summary["final"]
    assert final == {"train/loss": 5.0, "train/acc": 0.3}


def test_c4_a_tensor_that_requires_grad_is_read_silently(db: str) -> None:
    with dlperf.track("g", store=db) as run, warnings.catch_warnings():
        warnings.simplefilter("error")
        run.log(1, loss=torch.tensor(2.5, requires_grad=True))
    assert dlperf.Store(db).metrics(run.id, "loss") == [(1, 2.5)]


def test_c5_an_integral_float_step_is_its_int(db: str) -> None:
    with dlperf.track("s", store=db) as run:
        run.log(1.0, loss=1.0)  # type: ignore[arg-type]
        run.log(np.int64(2), loss=2.0)
        run.log(np.float64(3.0), loss=3.0)  # type: ignore[arg-type]
        with pytest.raises(UserError, match=r"^a step is a whole number, got 3\.5$"):
            run.log(3.5, loss=4.0)  # type: ignore[arg-type]
    steps = dlperf.Store(db).metrics(run.id, "loss")
    assert steps == [(1, 1.0), (2, 2.0), (3, 3.0)]
    assert all(type(step) is int for step, _ in steps)
