"""Break-it round 60, T1 cause 1: `dlperf export` of a model file whose factory builds the
network in float64, float16 or bfloat16 blamed the input: "model 'm.py:double' rejects input of
shape (1, 8, 8): mat1 and mat2 must have the same dtype, but got Float and Double", no fix.
`run`, `analyze` and `predict` named the parameters' dtype; export now does too, in run's
words, without run's advice on run.precision (export does not train).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

MODELS = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.f = nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, num_classes))

    def forward(self, x):
        return self.f(x)


def double(num_classes=10, in_channels=1):
    return Net(num_classes, in_channels).double()


def half(num_classes=10, in_channels=1):
    return Net(num_classes, in_channels).half()


def bf16(num_classes=10, in_channels=1):
    return Net(num_classes, in_channels).to(torch.bfloat16)
"""


@pytest.mark.parametrize(
    ("factory", "dtype"), [("double", "float64"), ("half", "float16"), ("bf16", "bfloat16")]
)
def test_export_of_a_model_built_in_another_dtype_names_it(
    cli: Cli, tmp_path: Path, factory: str, dtype: str
) -> None:
    (tmp_path / "m.py").write_text(MODELS)
    done = cli("export", f"m.py:{factory}", "--input", "1,8,8", "--out", "m.onnx")
    one_line(
        done,
        2,
        f"model 'm.py:{factory}': its parameters are {dtype}, but dlperf feeds it float32 images "
        "(build it in float32 (no .double() or .half(), no torch.set_default_dtype))",
    )
    assert "run.precision" not in done.err
    assert not (tmp_path / "m.onnx").exists()
