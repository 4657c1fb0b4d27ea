"""Break-it round 7, `dlperf scale`: a model's own exception in a worker is named on the
point's first line; dlperf's own one-line error raised in a worker stays one line; a loss that
stops being finite on any rank fails the point with the plain run's line."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from dlperf.distributed.launch import error_lines
from dlperf.distributed.worker import Divergence
from dlperf.engine.hooks import StepEnd
from dlperf.engine.loop import Diverged
from dlperf.engine.step import Stepped
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_break_it_6_scale import _args, _experiment, _no_traceback

# Rank 1 raises an exception of the model's own at its second training step (the checks
# before training use batches of other sizes).
SHARD_LOST = """
import os
import torch
from torch import nn


class ShardLost(Exception):
    pass


class Sharded(nn.Module):
    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.c = nn.Conv2d(in_channels, 4, 3, padding=1)
        self.l = nn.Linear(4, num_classes)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and os.environ.get("RANK") == "1" and x.shape[0] == 8:
            self.calls += 1
            if self.calls == 2:
                raise ShardLost("shard 7 went away")
        return self.l(self.c(x).mean((2, 3)))


def Net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    return Sharded(num_classes, in_channels)
"""
# Builds in dlperf's own process (its up-front checks), fails in every worker.
WORKER_ONLY = """
import os
from torch import nn


def Net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    if "LOCAL_RANK" in os.environ:  # a mistake dlperf's own check finds, in the worker only
        return 3
    return nn.Sequential(nn.Flatten(), nn.Linear(64 * in_channels, num_classes))
"""
# Rank 1's loss is NaN from its first training step (rank 0's from its second: DDP averages
# rank 1's NaN gradients into its weights).
NAN_ON_RANK_1 = """
import os
import torch
from torch import nn


class Nan(nn.Module):
    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.c = nn.Conv2d(in_channels, 4, 3, padding=1)
        self.l = nn.Linear(4, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.l(self.c(x).mean((2, 3)))
        if self.training and os.environ.get("RANK") == "1":
            y = y * float("nan")
        return y


def Net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    return Nan(num_classes, in_channels)
"""


def _said(said: str, err: str) -> bool:
    """Whether `err` says `said`, however the console wrapped it."""
    return " ".join(said.split()) in " ".join(err.split())


def _failed_point(db: str) -> str:
    (run,) = RunStore.open(db).list_runs(kind="scale")
    assert run.status == "failed"
    assert run.error is not None
    return run.error


@pytest.mark.faults  # over 10 s under load: make test-faults
def test_a_models_own_exception_on_one_rank_is_named_on_the_points_first_line(
    cli: Callable[..., CliResult], db: str, tmp_path: Path
) -> None:
    r = cli(*_args(_experiment(tmp_path, SHARD_LOST), 8))
    assert r.code == 1, r.err
    said = "worker rank 1 failed: the model raised ShardLost: shard 7 went away"
    assert _said(f"failed: {said}", r.err), r.err
    error = _failed_point(db).splitlines()
    assert error[0] == said, error
    # the traceback's tail stays below it, down to the model's own line
    assert any("usermodel.py" in line for line in error[1:]), error


def test_a_traceback_is_summed_up_by_its_exception(tmp_path: Path) -> None:
    """The exception's first line, without the module that defines it; a traceback of a
    chained exception is summed up by the last; no frames, no summary (torchrun's own)."""
    log = tmp_path / "torchrun.log"
    log.write_text(
        "Root Cause (first observed failure):\n[0]:\n  rank      : 0 (local_rank: 0)\n"
        "  exitcode  : 1 (pid: 7)\n  traceback : To enable traceback see: ...\n=====\n"
    )
    error = tmp_path / "rank-0.error"
    error.write_text(
        "Traceback (most recent call last):\n"
        '  File "a.py", line 1, in f\n    raise KeyError(1)\nKeyError: 1\n\n'
        "During handling of the above exception, another exception occurred:\n\n"
        "Traceback (most recent call last):\n"
        '  File "m.py", line 9, in forward\n    raise ShardLost("a\\nb")\n'
        "dlperf_user_m.ShardLost: shard 7\nwent away\n"
    )
    lines = error_lines(tmp_path, log, 1).splitlines()
    assert lines[0] == "worker rank 0 failed: ShardLost: shard 7"
    assert lines[-2:] == ["dlperf_user_m.ShardLost: shard 7", "went away"]
    error.write_text("Fatal Python error: Aborted\n")
    (head, *_) = error_lines(tmp_path, log, 1).splitlines()
    assert head == "worker rank 0 failed (exit code 1 (pid: 7))"


@pytest.mark.faults  # over 10 s under load: make test-faults
def test_dlperfs_own_error_in_a_worker_is_its_one_line(
    cli: Callable[..., CliResult], db: str, tmp_path: Path
) -> None:
    model = tmp_path / "usermodel.py"
    r = cli(*_args(_experiment(tmp_path, WORKER_ONLY), 8, workers=1))
    assert r.code == 1, r.err
    _no_traceback(r.err)
    said = f"factory {model}:Net returned int, not a torch.nn.Module"
    assert _said(f"failed: {said}", r.err), r.err
    assert _failed_point(db) == said


@pytest.mark.faults  # over 10 s under load: make test-faults
def test_a_loss_that_stops_being_finite_on_one_rank_fails_the_point_in_one_line(
    cli: Callable[..., CliResult], db: str, tmp_path: Path
) -> None:
    r = cli(*_args(_experiment(tmp_path, NAN_ON_RANK_1), 8))
    assert r.code == 1, r.err
    _no_traceback(r.err)
    # rank 1's, the first: a plain run's line (fp32: run.precision = "fp32" not advised)
    said = str(Diverged(1, 1, math.nan, 0.05, precision="fp32"))
    assert said.startswith("loss became nan at step 1 (epoch 1); before any update")
    assert _said(f"failed: {said}", r.err), r.err
    assert _failed_point(db) == said


def _steps(check: Divergence, losses: list[float]) -> None:
    check.on_epoch_start(1, ())
    for step, loss in enumerate(losses, 1):
        stepped = Stepped(torch.tensor(loss), None, 0.1)
        check.on_step_end(StepEnd("ddp", step, None, None, stepped, None))
    check.on_epoch_end(1)


def test_the_earliest_divergence_of_any_rank_is_raised_on_every_rank() -> None:
    """Each rank raises the same line (the study may read any rank's): the rank whose loss
    stopped being finite first, this one's or a peer's."""
    rank_1: Any = (2, 1, math.inf, 0.1)  # its loss was inf at step 2
    with pytest.raises(Diverged) as peer:
        _steps(Divergence(lambda mine: [mine, rank_1]), [1.0, 2.0, 3.0])
    assert str(peer.value) == str(Diverged(2, 1, math.inf, 0.1))
    with pytest.raises(Diverged) as mine:
        _steps(Divergence(lambda mine: [mine, rank_1]), [1.0, math.nan, math.inf])
    assert str(mine.value) == str(Diverged(2, 1, math.nan, 0.1))  # a tie: the lower rank's
    _steps(Divergence(lambda mine: [mine]), [1.0, 2.0])  # all finite: nothing raised
