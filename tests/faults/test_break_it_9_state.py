"""The ninth break-it round's loose ends: a model state torch's safe loader refuses, told up
front; and a backward torch cannot run in `predict --measure`.

A module whose extra state held a NumPy array trained its first epoch and then failed the run
at its first checkpoint ("the model's state '_extra_state' holds a value torch's safe loader
refuses", exit 2, the run stored `failed`, the epoch wasted). It is now refused with the
model's other checks, before anything is recorded, whenever the run writes checkpoints; the
save keeps its own check as the backstop. `predict --measure --train` of a model whose
backward torch runs on the meta device (analyze counted it) but not on real tensors (an
operation with no derivative on that path) was torch's traceback from the timed step, exit 1.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

import dlperf
from dlperf.engine import checkpoint
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_break_it_9_misc import MODELS as ROUND_9_MODELS
from tests.faults.test_break_it_9_misc import _exp

Cli = Callable[..., CliResult]

# Two models whose backward fails only off the meta device, where analyze counts: measuring,
# not counting, meets it; beside the ninth round's (tests/faults/test_break_it_9_misc.py).
OFF_META = """

class ZetaOffMeta(Zeta):
    def forward(self, x):
        f = x.flatten(1)
        if not x.is_meta:
            f = torch.special.zeta(2 + self.a.abs(), f.abs() + 1)
        return self.fc(f)


def zeta_off_meta(num_classes=10, in_channels=1):
    return ZetaOffMeta(num_classes, in_channels)


class FuseOffMeta(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 1

    @staticmethod
    def backward(ctx, grad):
        if not grad.is_meta:
            raise Melted("fuse blew in the backward")
        return grad


class BlowsOffMeta(Base):
    def forward(self, x):
        return FuseOffMeta.apply(self.fc(x.flatten(1)))


def blows_off_meta(num_classes=10, in_channels=1):
    return BlowsOffMeta(num_classes, in_channels)
"""
MODELS = ROUND_9_MODELS + OFF_META

REFUSED = (
    "error: the model's state '_extra_state' holds a value torch's safe loader refuses "
    "(numpy.ndarray), so its checkpoint could never be loaded (--resume, export, "
    "model.weights): keep model state to tensors (e.g. torch.tensor(...))"
)


@pytest.fixture
def models(tmp_path: Path) -> Path:
    path = tmp_path / "models.py"
    path.write_text(MODELS)
    return path


def _one_line(result: CliResult, code: int = 2, after: str = "") -> str:
    """The one line of the error, after the progress lines that start with `after`."""
    assert result.code == code, (result.code, result.out, result.err)
    assert "Traceback" not in result.err, result.err
    lines = result.err.strip().splitlines()
    assert lines[-1].startswith("error: "), result.err
    assert all(after and line.startswith(after) for line in lines[:-1]), result.err
    return lines[-1]


# --- 1. a model state the safe loader refuses, refused before training ---------------------------


def test_a_model_state_the_safe_loader_refuses_is_one_line_before_any_epoch(
    cli: Cli, tmp_path: Path, models: Path, store: RunStore
) -> None:
    exp = _exp(tmp_path, f"{models}:extra_state")
    result = cli("run", str(exp))
    # before: "epoch 1/1 ..." and then this line, exit 2, the run stored failed
    line = _one_line(result)
    assert "epoch 1" not in result.out + result.err, (result.out, result.err)
    assert line.startswith(REFUSED), line
    assert "run.checkpoint = false" in line, line
    assert store.list_runs() == []
    assert not list((tmp_path / "runs").rglob("checkpoint.pt"))


def test_a_sweep_refuses_it_before_any_point(
    cli: Cli, tmp_path: Path, models: Path, store: RunStore
) -> None:
    exp = _exp(tmp_path, f"{models}:extra_state")
    (tmp_path / "sw.toml").write_text(f'base = "{exp}"\n[grid]\n"train.lr" = [0.05, 0.1]\n')
    line = _one_line(cli("sweep", str(tmp_path / "sw.toml")))
    # before: point 1 trained an epoch and failed; the sweep went on, exit 1
    assert line.startswith(f"error: {tmp_path / 'sw.toml'} point 1 (train.lr=0.05): "), line
    assert REFUSED.removeprefix("error: ") in line, line
    assert store.list_runs() == []


def test_the_api_raises_user_error_before_any_epoch(
    tmp_path: Path, models: Path, store: RunStore
) -> None:
    exp = _exp(tmp_path, f"{models}:extra_state")
    with pytest.raises(UserError, match="holds a value torch's safe loader refuses"):
        dlperf.run(exp, store=store)
    assert store.list_runs() == []


def test_without_checkpoints_such_a_model_still_trains(
    cli: Cli, tmp_path: Path, models: Path, store: RunStore
) -> None:
    exp = _exp(tmp_path, f"{models}:extra_state", checkpoint=False)
    result = cli("run", str(exp))
    assert result.code == 0, (result.code, result.out, result.err)
    [run] = store.list_runs()
    assert run.status == "finished"


def test_the_save_still_refuses_it_as_the_backstop(tmp_path: Path) -> None:
    """A state that turns unloadable only after training began (the checks saw it sound)."""
    path = tmp_path / "checkpoint.pt"
    slot = checkpoint.Slot(path, checkpoint.Owner("store", 1, "hash"))
    model = {"fc.weight": torch.zeros(2, 2), "_extra_state": {"calib": np.arange(3.0)}}
    with pytest.raises(UserError) as caught:
        checkpoint.save(slot, {"model": model})
    assert f"error: {caught.value}" == REFUSED
    assert not path.exists()


# --- 2. predict --measure of a backward torch cannot run -----------------------------------------


def _predict(cli: Cli, models: Path, factory: str) -> CliResult:
    return cli(
        "predict", f"{models}:{factory}", "--input", "1,8,8", "--train", "--measure",
        "--reps", "1",
    )  # fmt: skip


def test_predict_measure_of_a_backward_torch_refuses_on_meta_is_analyzes_line(
    cli: Cli, models: Path
) -> None:
    """Counted first: the count's own line, before anything is measured (a guard)."""
    line = _one_line(_predict(cli, models, "zeta"))
    assert line.startswith(
        "error: the model's backward cannot be counted: NotImplementedError: the derivative "
        "for 'zeta' is not implemented"
    ), line


def test_predict_measure_of_a_backward_torch_refuses_off_meta_is_one_line(
    cli: Cli, models: Path, store: RunStore
) -> None:
    result = _predict(cli, models, "zeta_off_meta")
    # before: torch's traceback from the timed step, exit 1
    line = _one_line(result, after="preparing the calibration kernels")
    assert line.startswith(
        "error: the model's backward cannot be measured: NotImplementedError: the derivative "
        "for 'zeta' is not implemented"
    ), line
    assert "Could this error message be improved" not in line, line
    [run] = store.list_runs()
    assert run.status == "failed"


@pytest.mark.faults  # over 10 s under load: make test-faults
def test_predict_measure_still_tells_the_models_own_exception_in_its_backward(
    cli: Cli, models: Path
) -> None:
    result = _predict(cli, models, "blows_off_meta")
    assert result.code == 1, (result.code, result.out, result.err)
    assert "Traceback" not in result.err, result.err
    lines = result.err.splitlines()
    assert "error: the model raised Melted: fuse blew in the backward" in lines, result.err
    assert any(line.strip().startswith('File "') and "models.py" in line for line in lines), (
        result.err
    )
