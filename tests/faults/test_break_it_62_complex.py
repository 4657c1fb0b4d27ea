"""Break-it round 62, V1 cause 1: a model file whose Linear holds a complex64 weight beside
float32 ones was refused by `dlperf run` as "the model rejects digits images of shape (1, 8,
8): self and mat2 must have the same dtype ... ComplexFloat", the images blamed, where a
float64 or bfloat16 weight was named. Complex parameters are now counted with the floating
ones: run and analyze name the weight and its dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

MODEL = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.a = nn.Linear(in_channels * 64, 32)
        self.f = nn.Linear(32, num_classes)
        self.f.weight = nn.Parameter(self.f.weight.data.to(torch.complex64))

    def forward(self, x):
        return self.f(self.a(x.flatten(1)))
"""


def test_a_complex_weight_is_named_not_the_images(
    cli: Cli, store: RunStore, tmp_path: Path
) -> None:
    (tmp_path / "m.py").write_text(MODEL)
    (tmp_path / "e.toml").write_text(
        '[model]\nname = "m.py:Net"\n[data]\nname = "digits"\nlimit = 64\n[train]\nepochs = 1\n'
    )
    one_line(
        cli("run", "e.toml"),
        2,
        f"error: model '{tmp_path}/m.py:Net': its parameters (f.weight) are complex64, but dlperf "
        "feeds it float32 images",
    )
    assert store.list_runs() == []
    one_line(
        cli("analyze", "m.py:Net", "--input", "1,8,8"),
        2,
        "error: the model's parameters (f.weight) are complex64, but analyze feeds it float32 "
        "input",
    )
