"""Break-it round 30, review of 22b9d10: when a non-finite evaluation loss is training's divergence.

C1. divergence.blown_up read a peak past 100 x |first| as a blown-up training: a loss starting
near 0 (a fine-tune, 3e-4; or exactly 0) crosses it on noise, and a spike that recovered counted,
so an eval-mode bug in such a run was blamed on divergence. Now the peak must pass 100 x
max(|first|, 1), and in the loop the last loss before evaluation too.
C2. The loop's weights check read parameters() only: batch norm's running statistics (buffers)
gone non-finite were blamed on the model's eval mode. Now the buffers are read too.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from dlperf.engine.divergence import blown_up
from dlperf.engine.loop import EvaluationDiverged, MetricBuffer, Rows
from dlperf.engine.step import Stepped

LOWER_LR = "try a lower train.lr (now 1e+09) or train.grad_clip = 1.0"


@pytest.mark.parametrize(
    ("first", "peak", "said"),
    [
        (3e-4, 0.05, None),  # a fine-tune's noise: x166 its first, far below a blow-up
        (0.0, 0.01, None),
        (3e-4, 500.0, "from 0.0003 (step 1) to 500 (step 2)"),
        (2.3, 1e32, "from 2.3 (step 1) to 1e+32 (step 2)"),
    ],
    ids=["fine-tune", "zero", "fine-tune-blown", "blown"],
)
def test_a_blow_up_is_past_an_absolute_floor(first: float, peak: float, said: str | None) -> None:
    """The rule the doctor reads too. Before: fine-tune and zero were blown up."""
    assert blown_up((1, first), (2, peak)) == said


def _diverged(losses: list[float], model: nn.Module) -> str | None:
    """What the loop says of an evaluation loss of nan after training `model` with `losses`."""
    metrics = MetricBuffer(Rows(), every=1, precision="fp32", lr=1e9)
    for step, loss in enumerate(losses, 1):
        metrics.log(step, Stepped(torch.tensor(loss), None, 0.1), epoch=1)
    diverged = metrics.diverged(EvaluationDiverged(math.nan, "fp32"), model, len(losses))
    return None if diverged is None else str(diverged)


@pytest.mark.parametrize(
    ("losses", "rose"),
    [
        ([3e-4, 0.05, 0.02], None),  # the model's eval mode: EvaluationDiverged stands
        ([0.0, 0.01], None),
        ([2.3, 1e4, 0.5], None),  # a spike that recovered: the weights evaluated are sound
        ([2.3, 1e4, 5e3], "from 2.3 (step 1) to 10000 (step 2), still 5000 at step 3"),
        ([2.3, 1e32], "from 2.3 (step 1) to 1e+32 (step 2)"),
    ],
    ids=["fine-tune", "zero", "recovered", "stayed-up", "blown"],
)
def test_the_loop_blames_divergence_only_for_a_loss_still_blown_up(
    losses: list[float], rose: str | None
) -> None:
    """Before: fine-tune, zero and recovered were 'training diverged'."""
    said = _diverged(losses, nn.Linear(1, 1))
    if rose is None:
        assert said is None
    else:
        assert said == (
            f"training diverged: its loss rose {rose}, and the evaluation loss became nan; "
            + LOWER_LR
        )


def test_a_running_statistic_no_longer_finite_is_divergence() -> None:
    """Before: None (parameters alone were read), so blamed on the model's eval mode."""
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    model[1].running_var[0] = math.inf
    assert _diverged([2.3, 2.1], model) == (
        "training diverged: its buffer 1.running_var was no longer finite after step 2, and the "
        f"evaluation loss became nan; {LOWER_LR}"
    )
