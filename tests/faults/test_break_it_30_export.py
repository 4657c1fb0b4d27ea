"""Break-it round 30, P1 causes F2 and F4: export's parity check of a random forward, and
predict --json's uncounted operators.

C1 (F2). A model whose eval forward is random (F.dropout(training=True), torch.rand_like) failed
export's parity check with "ONNX Runtime differs from PyTorch by up to 1.07", sending the user
after the exporter or the runtime. Now PyTorch is run again on a batch that fails; where it
differs from itself the line says the forward is random and parity cannot be checked, exit 1.
C2 (F4). `predict --json` left out the operators it did not count (`analyze --json` carries
`unsupported_ops`): nn.Bilinear (aten._trilinear, counted as 0) predicted an absurd speed with
nothing in the JSON to say so. Now the prediction carries `unsupported_ops`, and its totals
table says the figures are a lower bound.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult

Cli = Callable[..., CliResult]

# The tester's models (bk30 P1, cases 31, 32 and 69), as the user wrote them.
MODELS = """
import torch, torch.nn as nn, torch.nn.functional as F

class Drop(nn.Module):
    def __init__(s, c, n):
        super().__init__()
        s.b = nn.Sequential(nn.Conv2d(c, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                            nn.Flatten(), nn.Linear(8, n))
    def forward(s, x): return F.dropout(s.b(x), 0.5, training=True)

class Noise(Drop):
    def forward(s, x): y = s.b(x); return y + torch.rand_like(y)

def drop(num_classes=10, in_channels=1): return Drop(in_channels, num_classes)
def noise(num_classes=10, in_channels=1): return Noise(in_channels, num_classes)

class Bil(nn.Module):
    def __init__(s, c, n): super().__init__(); s.b = nn.Bilinear(c*64, c*64, n)
    def forward(s, x): f = x.flatten(1); return s.b(f, f)

def bil(num_classes=10, in_channels=1): return Bil(in_channels, num_classes)
"""


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.py").write_text(MODELS)
    return tmp_path


# --- C1 (F2): a random eval forward is named, not ONNX Runtime -------------------------------


@pytest.mark.parametrize("factory", ["drop", "noise"])
def test_a_random_eval_forward_is_named_not_onnx_runtime(
    cli: Cli, models: Path, factory: str
) -> None:
    # before: "check failed: ONNX Runtime differs from PyTorch by up to 1.07 (rtol 0.001,
    # atol 1e-05)", exit 1: PyTorch's own forward gives other scores on one input
    out = models / f"{factory}.onnx"
    result = cli("export", f"m.py:{factory}", "--input", "1,8,8", "--out", str(out))
    assert (result.code, result.out) == (1, ""), (result.code, result.out, result.err)
    [line] = [s for s in result.err.splitlines() if s.startswith("check failed")]
    assert line.startswith(
        f"check failed: model 'm.py:{factory}' gives other scores each time in eval mode on one "
        "input (by up to "
    ), line
    assert line.endswith(
        "at batch 8 (random input)): its forward is random (torch.rand*, "
        "F.dropout(training=True), ...), so its parity with ONNX Runtime cannot be checked; "
        "make the forward deterministic when not self.training"
    ), line
    assert list(models.glob(f"*{factory}.onnx*")) == []  # no file answering at random


# --- C2 (F4): predict --json carries the operators it did not count --------------------------


def test_predict_carries_the_operators_it_did_not_count(cli: Cli, models: Path) -> None:
    """nn.Bilinear is aten._trilinear, which no handler counts: its 40,960 MACs count as 0."""
    args = ("predict", "m.py:bil", "--input", "1,8,8", "--set", "predict.device=k80")
    # before: no "unsupported_ops" key (model, device, ..., flops_over_peak)
    done = cli(*args, "--json")
    assert done.code == 0, done.err
    analyzed = cli("analyze", "m.py:bil", "--input", "1,8,8", "--json")
    unsupported = json.loads(analyzed.out)["unsupported_ops"]
    assert unsupported == {"aten._trilinear": 1}
    assert json.loads(done.out)["unsupported_ops"] == unsupported
    # before: the totals table said nothing of it (MACs 0, no mark)
    table = cli(*args)
    assert table.code == 0, table.err
    rows = [s for s in table.out.splitlines() if "not counted" in s]
    assert len(rows) == 1 and "lower bound" in rows[0] and "aten._trilinear x1" in rows[0], rows
