"""Break-it round 40, Left list, fixer F2: a model that changes as it runs, where the checks did
not reach it.

T1 C2: `dlperf sweep` stored as `failed` (rc 1) a point whose model made a layer at its fifth
forward, which `dlperf run` refuses up front (rc 2, nothing stored): the sweep's up-front check
built each model once and made build_model's dry forwards only, not the run's own batch-size
checks after them, where the fifth forward falls; it also built one model for every point of a
model config, so a point's run.channels_last (or run.checkpoint, run.precision ...) was checked
at the first point's value. Now `prepare_run` and the sweep's `check_points` (`first_refused`)
make the same checks through one function (`build_checked`), each model built for the run
settings its checks read: the sweep refuses such a point in one line naming it, exit 2, nothing
stored.

T1 C4: a layer made in an evaluation-mode forward (`if not self.training: self.extra = ...`)
was made in the first dry forward (eval mode, taken as a lazy layer's), never trained, and every
evaluation passed through its random weights: rc 0, accuracy at chance, no word. Now the
parameters the first forward made in evaluation mode that get no gradient in the dry backward
are refused in one line naming them, exit 2, nothing stored; a layer made in the first forward
and trained (a hand-made lazy layer), a frozen one, and one made in __init__ and left unused
(a warning, as before) are not.

Round 39's Left: a `dlperf scale` worker checked its model's growth in its dry forwards only,
not at its window's end as a plain run checks at each epoch's end: a layer made at its second
training step trained no further, the point finished, rc 0. Now every rank checks its model at
the end of the point's steps (after the loss check, gathered so that every rank raises the
same): the point fails in the run's line ("... during training, after the optimizer was
built"), exit 1, as a plain run's epoch-end check fails the run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from dlperf.distributed.worker import GrowthCheck
from dlperf.engine.checks import Held, dry_backward, dry_forward
from dlperf.engine.step import ModelGrew
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_break_it_39_model_growth import EXP, GROWS

Cli = Callable[..., CliResult]

# The tester's m_mutate.py: a layer made at the forward's fifth call (run's batch-size check).
GROWS_AT_5 = GROWS.replace("AT", "5")

# A .view after a convolution: fails in run.channels_last's memory format alone.
VIEWS = """
import torch, torch.nn as nn
class M(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.c = nn.Conv2d(in_channels, 4, 3, padding=1)
        self.l = nn.Linear(4 * 8 * 8, num_classes)
    def forward(self, x):
        y = self.c(x)
        return self.l(y.view(y.size(0), -1))
def make(num_classes=10, in_channels=1): return M(num_classes, in_channels)
"""

# The tester's m_evalgrow.py: a layer made, and used, in evaluation only.
EVAL_GROWS = """
import torch, torch.nn as nn
class M(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.nc = num_classes
        self.l = nn.Linear(64 * in_channels, num_classes)
    def forward(self, x):
        out = self.l(x.flatten(1))
        if not self.training:
            if not hasattr(self, "extra"):
                self.extra = nn.Linear(self.nc, self.nc)
            out = self.extra(out)
        return out
def make(num_classes=10, in_channels=1): return M(num_classes, in_channels)
"""

# A layer made at the second training step of a per-worker batch of 16: past every dry check.
GROWS_IN_TRAINING = """
import torch, torch.nn as nn
class M(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.nc = num_classes
        self.l = nn.Linear(64 * in_channels, num_classes)
        self.steps = 0
    def forward(self, x):
        if self.training and torch.is_grad_enabled() and x.shape[0] == 16:
            self.steps += 1
            if self.steps == 2:
                self.extra = nn.Linear(self.nc, self.nc).to(x.device)
        out = self.l(x.flatten(1))
        if hasattr(self, "extra"):
            out = self.extra(out)
        return out
def make(num_classes=10, in_channels=1): return M(num_classes, in_channels)
"""

REFUSED_EVAL = (
    "extra.weight, extra.bias were made in an evaluation-mode forward and get no gradient in "
    "training"
)


def _one_error(result: CliResult) -> str:
    lines = [line for line in result.err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.err, result.err
    return errors[0]


def _sweep(cli: Cli, tmp_path: Path, model: str, grid: str, set_: str = "") -> CliResult:
    (tmp_path / "exp.toml").write_text(EXP)
    (tmp_path / "m.py").write_text(model)
    (tmp_path / "sw.toml").write_text(
        f'base = "exp.toml"\n[grid]\n{grid}\n[set]\n"run.checkpoint" = false\n{set_}\n'
    )
    return cli("sweep", "sw.toml")


def test_a_sweep_refuses_a_point_whose_model_grows_where_run_refuses_it(
    cli: Cli, tmp_path: Path, db: str
) -> None:
    """C2: was rc 1, point 1 stored `failed` and the other point trained."""
    grid = f'"model.name" = ["{tmp_path / "m.py"}:make", "smallcnn"]'
    result = _sweep(cli, tmp_path, GROWS_AT_5, grid)
    assert result.code == 2, result.err
    line = _one_error(result)
    assert "point 1 (model.name=" in line, line
    assert "registered new parameters (extra.weight, extra.bias)" in line, line
    assert RunStore.open(db).list_runs() == []  # nothing stored, the other point not run


def test_a_sweep_checks_each_points_run_settings_as_its_run_does(
    cli: Cli, tmp_path: Path, db: str
) -> None:
    """Found fixing C2: both points were checked with the first's run.channels_last (false);
    the second's run failed, stored `failed`, where `dlperf run` refuses it up front."""
    grid = '"run.channels_last" = [false, true]'
    model = f'"model.name" = "{tmp_path / "m.py"}:make"'
    result = _sweep(cli, tmp_path, VIEWS, grid, model)
    assert result.code == 2, result.err
    line = _one_error(result)
    assert "point 2 (run.channels_last=true)" in line, line
    assert "fails in run.channels_last's memory format" in line, line
    assert RunStore.open(db).list_runs() == []


def test_a_layer_made_in_an_evaluation_forward_is_refused_by_run(
    cli: Cli, tmp_path: Path, db: str
) -> None:
    """C4: was rc 0, test accuracy 0.02 (chance), no word."""
    (tmp_path / "exp.toml").write_text(EXP)
    (tmp_path / "m.py").write_text(EVAL_GROWS)
    result = cli("run", "exp.toml", "--set", f"model.name={tmp_path / 'm.py'}:make")
    assert result.code == 2, result.err
    line = _one_error(result)
    assert REFUSED_EVAL in line and "__init__" in line, line
    assert RunStore.open(db).list_runs() == []


class _EvalOnly(nn.Module):
    """EVAL_GROWS's model, in this process."""

    def __init__(self, frozen: bool = False) -> None:
        super().__init__()
        self.l = nn.Linear(4, 3)
        self.frozen = frozen

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.l(x.flatten(1))
        if not self.training:
            if not hasattr(self, "extra"):
                self.extra = nn.Linear(3, 3)
                self.extra.requires_grad_(not self.frozen)
            out = self.extra(out)
        return out


class _MadeFirst(nn.Module):
    """A hand-made lazy layer: made in the first forward, sized by it, and trained."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not hasattr(self, "fc"):
            self.fc = nn.Linear(x.flatten(1).shape[1], 3)
        return self.fc(x.flatten(1))


class _UnusedFromInit(nn.Module):
    """A layer made in __init__ that the forward never uses: a warning, as before."""

    def __init__(self) -> None:
        super().__init__()
        self.l = nn.Linear(4, 3)
        self.spare = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l(x.flatten(1))


def _first_then_backward(model: nn.Module) -> list[str]:
    """The dry checks' order: a first forward in eval mode, then the dry backward."""
    dry_forward(model, (1, 2, 2), "rejects")
    return dry_backward(model, (1, 2, 2), "'m'")


def test_the_eval_made_check_is_narrow() -> None:
    with pytest.raises(UserError) as caught:
        _first_then_backward(_EvalOnly())
    assert REFUSED_EVAL in caught.value.message, caught.value.message
    assert caught.value.message.startswith("model 'm': ")
    assert "__init__" in (caught.value.hint or "")
    # frozen, it trains nothing anyway: not this refusal
    assert _first_then_backward(_EvalOnly(frozen=True)) == []
    assert _first_then_backward(_MadeFirst()) == []  # made in the first forward, and trained
    assert _first_then_backward(_UnusedFromInit()) == ["spare.weight", "spare.bias"]
    # a first forward in training mode made nothing an evaluation alone uses
    model = _EvalOnly()
    dry_backward(model, (1, 2, 2), "'m'")
    dry_forward(model, (1, 2, 2), "rejects", training=True)


class _Step:
    """What GrowthCheck reads of a TrainStep."""

    def __init__(self, model: nn.Module) -> None:
        self.model, self.held = model, Held.of(model)


def test_a_scale_worker_checks_growth_at_its_steps_end_on_every_rank() -> None:
    model = nn.Sequential(nn.Linear(4, 3))
    step = _Step(model)
    asked: list[str | None] = []

    def gather(mine: str | None) -> list[str | None]:
        asked.append(mine)
        return [None, mine]  # rank 0 found nothing; this rank (1) its own

    check = GrowthCheck([step], gather)  # type: ignore[list-item]
    check.on_epoch_end(1)  # nothing grew: no raise, but every rank still gathers
    assert asked == [None]
    model.add_module("extra", nn.Linear(3, 3))
    with pytest.raises(ModelGrew) as caught:
        check.on_epoch_end(1)
    said = str(caught.value)
    assert "registered new parameters (extra.weight, extra.bias)" in said, said
    assert "on rank 1" in said and "after the optimizer was built" in said, said

    # a peer's finding fails this rank too, which grew nothing: no rank waits for another
    peer = [_Step(nn.Linear(4, 3))]
    quiet = GrowthCheck(peer, lambda mine: [mine, "registered new x"])  # type: ignore[arg-type]
    with pytest.raises(ModelGrew, match="registered new x"):
        quiet.on_epoch_end(1)


SCALE_EXP = """
[model]
name = "{model}"
[data]
name = "synthetic"
shape = [1, 8, 8]
size = 256
[train]
lr = 0.05
[run]
out_dir = "{out}"
"""


@pytest.mark.faults  # a torchrun launch: over 10 s on a busy machine
def test_a_scale_point_whose_model_grows_in_training_fails_in_the_runs_line(
    cli: Cli, tmp_path: Path
) -> None:
    """Round 39's Left: was rc 0, the point finished with a layer that never trained."""
    (tmp_path / "m.py").write_text(GROWS_IN_TRAINING)
    exp = tmp_path / "exp.toml"
    exp.write_text(SCALE_EXP.format(model=f"{tmp_path / 'm.py'}:make", out=tmp_path / "runs"))
    result = cli(
        "scale", str(exp), "--workers", "1", "--mode", "weak", "--per-worker-batch", "16",
        "--warmup-steps", "1", "--steps", "3", "--repeat", "1", "--no-plots", "--no-comm-split",
        "--synthetic", "--json",
    )  # fmt: skip
    assert result.code == 1, result.err
    assert "Traceback" not in result.err, result.err
    (row,) = json.loads(result.out)["rows"]
    assert row["status"] == "failed", row
    error = row["error"]
    assert "registered new parameters (extra.weight, extra.bias) during training" in error, error
    assert "after the optimizer was built" in error and "__init__" in error, error
