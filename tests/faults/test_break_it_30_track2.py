"""Break-it round 30, review 2 of fixers S1/S2, fixer T1: tracked runs and --where's hint.

C1. A `dlperf.track` run whose config holds all of model/data/train/run (a Hydra-style config)
was taken for an engine run: Store.frame moved its val/* to invented epoch steps with an
`epoch` column. A tracked run is marked at start; engine runs are not.
C3. `--where batch_size=32` lost its hint 'train.batch_size': a bare key is matched to the
last dotted part of known keys too.
C6. `log(torch.tensor(4.0), ...)` was refused ("a step is a whole number, got tensor(4.)")
where NumPy's 3.0 was taken: a 0-d tensor's value is read as NumPy's is.
C12. `log` imported torch for every value logged: a value is read detached without it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import dlperf
from dlperf import api
from dlperf.errors import UserError
from dlperf.store.query import tracked
from tests.conftest import CliResult, TrainedRun

Cli = Callable[..., CliResult]


def test_c1_a_tracked_run_with_an_experiments_sections_keeps_its_steps(
    db: str, trained_digits: TrainedRun, tmp_path: Path
) -> None:
    config = {
        "model": {"name": "smallcnn"},
        "data": {"name": "digits"},  # bundled: its epochs' steps were read to move val/*
        "train": {"epochs": 3, "batch_size": 32},
        "run": {"seed": 0},
    }
    with dlperf.track("hydra", config=config, store=db) as run:
        for step in (1, 2, 3):
            run.log(step, loss=1.0 / step)
        run.log(3, **{"val/acc1": 0.9})
    store = dlperf.Store(db)
    frame = store.frame(run.id)
    assert list(frame.columns) == ["train/loss", "val/acc1"]  # no `epoch` made up
    assert frame["val/acc1"].dropna().to_dict() == {3: 0.9}
    assert tracked(store.run(run.id))
    # An engine run (dlperf run's, and dlperf.run's: one path) is never marked.
    (tmp_path / "engine").mkdir()
    engine, run_id, _ = trained_digits.copy_to(tmp_path / "engine")
    record = engine.get_run(run_id)
    assert not tracked(record) and "tracked" not in record.system


@pytest.mark.parametrize(
    ("key", "hint"),
    [
        ("batch_size", "train.batch_size"),
        ("trian.lr", "train.lr"),
        ("final.train/los", "final.train/loss"),
    ],
)
def test_c3_where_hints_a_bare_keys_section(db: str, cli: Cli, key: str, hint: str) -> None:
    with dlperf.track("k", store=db) as run:
        run.log(1, loss=0.5)
    result = cli("runs", "list", "--where", f"{key}=32")
    assert (result.code, result.out) == (2, "")
    assert result.err == f"error: --where: unknown key {key!r} (did you mean {hint!r}?)\n"


def test_c6_a_0d_float_tensor_step_is_its_int(db: str) -> None:
    with dlperf.track("s", store=db) as run:
        run.log(torch.tensor(4.0), loss=1.0)  # type: ignore[arg-type]
        run.log(torch.tensor(5.0, requires_grad=True), loss=2.0)  # type: ignore[arg-type]
        # a tensor of one number, whatever its shape, is that number (round 69: [6.0] was
        # refused by its shape while torch's [7] was taken)
        run.log(torch.tensor([6.0]), loss=2.5)  # type: ignore[arg-type]
        for refused in (torch.tensor(4.5), torch.tensor(True)):
            with pytest.raises(UserError, match=r"^a step is a whole number, got tensor\("):
                run.log(refused, loss=3.0)  # type: ignore[arg-type]
    steps = dlperf.Store(db).metrics(run.id, "loss")
    assert steps == [(4, 1.0), (5, 2.0), (6, 2.5)]
    assert all(type(step) is int for step, _ in steps)


def test_c12_a_value_is_read_without_importing_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    assert api._metric("loss", 2.5) == ("train/loss", 2.5)
