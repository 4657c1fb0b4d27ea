"""The eighth break-it round (issue 41), evaluation (F7): each output held to the training
step's rule, and a loss that is not finite failing the run.

Evaluation looked at no output: a model that misbehaves only in eval mode, after the up-front
checks, finished its run (exit 0) with NaN scores (val loss nan, a test accuracy from the
argmax of NaN, ranked by `sweep`, labelling `distill`'s students), with 13 columns (accuracy
over 13 classes) or with int64 scores (`out.float()` hid them); fewer rows than images were a
60-line traceback from cross_entropy. `run`, `sweep`, `staleness --train` and `distill` share
the evaluation, so each is tried.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult, write_distill_exp

Cli = Callable[..., CliResult]

# Right in training mode, and in eval mode until the weights have changed (the up-front
# checks' forwards, in both modes, take no optimizer step: round 25 added more of them, and a
# count of them no longer told them from evaluation); wrong in the way each case names from
# the first evaluation after a training step on.
EVAL_LATER = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.f = nn.Sequential(nn.Flatten(), nn.Linear(64 * in_channels, num_classes + 3))
        self.n = num_classes
        self.first = self.f[1].weight.detach().clone()

    def forward(self, x):
        y = self.f(x)
        if not self.training and not torch.equal(self.f[1].weight, self.first.to(x.device)):
            return {wrong}
        return y[:, : self.n]
"""

EXP = """
[model]
name = "{model}"
[data]
name = "digits"
limit = 200
[train]
epochs = 1
batch_size = 32
lr = 0.05
[run]
threads = 1
warmup_steps = 1
"""

NAN = "y[:, : self.n] * float('nan')"
NAN_SAID = (
    "evaluation loss became nan: the model's scores in eval mode were not finite; look at "
    "what its forward does when not training (model.eval())"  # an fp32 run: not "try fp32"
)


def _model(root: Path, wrong: str) -> str:
    model = root / "evalbad.py"
    model.write_text(EVAL_LATER.format(wrong=wrong))
    return f"{model}:Net"


def _experiment(root: Path, wrong: str) -> Path:
    exp = root / "exp.toml"
    exp.write_text(EXP.format(model=_model(root, wrong)))
    return exp


def _one_line(err: str) -> str:
    """What the console said, its wrapped lines joined again; no traceback in it."""
    assert "Traceback" not in err, err
    return " ".join(err.split())


@pytest.mark.parametrize(
    ("wrong", "said"),
    [
        (NAN, NAN_SAID),
        ("y", "model Net returned shape [32, 13] for a batch of 32 images in evaluation: "
              "expected [32, 10], one score per class (10) for each image"),
        ("(y[:, : self.n] * 100).long()", "model Net returned torch.int64 scores for a batch "
              "of 32 images in evaluation: expected float scores (logits)"),
        ("y[:1, : self.n]", "model Net returned shape [1, 10] for a batch of 32 images in "
              "evaluation: expected [32, classes], one row of scores per image"),
    ],
    ids=["nan", "columns", "dtype", "rows"],
)  # fmt: skip
def test_an_output_wrong_only_in_evaluation_fails_the_run_in_one_line(
    cli: Cli, tmp_path: Path, store: RunStore, wrong: str, said: str
) -> None:
    """Before: finished, exit 0 (nan, columns, dtype); a ValueError traceback (rows)."""
    result = cli("run", str(_experiment(tmp_path, wrong)))
    assert result.code == 1, (result.code, result.out, result.err)
    assert f"run 1 failed: {said}" in _one_line(result.err), result.err
    [run] = store.list_runs()
    assert (run.status, run.error) == ("failed", said)


def test_a_sweep_point_whose_evaluation_is_nan_fails_unranked(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    """Before: the point finished with val loss nan and was ranked among the others."""
    exp = _experiment(tmp_path, NAN)
    (tmp_path / "sw.toml").write_text(f'base = "{exp}"\n[grid]\n"train.lr" = [0.05]\n')
    result = cli("sweep", "sw.toml")
    assert result.code == 1, (result.code, result.out, result.err)
    assert NAN_SAID in _one_line(result.err), result.err
    [run] = store.list_runs()
    assert (run.status, run.error) == ("failed", NAN_SAID)


def test_staleness_training_fails_both_runs_on_a_nan_evaluation(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    """The async-SGD trainer evaluates through the same function."""
    exp = _experiment(tmp_path, NAN)
    result = cli("staleness", "--train", str(exp), "--learners", "2", "--set", "data.limit=128")
    assert result.code == 1, (result.code, result.out, result.err)
    assert NAN_SAID in _one_line(result.err), result.err
    assert {(r.status, r.error) for r in store.list_runs()} == {("failed", NAN_SAID)}


def test_distill_stops_at_a_teacher_whose_evaluation_is_nan(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    """Before: the teacher finished, and labelled the students' images from NaN scores."""
    path = write_distill_exp(tmp_path, "")
    _model(tmp_path, NAN)
    # Named relative to the test's directory (the cli fixture's): distill names its figure
    # after the model, and an absolute path's slashes there are a failure of their own.
    path.write_text(path.read_text().replace('name = "smallcnn"', 'name = "evalbad.py:Net"'))
    result = cli("distill", str(path), "--unlabeled", "digits:holdout=0.5", "--top-k", "2")
    assert result.code == 1, (result.code, result.out, result.err)
    assert NAN_SAID in _one_line(result.err), result.err
    [teacher] = store.list_runs()
    assert (teacher.status, teacher.error) == ("failed", NAN_SAID)
