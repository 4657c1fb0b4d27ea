"""The tenth break-it round: a model's own exception on its first forward, and an export whose
model differs at batch 1.

An exception class a model file defines, raised by a `raise` in the model file (its forward, a
forward pre-hook), was told under `run`, `export` and `staleness --train` as the input being
rejected ("the model rejects digits images of shape (1, 8, 8): HookError: ...", exit 2, no
frames), where `analyze` and `predict --measure` told it as the model's: its line, its frames,
exit 1. And `export --dynamic-batch` of a model that returns 5 columns at batch 1 and 10
otherwise passed parity (checked at batch 8 only), although the ONNX graph gives 10 at batch 1.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_break_it_9_misc import _one_line
from tests.faults.test_break_it_9_misc import _told_as_the_models as told_as_the_models

Cli = Callable[..., CliResult]

MODELS = """
import torch
from torch import nn


class Base(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.fc = nn.Linear(in_channels * 8 * 8, num_classes)

    def forward(self, x):
        return self.fc(x.flatten(1))


def plain(num_classes=10, in_channels=1):
    return Base(num_classes, in_channels)


class HookError(Exception):
    pass


class AlwaysRaise(Base):
    def forward(self, x):
        raise HookError("forward always fails")


def always_raise(num_classes=10, in_channels=1):
    return AlwaysRaise(num_classes, in_channels)


def _refuse(module, args):
    raise HookError("pre-hook refused the batch")


def prehook_raises(num_classes=10, in_channels=1):
    model = Base(num_classes, in_channels)
    model.register_forward_pre_hook(_refuse)
    return model


class BuiltinRaise(Base):
    def forward(self, x):
        raise ValueError("expects a calibrated input")


def builtin_raise(num_classes=10, in_channels=1):
    return BuiltinRaise(num_classes, in_channels)


class WrongView(Base):
    def forward(self, x):
        return self.fc(x.view(-1, 7))


def wrong_view(num_classes=10, in_channels=1):
    return WrongView(num_classes, in_channels)


class ColsAtBatch1(Base):
    def forward(self, x):
        y = super().forward(x)
        return y[:, :5] if x.shape[0] == 1 else y


def cols_at_batch1(num_classes=10, in_channels=1):
    return ColsAtBatch1(num_classes, in_channels)
"""

EXP = """
[model]
name = "{model}"
[data]
name = "digits"
limit = 96
[train]
epochs = 1
batch_size = 16
lr = 0.05
[run]
threads = 1
warmup_steps = 1
checkpoint = false
out_dir = "{out}"
"""


@pytest.fixture
def models(tmp_path: Path) -> Path:
    path = tmp_path / "models.py"
    path.write_text(MODELS)
    return path


def _exp(tmp_path: Path, model: str) -> Path:
    path = tmp_path / "exp.toml"
    path.write_text(EXP.format(model=model, out=tmp_path / "runs"))
    return path


def _told_as_the_models(result: CliResult, said: str) -> None:
    """The ninth round's check, and never told as the input being rejected."""
    told_as_the_models(result, said)
    assert "rejects" not in result.err, result.err


# --- 1. a model's own exception on its first forward -------------------------------------------

OWN = [
    ("always_raise", "HookError: forward always fails"),
    ("prehook_raises", "HookError: pre-hook refused the batch"),
    ("builtin_raise", "ValueError: expects a calibrated input"),
]


@pytest.mark.parametrize(("factory", "said"), OWN)
def test_run_tells_a_models_own_exception_as_the_models(
    cli: Cli, tmp_path: Path, models: Path, store: RunStore, factory: str, said: str
) -> None:
    # before: "error: the model rejects digits images of shape (1, 8, 8): HookError: ...", exit 2
    _told_as_the_models(cli("run", str(_exp(tmp_path, f"{models}:{factory}"))), said)
    assert store.list_runs() == []  # refused before anything is recorded, as before


@pytest.mark.parametrize(("factory", "said"), OWN)
def test_export_tells_a_models_own_exception_as_the_models(
    cli: Cli, tmp_path: Path, models: Path, factory: str, said: str
) -> None:
    out = tmp_path / "x.onnx"
    # before: "error: model '...' rejects input of shape (1, 8, 8): HookError: ...", exit 2
    result = cli("export", f"{models}:{factory}", "--input", "1,8,8", "--out", str(out))
    _told_as_the_models(result, said)
    assert not out.exists()


def test_staleness_train_tells_a_models_own_exception_as_the_models(
    cli: Cli, tmp_path: Path, models: Path
) -> None:
    exp = _exp(tmp_path, f"{models}:always_raise")
    result = cli("staleness", "--train", str(exp), "--learners", "2")
    _told_as_the_models(result, "HookError: forward always fails")


def test_torch_refusing_the_input_is_still_one_line(
    cli: Cli, tmp_path: Path, models: Path, store: RunStore
) -> None:
    line = _one_line(cli("run", str(_exp(tmp_path, f"{models}:wrong_view"))))
    assert line.startswith("error: the model rejects digits images of shape (1, 8, 8): "), line
    assert store.list_runs() == []
    out = tmp_path / "x.onnx"
    result = cli("export", f"{models}:wrong_view", "--input", "1,8,8", "--out", str(out))
    line = _one_line(result)
    assert "rejects input of shape (1, 8, 8)" in line, line
    assert not out.exists()


# --- 2. an export's parity at batch 1 ----------------------------------------------------------


def test_export_parity_fails_for_a_model_that_differs_at_batch_1(
    cli: Cli, tmp_path: Path, models: Path
) -> None:
    out = tmp_path / "cb1.onnx"
    # before: exit 0, "parity passed", the graph giving 10 columns at batch 1 where the model 5
    result = cli(
        "export", f"{models}:cols_at_batch1", "--input", "1,8,8", "--out", str(out),
        "--dynamic-batch",
    )  # fmt: skip
    assert result.code == 1, (result.code, result.out, result.err)
    assert "output shapes differ" in result.err, result.err
    assert "batch 1" in result.err, result.err
    assert "Traceback" not in result.err, result.err
    assert not out.exists()
    assert list(tmp_path.glob("cb1.onnx*")) == []


def test_export_of_a_plain_model_still_passes_parity(
    cli: Cli, tmp_path: Path, models: Path
) -> None:
    """The batch-1 check is of a dynamic batch's graph (a fixed batch's plain export passes
    parity in tests/faults/test_break_it_16_export.py, [fixed], and wherever export is run)."""
    out = tmp_path / "plain.onnx"
    args = ("--input", "1,8,8", "--out", str(out), "--dynamic-batch")
    result = cli("export", f"{models}:plain", *args)
    assert result.code == 0, (result.code, result.out, result.err)
    assert out.exists()
