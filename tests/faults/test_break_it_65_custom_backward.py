"""Break-it round 65, Y1 cause 1: a model's own torch.autograd.Function backward.

Before: a custom backward returning a gradient of the wrong shape (or too many) was "its
backward fails ... (every operation from the parameters to the scores must have a backward in
torch)", a false hint: the operation has a backward, which returns the wrong thing; and a
RuntimeError raised by a torch operation on the backward's own line (`g.view(3, -1, 7)`) was
"its backward fails", exit 2, in `run`, and "the model's backward cannot be counted" in
`analyze --train`, with no frame of the model file. Now the first gets a hint naming the
custom Function's contract, and the second is the model's error, exit 1, ending at its line
(in a backward the tensors are gradients, not the input: what raises in the model's code there
is the model's).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import TINY, CliResult

Cli = Callable[..., CliResult]

MODEL = """\
import torch
from torch import nn


class WrongShape(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g[:1]


class Raises(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g.view(3, -1, 7)


class Net(nn.Module):
    def __init__(self, fn, num_classes):
        super().__init__()
        self.fn = fn
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        return self.fn.apply(self.fc(x.flatten(1)))


def wrong_shape(num_classes=10, in_channels=1):
    return Net(WrongShape, num_classes)


def raises(num_classes=10, in_channels=1):
    return Net(Raises, num_classes)
"""

CONTRACT = (
    "(the model's torch.autograd.Function backward must return one gradient per input of its "
    "forward, each of that input's shape (None for one that needs none)"
)
RAISED = [
    "error: the model raised RuntimeError: shape '[3, -1, 7]' is invalid for input of size 20",
    "    return g.view(3, -1, 7)",
    "(the whole traceback: dlperf --debug ...)",
]


@pytest.fixture
def model(tmp_path: Path) -> Path:
    (tmp_path / "m.py").write_text(MODEL)
    (tmp_path / "base.toml").write_text(TINY.format(epochs=1))
    return tmp_path / "m.py"


def test_run_names_the_custom_functions_contract(cli: Cli, model: Path) -> None:
    done = cli("run", "base.toml", "--set", "model.name=m.py:wrong_shape")
    assert done.code == 2, done.err
    assert "returned an invalid gradient at index 0" in done.err
    assert done.err.rstrip().endswith(f"{CONTRACT})"), done.err


def test_analyze_names_the_custom_functions_contract(cli: Cli, model: Path) -> None:
    done = cli("analyze", "m.py:wrong_shape", "--input", "1,8,8", "--batch", "2", "--train")
    assert done.code == 2, done.err
    assert "returned an invalid gradient at index 0" in done.err and CONTRACT in done.err


@pytest.mark.parametrize("command", ["run", "analyze"])
def test_a_torch_op_raising_on_the_backwards_own_line_is_the_models_error(
    cli: Cli, model: Path, command: str
) -> None:
    args = (
        ("run", "base.toml", "--set", "model.name=m.py:raises")
        if command == "run"
        else ("analyze", "m.py:raises", "--input", "1,8,8", "--batch", "2", "--train")
    )
    done = cli(*args)
    assert done.code == 1, done.err
    lines = done.err.splitlines()
    assert [lines[0], lines[-2], lines[-1]] == RAISED, done.err
    assert lines[1].endswith(", line 22, in backward"), done.err
    assert len(lines) == 4, done.err  # the model's frame alone: none of dlperf's or torch's
