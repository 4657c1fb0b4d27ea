"""Break-it round 26 (P1: the user's own models), analyze's counts (fixer fxE):

C1. `analyze --train`'s training memory summed the parameters only: a 256 MiB registered
buffer counted 0 B, batch norm's running statistics too (the saved-tensor hooks took buffers
for weights, so they were no saved activations either). Buffers now have a row of their own,
`buffers_bytes` (distinct storages, none shared with a parameter), in the totals.
C4. A model whose train(mode) ignores mode=False was counted, dry-checked and evaluated in
training mode (dropout on in validation and test), silently: switching to eval mode now
refuses, in one line naming the module left in training mode and the fix.
C6. Operators of standard layers were "not counted": weight_norm's _weight_norm_interface (and
its backward), parametrized spectral_norm's vdot, nn.Upsample nearest's backward and tril
(a causal mask). Each now has a rule, checked against hand counts.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn.utils import parametrizations

import dlperf
from dlperf.analytic.counting import analyze_module
from dlperf.analytic.tables import totals_table
from dlperf.errors import UserError
from tests.conftest import CliResult
from tests.faults.test_break_it_22_counting import _counted
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

MODELS = """
import torch, torch.nn as nn


class HugeBuffer(nn.Module):
    # the tester's: a 256 MiB lookup table the forward reads
    def __init__(self, num_classes=10):
        super().__init__()
        self.fc = nn.Linear(64, num_classes)
        self.register_buffer("table", torch.zeros(64 * 1024 * 1024))
        # mine: a view of the table and a parameter under a buffer's name: no more bytes
        self.register_buffer("head", self.table[:1024])
        self.register_buffer("alias", self.fc.weight.detach())

    def forward(self, x):
        return self.fc(x.flatten(1)) + self.table[:1]


class AlwaysTrain(nn.Module):
    # the tester's: train(mode) ignores mode, so eval() leaves dropout on
    def __init__(self, num_classes=10):
        super().__init__()
        self.f = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Dropout(0.5),
                               nn.Linear(32, num_classes))

    def forward(self, x):
        return self.f(x)

    def train(self, mode=True):
        return super().train(True)


def hugebuf(num_classes=10):
    return HugeBuffer(num_classes)


def always(num_classes=10):
    return AlwaysTrain(num_classes)
"""


@pytest.fixture
def models(tmp_path: Path) -> Path:
    path = tmp_path / "mine26.py"
    path.write_text(MODELS)
    return path


# --- C1: buffers in the training memory ---------------------------------------------------------


def test_training_memory_counts_buffers(cli: Cli, models: Path) -> None:
    """Before: weights 2.6 KB, training memory 8 KB / 10.7 KB, the 256 MiB table nowhere."""
    doc = _counted(cli, "analyze", f"{models}:hugebuf", "--input", "1,8,8", "--train")
    memory = doc["totals"]["training_memory"]
    weights = 650 * 4
    table = 64 * 2**20 * 4
    assert memory["weights_bytes"] == memory["gradients_bytes"] == weights
    assert memory["buffers_bytes"] == table
    saved = memory["saved_activations_bytes"]
    assert memory["total_bytes"] == {
        "sgd_momentum": 3 * weights + table + saved,
        "adam": 4 * weights + table + saved,
    }
    rows = dict(totals_table(doc).rows)
    assert rows["buffers"] == "268 MB"  # 256 MiB
    assert rows["training memory SGD momentum / Adam"].endswith(" MB")

    # batch norm's running statistics: 2 x 4 float32 and an int64 count
    net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(144, 2))
    memory = dlperf.analyze(net, (1, 8, 8), train=True).to_dict()["totals"]["training_memory"]
    assert memory["buffers_bytes"] == 2 * 4 * 4 + 8
    params = sum(p.numel() for p in net.parameters())
    assert memory["weights_bytes"] == 4 * params
    saved = memory["saved_activations_bytes"]
    assert memory["total_bytes"]["sgd_momentum"] == 3 * 4 * params + 40 + saved


# --- C4: a train(mode) that ignores mode=False --------------------------------------------------


def test_a_model_left_in_training_mode_by_eval_is_refused(
    cli: Cli, models: Path, tiny_exp: Callable[..., Path]
) -> None:
    """Before: analyze counted it, and run trained it and measured validation and test with
    dropout on (accuracy changing run to run); export then blamed ONNX Runtime."""
    spec = f"{models}:always"
    said = ("train(False) left (model) (AlwaysTrain)", "in training mode", "super().train(mode)")
    one_line(cli("analyze", spec, "--input", "1,8,8"), 2, *said)
    r = cli("run", str(tiny_exp(epochs=1)), "--set", f'model.name="{spec}"')
    one_line(r, 2, *said)

    # a submodule whose own train() ignores it is named, wherever it is
    class StaysOn(nn.Dropout):
        def train(self, mode: bool = True) -> StaysOn:
            self.training = True
            return self

    net = nn.Sequential(nn.Flatten(), nn.Sequential(nn.Linear(64, 8), StaysOn()))
    with pytest.raises(UserError, match=r"left 1\.1 \(StaysOn\) in training mode"):
        analyze_module(net, [1, 8, 8])
    # train(True) may keep a frozen module in eval mode (a frozen backbone's batch norm)
    frozen = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(72, 2))
    original = frozen.train

    def train(mode: bool = True) -> nn.Module:
        original(mode)
        frozen[1].eval()
        return frozen

    frozen.train = train  # type: ignore[method-assign]
    assert analyze_module(frozen, [1, 8, 8], train=True).training_memory is not None


# --- C6: operators of standard layers -----------------------------------------------------------


def _flops(model: nn.Module, train: bool, shape: list[int] | None = None) -> tuple[int, int, int]:
    """Forward FLOPs, backward FLOPs and MACs (forward + backward), every operator counted."""
    a = analyze_module(model, shape or [4], batch=2, train=train)
    assert a.unsupported_ops == {}, a.unsupported_ops
    t = a.totals()
    return t["flops"], t.get("backward_flops", 0), t["macs"] + t.get("backward_macs", 0)


@pytest.mark.parametrize("which", ["parametrizations", "hook"])
def test_weight_norm_is_counted(which: str) -> None:
    """Before: aten._weight_norm_interface x1, aten._weight_norm_interface_backward x1 not
    counted. By hand, v [3, 4] and g [3, 1]: the norm of each row (square, add: 2 per element),
    g / norm (1 per row), v times that (1 per element) = 3 x 12 + 3 = 39; the backward's
    grad_g = sum(grad_w * v) / norm and grad_v = g / norm * (grad_w - v * grad_g / norm):
    5 per element and 3 per row = 5 x 12 + 3 x 3 = 69."""
    torch.manual_seed(0)
    plain = nn.Linear(4, 3)
    if which == "hook":
        with pytest.warns(FutureWarning):
            normed = nn.utils.weight_norm(nn.Linear(4, 3))
    else:
        normed = parametrizations.weight_norm(nn.Linear(4, 3))
    forward, backward, macs = _flops(normed, train=True)
    plain_forward, plain_backward, plain_macs = _flops(plain, train=True)
    assert forward - plain_forward == 3 * 12 + 3
    assert backward - plain_backward == 5 * 12 + 3 * 3
    assert macs == plain_macs


def test_parametrized_spectral_norm_is_counted() -> None:
    """Before: aten.vdot x1 not counted. In eval mode sigma = vdot(u, mv(W, v)): W [3, 4]
    takes 12 products, u . (W v) 3, the linear itself 2 x 12; W / sigma 12 divides."""
    normed = parametrizations.spectral_norm(nn.Linear(4, 3))
    forward, _, macs = _flops(normed, train=False)
    assert macs == 12 + 3 + 2 * 12
    plain_forward, _, _ = _flops(nn.Linear(4, 3), train=False)
    assert forward - plain_forward == 2 * (12 + 3) + 12


def test_nearest_upsampling_backward_is_counted() -> None:
    """Before: aten.upsample_nearest2d_backward x1 not counted. Its backward adds each of the
    output's 2 x 6 x 6 gradients into the input position it was copied from: 72 adds."""
    for up in (nn.Upsample(scale_factor=2), nn.Upsample(scale_factor=2, mode="nearest-exact")):
        model = nn.Sequential(nn.Conv2d(1, 1, 1), up)
        a = analyze_module(model, [1, 3, 3], batch=2, train=True)
        assert a.unsupported_ops == {}, a.unsupported_ops
        (row,) = [r for r in a.layers if r.name == "1"]
        assert (row.macs, row.flops, row.backward_flops) == (0, 0, 72)


def test_tril_and_triu_are_no_arithmetic() -> None:
    """Before: aten.tril x1 not counted (a causal mask); they copy or zero: no FLOPs."""

    class Masked(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            square = x.reshape(x.shape[0], 2, 2)
            ones = torch.ones(2, 2, device=x.device)
            mask = ones.clone().tril_() + ones.triu(1)
            return (square.tril() * mask).flatten(1)

    forward, _, macs = _flops(Masked(), train=False)
    assert (forward, macs) == (4 + 2 * 4, 0)  # the add of the masks, the multiply
