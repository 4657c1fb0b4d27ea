"""Break-it round 30, review of 176f34e (export's random forward, predict's lower-bound row).

C1 (10). A stateful eval forward (self.k += 1, a buffer changed in place on each call) failed
export's parity check as "its forward is random (torch.rand*, F.dropout(training=True), ...)".
Now the state a second forward changed is named: "its forward changes its attribute 'k',
buffer 'seen' on each call", exit 1, no file.
C2 (11). With `--flops`, predict's "not counted" row said every figure below was a lower bound,
the FLOPs ÷ peak rows too, which use the given FLOPs: now those are left out of the claim.
C3 (13). analyze's warning and predict's row list the operators through one function
(`counting.listed_ops`), so the two say them alike.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from torch import nn

from dlperf.analytic.counting import analyze_module, listed_ops
from dlperf.analytic.paleo import predict_with_basis
from dlperf.analytic.views import prediction_tables
from tests.analytic.test_paleo import FAKE
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

# The reviewer's stateful model: a Python attribute and a buffer changed on each call (one
# model, one export: each is named).
MODEL = """
import torch, torch.nn as nn

class Count(nn.Module):
    def __init__(s, c, n):
        super().__init__()
        s.b = nn.Sequential(nn.Flatten(), nn.Linear(c * 64, n))
        s.k = 0
        s.register_buffer("seen", torch.zeros(()))
    def forward(s, x):
        s.k += 1
        s.seen.add_(1)
        return s.b(x) * s.k * s.seen

def count(num_classes=10, in_channels=1): return Count(in_channels, num_classes)
"""


def test_a_stateful_eval_forward_is_named_stateful_not_random(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.py").write_text(MODEL)
    result = cli("export", "m.py:count", "--input", "1,8,8", "--out", str(tmp_path / "c.onnx"))
    assert (result.code, result.out) == (1, ""), (result.code, result.out, result.err)
    [line] = [s for s in result.err.splitlines() if s.startswith("check failed")]
    # before: "... its forward is random (torch.rand*, F.dropout(training=True), ...), ..."
    assert line.startswith(
        "check failed: model 'm.py:count' gives other scores each time in eval mode on one "
        "input (by up to "
    ), line
    assert line.endswith(
        "at batch 8 (random input)): its forward changes its attribute 'k', buffer 'seen' on "
        "each call, so its parity with ONNX Runtime cannot be checked; make the forward "
        "deterministic when not self.training"
    ), line
    assert list(tmp_path.glob("*c.onnx*")) == []


class Bil(nn.Module):
    """nn.Bilinear is aten._trilinear, which no handler counts."""

    def __init__(self) -> None:
        super().__init__()
        self.b = nn.Bilinear(16, 16, 4)

    def forward(self, x):  # type: ignore[no-untyped-def]
        return self.b(x, x) + self.b(x, x)


@pytest.mark.parametrize("flops", [None, 1e9])
def test_the_lower_bound_row_leaves_out_the_given_flops(flops: float | None) -> None:
    analysis = analyze_module(Bil(), [16], 2)
    shown = {
        row[0]: row[1]
        for row in prediction_tables(predict_with_basis(analysis, FAKE, flops=flops))[-1].rows
    }
    ops = listed_ops(analysis.unsupported_ops)
    assert ops == "aten._trilinear x2"
    # C3: analyze's warning lists them as the row does
    assert analysis.unsupported_note() == f"not counted (no handler for these operators): {ops}"
    row = shown["not counted (no handler for these operators)"]
    if flops is None:
        assert row == f"{ops}: times and FLOPs below are lower bounds, images/s upper bounds"
    else:  # before: the same words, FLOPs ÷ peak's rows (the given FLOPs) in the claim
        assert row == (
            f"{ops}: times and counted FLOPs below are lower bounds, images/s upper bounds "
            "(not FLOPs ÷ peak's: they use the given FLOPs)"
        )
        assert shown["  FLOPs per image"].startswith("1 G given (--flops); ")
