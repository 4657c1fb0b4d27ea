"""Break-it round 30, P3 causes F9 and F10: the advice of a run whose loss stopped being finite.

C1 (F10). A run at train.lr = 1e9 (training loss 2.30, then 1.66e32; evaluation loss NaN) failed
and was doctored as "the model's scores in eval mode were not finite; look at what its forward
does when not training": training had diverged. Now the loop says so, from the training losses
it read (or weights no longer finite), with a lower train.lr; the doctor reads a run stored so
before from its stored train/loss.
C2 (F9). `doctor` told a `dlperf.track` run (the user's own loop) to "try a lower train.lr or
train.grad_clip = 1.0", keys that mean nothing there. Now the advice is in the loop's terms.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
from torch import nn

import dlperf
from dlperf.engine.loop import EvaluationDiverged, MetricBuffer, Rows
from dlperf.store import RunStore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

EXP = """
[model]
name = "smallcnn"
[data]
name = "digits"
limit = 64
[train]
epochs = 1
batch_size = 32
lr = 1e9
[run]
threads = 1
checkpoint = false
"""
ROSE = "from 2.29941 (step 1) to 1.65875e+32 (step 2)"
LOWER_LR = "try a lower train.lr (now 1e+09) or train.grad_clip = 1.0"
IN_EVAL_MODE = (
    "evaluation loss became nan: the model's scores in eval mode were not finite; look at what "
    "its forward does when not training (model.eval())"
)


def _finding(result: CliResult, severity: str = "error") -> list[str]:
    """The doctor's one finding, of `severity`, of one run: its evidence line and its fix."""
    summary = {
        "error": "1 error, 0 warnings, 0 info",
        "warning": "0 errors, 1 warning, 0 info",
    }[severity]
    assert result.code == (severity == "error"), (result.out, result.err)
    lines = [line.strip() for line in result.out.splitlines()]
    assert lines[-1] == f"1 run(s) examined: {summary}", result.out
    return lines[1:3]


def test_an_evaluation_loss_after_the_training_loss_blew_up_is_divergence(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    """The tester's reproducer. Before: failed with IN_EVAL_MODE, and the doctor repeated it."""
    (tmp_path / "f10.toml").write_text(EXP)
    result = cli("run", "f10.toml")
    said = f"training diverged: its loss rose {ROSE}, and the evaluation loss became nan"
    assert result.code == 1, (result.out, result.err)
    assert " ".join(result.err.split()).endswith(f"run 1 failed: {said}; {LOWER_LR}"), result.err
    [run] = store.list_runs()
    assert (run.status, run.error) == ("failed", f"{said}; {LOWER_LR}")
    assert _finding(cli("doctor")) == [
        f"error    diverged: the run failed: {said}",
        f"fix: {LOWER_LR}",
    ]


@pytest.mark.parametrize(
    ("peak", "weight", "said"),
    [
        (1e32, 0.0, "its loss rose from 2.3 (step 1) to 1e+32 (step 2)"),
        (2.0, math.inf, "its weights were no longer finite after step 2"),
        (2.0, 0.0, None),  # the model's eval mode: EvaluationDiverged stands
    ],
    ids=["loss", "weights", "eval-mode"],
)
def test_the_loop_tells_a_divergence_from_the_eval_mode(
    peak: float, weight: float, said: str | None
) -> None:
    """What the loop reads (its losses, then the weights once evaluation failed) decides."""
    metrics = MetricBuffer(Rows(), every=1, precision="fp32", lr=1e9)
    metrics.first, metrics.peak = (1, 2.3), (2, peak)
    model = nn.Linear(1, 1)
    nn.init.constant_(model.weight, weight)
    diverged = metrics.diverged(EvaluationDiverged(math.nan, "fp32"), model, step=2)
    if said is None:
        assert diverged is None
    else:
        assert (
            str(diverged)
            == f"training diverged: {said}, and the evaluation loss became nan; {LOWER_LR}"
        )


def test_a_run_stored_blamed_on_eval_mode_is_doctored_by_its_training_loss(
    cli: Cli, store: RunStore
) -> None:
    """A run stored before the loop told the two apart: its stored train/loss tells."""
    exp = {section: {} for section in ("model", "data", "run")} | {"train": {"lr": 1e9}}
    run = store.create_run("f10", "run", exp)
    store.log_metrics(run, [("train/loss", 1, 2.29941), ("train/loss", 2, 1.65875e32)])
    store.finish_run(run, "failed", error=IN_EVAL_MODE)
    assert _finding(cli("doctor")) == [
        f"error    diverged: the run failed: evaluation loss became nan after train/loss rose "
        f"{ROSE}",
        f"fix: {LOWER_LR}",
    ]


@pytest.mark.parametrize(
    ("losses", "finding"),
    [
        (
            [1.0, math.nan],
            [
                "error    diverged: train/loss is nan at step 2 (1 non-finite value(s))",
                "fix: try a lower learning rate in your loop, or clip its gradients (torch.nn."
                "utils.clip_grad_norm_(model.parameters(), 1.0) before optimizer.step())",
            ],
        ),
        (
            [1.0 + step / 10 for step in range(20)],
            [
                "warning  lr-too-high: train/loss rose from a mean 1.2000 over its first 5 "
                "steps to 2.7000 over its last 5 (x2.25 > x1.1)",
                "fix: lower your loop's learning rate, or warm it up over the first steps",
            ],
        ),
    ],
    ids=["diverged", "lr-too-high"],
)
def test_a_tracked_loop_is_advised_in_its_own_terms(
    cli: Cli, db: str, losses: list[float], finding: list[str]
) -> None:
    """The tester's reproducer (diverged). Before: "fix: try a lower train.lr or
    train.grad_clip = 1.0"; lr-too-high: "... at train.lr None", "fix: lower train.lr, or warm
    it up (train.schedule.warmup_epochs)"."""
    with dlperf.track("nan", config={"lr": 0.1}, store=db) as r:
        for step, loss in enumerate(losses, 1):
            r.log(step, loss=loss)
    assert _finding(cli("doctor"), finding[0].split()[0]) == finding
