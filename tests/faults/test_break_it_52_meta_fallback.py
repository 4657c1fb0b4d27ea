"""Break-it round 52, fixer F5: a model torch's own parametrization cannot build on meta.

T1 C2. `dlperf analyze` and `dlperf predict` of a model holding
`torch.nn.utils.parametrizations.orthogonal(nn.Linear(64, 10))` refused it, exit 2: "the
model rejects input [1, 1, 8, 8]: TypeError: unsupported operand type(s) for @: 'NoneType'
and 'Tensor'", though plain torch, `run` and `export` run it. The model is built with its
weights on the meta device, and torch's register_parametrization passes over a
NotImplementedError of the parametrization's right_inverse: the orthogonal map completes the
10x64 weight to a 64x64 orthogonal `base` by torch.geqrf, which has no Meta kernel, so on meta
`base` stayed None and every forward failed inside torch's parametrizations.py, blamed on the
input. A meta build whose parametrizations fail for a reason the meta device explains is now
built on real CPU tensors, as a run builds it, and counted as any other model: params
64*10 + 10, MACs 640 of the linear layer + 64*64*10 of `base @ Q`. A parametrization raising
its own error, and an input of the wrong shape, are told as before.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

import dlperf
from dlperf.errors import UserError
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

MODELS = """
import torch.nn as nn
from torch.nn.utils import parametrizations as P, parametrize


def orth(num_classes=10):
    return nn.Sequential(nn.Flatten(), P.orthogonal(nn.Linear(64, num_classes)))


class Refuses(nn.Module):
    def forward(self, w):
        raise ValueError("my own parametrization refuses")


def own(num_classes=10):
    fc = nn.Linear(64, num_classes)
    parametrize.register_parametrization(fc, "weight", Refuses(), unsafe=True)
    return nn.Sequential(nn.Flatten(), fc)
"""

INPUT = (1, 8, 8)
LINEAR = 64 * 10  # the linear layer's products of one 64-pixel image
BASE = 64 * 64 * 10  # base @ Q: the 64x64 orthogonal completion by the 64x10 householder map


@pytest.fixture
def models(tmp_path: Path) -> Path:
    path = tmp_path / "o.py"
    path.write_text(MODELS)
    return path


def test_an_orthogonal_linear_layer_is_counted(models: Path) -> None:
    """Was: the model rejects input [1, 1, 8, 8]: TypeError ... 'NoneType' and 'Tensor'."""
    a = dlperf.analyze(f"{models}:orth", INPUT)
    assert (a.totals["params"], a.totals["macs"]) == (64 * 10 + 10, LINEAR + BASE)
    rows = {r["name"]: r for r in a.layers}
    # the flattened image 64, the layer's output 10, the parametrized weight 10x64
    assert [rows[n]["activations"] for n in ("0", "1", "1.parametrizations.weight.0")] == [
        64,
        10,
        640,
    ]
    assert rows["1.parametrizations.weight.0"]["output_shape"] == [10, 64]
    assert a.totals["activations"] == 64 + 10 + 640


def test_predict_counts_it_too(cli: Cli, models: Path) -> None:
    result = cli("predict", f"{models}:orth", "--input", "1,8,8", "--device", "K80", "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["flops_over_peak"]["counted_macs_per_image"] == LINEAR + BASE


def test_an_input_of_another_shape_is_still_refused_as_the_inputs(models: Path) -> None:
    with pytest.raises(UserError, match=r"the model rejects input \[1, 1, 4, 4\]"):
        dlperf.analyze(f"{models}:orth", (1, 4, 4))


def test_a_parametrizations_own_error_is_still_its_own(models: Path) -> None:
    with pytest.raises(ValueError, match="my own parametrization refuses"):
        dlperf.analyze(f"{models}:own", INPUT)
