"""Break-it round 35, P1 (the user's own models), fixer F12.

- C1: a model with a float16 layer that its forward casts to (`x.half()`), under
  run.precision = "fp16", passed the dry checks and ended the run in GradScaler's 60-line
  traceback, "Attempting to unscale FP16 gradients": the fp16 scaler unscales float32
  gradients only. Such a model is refused by the dry checks now, naming the layer's
  parameters and the fixes (build them in float32, autocast runs them in float16; or bf16).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from dlperf.engine.build import build_model
from dlperf.errors import UserError
from tests.engine.test_build import FakeData, experiment

# --- C1: float16 parameters under run.precision = "fp16" ---------------------------------

MIXED = """
import torch, torch.nn as nn
class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=3, frozen=False):
        super().__init__()
        self.c = nn.Conv2d(in_channels, 8, 3, padding=1)
        self.mid = nn.Linear(8, 8).half().requires_grad_(not frozen)
        self.fc = nn.Linear(8, num_classes)
    def forward(self, x):
        x = torch.relu(self.c(x)).mean((2, 3))
        return self.fc(self.mid(x.half()).float())
def net(num_classes=10, in_channels=3, frozen=False):
    return Net(num_classes, in_channels, frozen)
"""


def mixed(tmp_path: Path) -> str:
    (tmp_path / "mix.py").write_text(MIXED)
    return f"{tmp_path / 'mix.py'}:net"


def test_c1_float16_parameters_under_fp16_are_refused_up_front(tmp_path: Path) -> None:
    name = mixed(tmp_path)
    exp = experiment(name, run={"precision": "fp16"})
    with pytest.raises(UserError) as caught:
        build_model(exp, FakeData(), torch.device("cpu"))  # type: ignore[arg-type]
    assert caught.value.message == (
        f"model '{name}': its trained parameters mid.weight, mid.bias are float16, whose "
        'gradients run.precision = "fp16"\'s gradient scaler cannot unscale'
    )
    assert caught.value.hint == (
        "build them in float32, which autocast runs in float16 as it trains, or set "
        'run.precision = "bf16"'
    )


@pytest.mark.parametrize(
    ("precision", "kwargs"), [("bf16", {}), ("fp32", {}), ("fp16", {"frozen": True})]
)
def test_c1_float16_parameters_that_no_scaler_unscales_still_train(
    tmp_path: Path, precision: str, kwargs: dict[str, bool]
) -> None:
    exp = experiment(mixed(tmp_path), run={"precision": precision}, model={"kwargs": kwargs})
    model = build_model(exp, FakeData(), torch.device("cpu"))  # type: ignore[arg-type]
    assert isinstance(model, nn.Module)

