"""Round 46's Left list: a model whose *submodule* is compiled (`self.body = torch.compile(...)`),
on the export path. Checked by hand in round 46 (run and export at parity, exit 0) with no
test; rounds 39-40 tested a factory that returns a compiled model, not one that holds one.
The export is the network uncompiled: the same operators, weights and dimensions as the file
without the compile, with either batch. Its weights keep the names the model's own state_dict
gives them (`body._orig_mod.0.weight`), as analyze's rows do: only a compiled *whole* model is
named as the module inside (round 39), there being no other name for it. With a dynamic batch
(round 39's failing case) only: four exports cost about 30 s. backend="eager": an
OptimizedModule all the same, without inductor's C++ build.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from tests.conftest import CliResult
from tests.faults.test_break_it_39_compiled import _graph

MODEL = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        body = nn.Sequential(nn.Conv2d(in_channels, 4, 3, padding=1), nn.ReLU())
        self.body = {wrap}
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(4 * 64, num_classes))

    def forward(self, x):
        return self.head(self.body(x))
"""


def test_a_compiled_submodule_exports_as_the_network_uncompiled(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    for name, wrap in (("compiled", 'torch.compile(body, backend="eager")'), ("plain", "body")):
        (tmp_path / f"{name}.py").write_text(MODEL.format(wrap=wrap))
    flags = ["--input", "1,8,8", "--dynamic-batch"]
    result = cli("export", "compiled.py:Net", "--out", "compiled.onnx", *flags)
    assert result.code == 0, result.err
    assert "parity" in result.out and "error" not in result.err, result.err
    assert cli("export", "plain.py:Net", "--out", "plain.onnx", *flags).code == 0
    ops, weights, dims = _graph(tmp_path / "compiled.onnx")
    plain_ops, plain_weights, plain_dims = _graph(tmp_path / "plain.onnx")
    assert (ops, dims) == (plain_ops, plain_dims)
    named = {k.replace("body._orig_mod.", "body."): v for k, v in weights.items()}
    assert named.keys() == plain_weights.keys()
    assert all(np.array_equal(named[k], plain_weights[k]) for k in named)
    assert "body._orig_mod.0.weight" in weights  # the model's own state_dict name
