"""Break-it round 6, `dlperf scale`: a model's own fault at a point (an output without one row
per image, sys.exit in its forward) fails the point with one line, stored and said, not a
worker's traceback; a per-worker batch that batch norm cannot train is refused up front."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.store import RunStore
from tests.distributed.test_study import EXPERIMENT, WEAK

# One row short in batches of more than 4 images: the up-front checks (2 images) pass.
DROP = """
import torch
from torch import nn


class Drop(nn.Module):
    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.c = nn.Conv2d(in_channels, 4, 3, padding=1)
        self.l = nn.Linear(4, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.l(self.c(x).mean((2, 3)))
        return y[:-1] if x.shape[0] > 4 else y


def Net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    return Drop(num_classes, in_channels)
"""
# sys.exit(3) once training is under way (the up-front checks' forwards come first).
EXITER = """
import sys
import torch
from torch import nn


class Exiter(nn.Module):
    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.c = nn.Conv2d(in_channels, 4, 3, padding=1)
        self.l = nn.Linear(4, num_classes)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.calls += 1
            if self.calls > 3:
                sys.exit(3)
        return self.l(self.c(x).mean((2, 3)))


def Net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    return Exiter(num_classes, in_channels)
"""
BN1D = """
from torch import nn


def Net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(in_channels, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.BatchNorm1d(4), nn.Linear(4, num_classes),
    )
"""
POINT = ["--workers", "2", "--steps", "4", "--no-comm-split", "--threads-per-worker", "1",
         "--set", "run.threads=1"]  # fmt: skip


def _experiment(root: Path, model: str) -> Path:
    (root / "usermodel.py").write_text(model)
    path = root / "exp.toml"
    text = EXPERIMENT.replace('name = "smallcnn"', f'name = "{root / "usermodel.py"}:Net"')
    path.write_text(text + f'[run]\nout_dir = "{root / "dlperf_runs"}"\n')
    return path


def _args(exp: Path, batch: int, workers: int = 2) -> list[str]:
    """A point of `workers` workers: 1 where every rank fails alike (a torchrun start and one
    worker's fewer; which rank a study blames of two is test_scale_faults.py's)."""
    weak = [*WEAK]
    weak[weak.index("--per-worker-batch") + 1] = str(batch)
    point = [*POINT]
    point[point.index("--workers") + 1] = str(workers)
    return ["scale", "run", str(exp), *weak, *point]


def _no_traceback(text: str) -> None:
    assert "Traceback" not in text and 'File "' not in text, text


@pytest.mark.faults  # over 10 s under load: make test-faults
def test_a_model_with_too_few_rows_fails_the_point_in_one_line(
    cli: Callable, db: str, tmp_path: Path
) -> None:
    r = cli(*_args(_experiment(tmp_path, DROP), 8, workers=1))
    assert r.code == 1, r.err
    _no_traceback(r.err)
    assert "model Drop returned shape [7, 10] for a batch of 8 images" in r.err
    (run,) = RunStore.open(db).list_runs(kind="scale")
    assert run.status == "failed"
    assert run.error is not None and "\n" not in run.error.strip(), run.error
    assert run.error.startswith("model Drop returned shape [7, 10]"), run.error


@pytest.mark.faults  # over 10 s under load: make test-faults
def test_a_model_calling_sys_exit_fails_the_point_saying_so(
    cli: Callable, db: str, tmp_path: Path
) -> None:
    r = cli(*_args(_experiment(tmp_path, EXITER), 8, workers=1))
    assert r.code == 1, r.err
    _no_traceback(r.err)
    said = "the model called sys.exit(3) during training"
    assert said in r.err
    (run,) = RunStore.open(db).list_runs(kind="scale")
    assert run.status == "failed"
    assert run.error is not None and run.error.startswith(said), run.error
    assert "\n" not in run.error.strip(), run.error


def test_batch_norm_at_a_per_worker_batch_of_one_is_refused_up_front(
    cli: Callable, db: str, tmp_path: Path
) -> None:
    r = cli(*_args(_experiment(tmp_path, BN1D), 1))
    assert r.code == 2, r.err
    _no_traceback(r.err)
    assert "cannot train at" in r.err and len(r.err.strip().splitlines()) <= 2, r.err
    assert RunStore.open(db).list_runs() == []
