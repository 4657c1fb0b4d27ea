"""dlperf.engine.divergence: the advice of a run whose loss stopped being finite, the same in
the engine's line (Diverged, EvaluationDiverged) and the doctor's fix, leaving out what the
run has in force (break-it round 13, C7; the commands' side is in
tests/faults/test_break_it_13_advice.py)."""

from __future__ import annotations

import math

import pytest

from dlperf.engine.divergence import diverged_fix, either, evaluation_fix
from dlperf.engine.loop import Diverged, EvaluationDiverged

BEFORE_ANY_UPDATE = (
    "before any update, so the model itself, not the learning rate: look at its forward and "
    "the initial values of its layers"
)
IN_EVAL_MODE = "look at what its forward does when not training (model.eval())"
OR_FP32 = ', or try run.precision = "fp32"'


@pytest.mark.parametrize(
    ("step", "lr", "clip", "precision", "advice"),
    [
        (37, 10, None, "bf16", 'try a lower train.lr (now 10), train.grad_clip = 1.0, or run.pr'
         'ecision = "fp32"'),  # docs/run.md's line
        (37, 10, None, "fp16", 'try a lower train.lr (now 10), train.grad_clip = 1.0, or run.pr'
         'ecision = "fp32"'),
        (37, 10, None, None, 'try a lower train.lr (now 10), train.grad_clip = 1.0, or run.prec'
         'ision = "fp32"'),  # not known: advised
        (2, 0.5, 0.5, "bf16", 'try a lower train.lr (now 0.5) or run.precision = "fp32"'),
        (2, 0.5, 5.0, "bf16", 'try a lower train.lr (now 0.5), train.grad_clip = 1.0 (now 5), '
         'or run.precision = "fp32"'),
        (2, 0.5, 5.0, "fp32", "try a lower train.lr (now 0.5) or train.grad_clip = 1.0 (now 5)"),
        (2, 0.5, 1.0, "fp32", "try a lower train.lr (now 0.5)"),
        (None, None, 1.0, "fp32", "try a lower train.lr"),
        (1, 0.5, None, "fp32", BEFORE_ANY_UPDATE),
        (1, 0.5, None, "bf16", BEFORE_ANY_UPDATE + OR_FP32),
    ],
)  # fmt: skip
def test_the_advice_leaves_out_what_is_in_force(
    step: int | None, lr: float | None, clip: float | None, precision: str | None, advice: str
) -> None:
    assert diverged_fix(step, lr, clip, precision) == advice
    if step is not None and lr is not None:  # the engine's line is the same advice
        said = str(Diverged(step, 1, math.nan, lr, grad_clip=clip, precision=precision))
        assert said == f"loss became nan at step {step} (epoch 1); {advice}"


def test_evaluation_advice_leaves_out_fp32_in_fp32() -> None:
    assert evaluation_fix("fp32") == IN_EVAL_MODE
    assert evaluation_fix("bf16") == evaluation_fix(None) == IN_EVAL_MODE + OR_FP32
    assert str(EvaluationDiverged(math.inf, "fp32")).endswith(f"finite; {IN_EVAL_MODE}")


@pytest.mark.parametrize(
    ("options", "said"),
    [(["a"], "a"), (["a", "b"], "a or b"), (["a", "b", "c"], "a, b, or c")],
)
def test_either_joins_the_options_with_or(options: list[str], said: str) -> None:
    assert either(options) == said
