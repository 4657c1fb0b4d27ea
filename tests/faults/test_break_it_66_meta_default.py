"""An API caller's default device of "meta" (round 66, fixer FB's note).

Before: `torch.set_default_device("meta")` in a notebook, then `create_model("m.py:make")`
or `dlperf.analyze` of a model file, failed "model file m.py failed to import: RuntimeError:
Tensor.item() cannot be called on meta tensors": dlperf's probe of the CPU's flush-denormal
setting made its tensor on the default device. The probe is the CPU's, on the CPU; the model
is built on the caller's device, and counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import dlperf
from dlperf.models import create_model

MODEL = """\
from torch import nn
def make(num_classes=10, in_channels=1):
    return nn.Sequential(nn.Flatten(), nn.Linear(64 * in_channels, num_classes))
"""


@pytest.fixture
def on_meta() -> Iterator[None]:
    torch.set_default_device("meta")
    try:
        yield
    finally:
        torch.set_default_device(None)


def test_a_model_file_builds_and_counts_under_a_meta_default_device(
    tmp_path: Path, on_meta: None
) -> None:
    path = tmp_path / "m.py"
    path.write_text(MODEL)
    model = create_model(f"{path}:make", num_classes=10, in_channels=1)
    assert {p.device.type for p in model.parameters()} == {"meta"}
    counted = dlperf.analyze(f"{path}:make", (1, 8, 8))
    assert (counted.totals["params"], counted.totals["macs"]) == (64 * 10 + 10, 64 * 10)
