"""The twenty-third break-it round, P1 (the user's own models), causes of `dlperf run`'s checks.

- C1: `misfit` counted an image side as taken whenever the model's forward returned anything:
  an MLP without nn.Flatten (its Linear acts on the last dim and returns [2, 1, 64, 10] at
  side 64) or a forward with a hard-coded batch (x.reshape(32, -1): [32, 10] at side 32) was
  told its images were too small, a fix that cannot work. A side is taken only where the
  output is the classifier's scores, [batch, classes]; otherwise the first error is kept.
- C4: a model of mixed dtypes (its head alone .half()) was told "the model rejects digits
  images of shape ...: mat1 and mat2 must have the same dtype", blaming the images: the odd
  parameter and its dtype are named, as `dlperf analyze` names them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from torch import nn

import dlperf
from dlperf.engine.build import not_float32
from dlperf.engine.checks import dry_forward, misfit
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_break_it_22_models import _unwrapped, _write

RUN = """
[model]
name = "{name}"
[data]
name = "digits"
[train]
epochs = 1
batch_size = 32
lr = 0.05
[run]
threads = 1
checkpoint = false
"""


# --- C1: a forward that returns is not a forward that fits ------------------------------------

NO_FLATTEN = """
import torch.nn as nn
def build(num_classes=10):
    return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, num_classes))
"""

FIXED_BATCH = """
import torch.nn as nn
class N(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__(); self.fc = nn.Linear(64, num_classes)
    def forward(self, x):
        return self.fc(x.reshape(32, -1))
def build(num_classes=10): return N(num_classes)
"""


def _refused(cli: Callable[..., CliResult], tmp_path: Path, text: str) -> tuple[CliResult, str]:
    """`dlperf run` of the model file `text` (its factory `build`), refused with exit 2: the
    result, and its error output without white space (the console wraps it)."""
    path = _write(tmp_path, text)
    (tmp_path / "exp.toml").write_text(RUN.format(name=f"{path}:build"))
    done = cli("run", "exp.toml")
    assert done.code == 2, done.err
    return done, _unwrapped(done.err)


@pytest.mark.parametrize("text", [NO_FLATTEN, FIXED_BATCH], ids=["no-flatten", "fixed-batch"])
def test_a_model_that_returns_the_wrong_shape_at_a_larger_side_is_not_told_too_small(
    cli: Callable[..., CliResult], db: str, tmp_path: Path, text: str
) -> None:
    done, said = _refused(cli, tmp_path, text)
    # before: "digits images of 8x8 are too small for the model: the smallest it takes is
    # 64x64 (32x32)", and the fix offered (data.image_size) only gave a shape error
    assert "too small" not in done.err and "image_size" not in done.err, done.err
    assert _unwrapped("the model rejects digits images of shape (1, 8, 8)") in said, done.err
    assert RunStore.open(db).list_runs() == []  # refused before anything is recorded


def test_misfit_takes_a_side_only_where_the_output_is_the_scores() -> None:
    no_flatten = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    assert misfit(no_flatten, (1, 8, 8), "digits", classes=10) is None
    assert misfit(no_flatten, (1, 8, 8), "digits") is None  # [2, 1, 64, 10] is no score
    # What misfit is for still holds: a kernel larger than the images
    needs_5 = nn.Sequential(nn.Conv2d(1, 1, 5), nn.Flatten(), nn.LazyLinear(10))
    error = misfit(needs_5, (1, 4, 4), "digits", classes=10)
    assert error is not None and "the smallest it takes is 5x5" in error.message
    # ... and not where the scores at the larger side are of another count of classes
    assert misfit(needs_5, (1, 4, 4), "digits", classes=3) is None


# --- C4: a model of mixed dtypes --------------------------------------------------------------

MIXED = """
import torch.nn as nn
def build(num_classes=10, in_channels=1):
    return nn.Sequential(
        nn.Flatten(), nn.Linear(in_channels * 64, 32), nn.ReLU(),
        nn.Linear(32, num_classes).half(),
    )
"""


def test_a_model_of_mixed_dtypes_names_the_odd_parameters_not_the_images(
    cli: Callable[..., CliResult], db: str, tmp_path: Path
) -> None:
    done, said = _refused(cli, tmp_path, MIXED)
    assert "rejects digits images" not in done.err, done.err  # before: the images blamed
    assert (
        _unwrapped("its parameters (3.weight) are float16, but dlperf feeds it float32 images")
        in said
    ), done.err
    assert "Traceback" not in done.err, done.err
    assert RunStore.open(db).list_runs() == []
    # as analyze says it, for the same model
    path = tmp_path / "model.py"  # as _refused wrote it
    analyzed = cli("analyze", f"{path}:build", "--input", "1,8,8")
    assert analyzed.code == 2 and _unwrapped("parameters (3.weight) are float16") in _unwrapped(
        analyzed.err
    ), analyzed.err


def test_a_model_of_mixed_dtypes_is_told_so_through_the_api(tmp_path: Path) -> None:
    path = _write(tmp_path, MIXED)
    config = {
        "model": {"name": f"{path}:build"},
        "data": {"name": "digits"},
        "train": {"epochs": 1, "batch_size": 32},
        "run": {"threads": 1, "checkpoint": False, "out_dir": str(tmp_path / "runs")},
    }
    with pytest.raises(UserError, match=r"parameters \(3\.weight\) are float16"):
        dlperf.run(config, store=f"sqlite:///{tmp_path / 'api.db'}")


MIXED_SHAPES = """
import torch.nn as nn
def build(num_classes=10):
    # float32 body, a float16 layer never reached: the forward fails on its shapes alone
    return nn.Sequential(nn.Linear(64, num_classes), nn.Linear(3, 3).half())
"""


def test_a_model_of_mixed_dtypes_failing_on_its_shapes_is_told_its_shape_error(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    done, said = _refused(cli, tmp_path, MIXED_SHAPES)
    assert _unwrapped("the model rejects digits images of shape (1, 8, 8)") in said, done.err
    assert "float16" not in done.err, done.err


@pytest.mark.parametrize(
    ("odd", "named"),
    [
        (lambda: nn.Sequential(nn.Conv2d(1, 2, 3), nn.Conv2d(2, 2, 3).half()), "1.weight"),
        (lambda: nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2).half()), "1.weight"),
        (lambda: nn.Sequential(nn.Flatten(), nn.Linear(64, 4), nn.Linear(4, 2).double()), "2."),
    ],
    ids=["conv", "batch-norm", "linear-double"],
)
def test_each_of_torchs_dtype_errors_names_the_odd_parameter(
    odd: Callable[[], nn.Module], named: str
) -> None:
    model = odd()
    with pytest.raises(UserError) as refused:
        dry_forward(model, (1, 8, 8), "the model rejects digits images of shape (1, 8, 8)")
    error = not_float32(model, "'m'", refused.value.message)
    assert error is not None and f"its parameters ({named}" in error.message, refused.value


# --- beside C6 (fxC's): what run says of the same autograd refusals ---------------------------

INFERENCE_MODE = """
import torch, torch.nn as nn
class N(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__(); self.c = nn.Conv2d(1, 4, 3, padding=1)
        self.fc = nn.Linear(4*64, num_classes)
    def forward(self, x):
        with torch.inference_mode():
            y = self.c(x)
        return self.fc(y.flatten(1))
def build(num_classes=10): return N(num_classes)
"""

IN_PLACE_PARAMETER = """
import torch, torch.nn as nn
class N(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__(); self.fc = nn.Linear(64, num_classes)
    def forward(self, x):
        self.fc.weight.mul_(0.999)  # a decay of its own, with gradients on
        return self.fc(x.flatten(1))
def build(num_classes=10): return N(num_classes)
"""


@pytest.mark.parametrize(
    ("text", "fix"),
    [
        (INFERENCE_MODE, "torch.no_grad() in forward instead of torch.inference_mode()"),
        (IN_PLACE_PARAMETER, "changes a trained parameter in place: do it under torch.no_grad()"),
    ],
    ids=["inference-mode", "in-place-parameter"],
)
def test_run_of_a_forward_autograd_refuses_names_the_fix(
    cli: Callable[..., CliResult], tmp_path: Path, text: str, fix: str
) -> None:
    done, said = _refused(cli, tmp_path, text)
    assert "cannot be trained" in done.err and _unwrapped(fix) in said, done.err
    # before: the fix for an operation without a backward, which neither is
    assert _unwrapped("must have a backward in torch") not in said, done.err
