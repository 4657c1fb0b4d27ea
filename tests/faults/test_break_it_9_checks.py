"""The ninth break-it round, the up-front checks (engine/checks.py): scores on another device,
sparse gradients, and the hint after a failed dry backward.

A model whose scores came back on the meta device in eval mode crashed dlperf's own finiteness
check ("Tensor.item() cannot be called on meta tensors", a traceback, exit 1; `dlperf.run()`
raised a plain RuntimeError). An nn.Embedding(sparse=True) passed every check and failed the
first optimizer step in a 53-line traceback ("add(sparse, dense) is not supported"), the run
stored `failed`. A dry backward that failed for any reason was told to "use the out-of-place
form of the operation", also when torch has no derivative for an operation or the forward
turned gradients off.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import dlperf
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

EXP = """
[model]
name = "{model}"
[data]
name = "digits"
limit = 96
[train]
epochs = 1
batch_size = 16
lr = 0.05
[run]
threads = 1
warmup_steps = 1
checkpoint = false
"""

# `{wrong}` is the model's return, `y` its right scores; `self.training` and `self.calls` (the
# forwards so far in the current mode) say when it is wrong.
MODEL = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.fc = nn.Linear(64 * in_channels, num_classes)
        self.a = nn.Parameter(torch.ones(1))
        self.calls = {{True: 0, False: 0}}

    def forward(self, x):
        self.calls[self.training] += 1
        y = self.fc(x.flatten(1)) * self.a
        return {wrong}

class Sparse(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.e = nn.Embedding(64 * in_channels, num_classes, sparse=True)

    def forward(self, x):
        f = x.flatten(1)
        return f @ self.e(torch.arange(f.shape[1]))
"""


def _experiment(root: Path, wrong: str = "y", cls: str = "Net") -> Path:
    (root / "m.py").write_text(MODEL.format(wrong=wrong))
    exp = root / "exp.toml"
    exp.write_text(EXP.format(model=f"{root / 'm.py'}:{cls}"))
    return exp


def _one_line(err: str) -> str:
    """What the console said, its wrapped lines joined again; no traceback in it."""
    assert "Traceback" not in err, err
    return " ".join(err.split())


def _refused(result: CliResult, store: RunStore, said: str) -> None:
    """One line up front: exit 2, and nothing stored."""
    assert result.code == 2, (result.code, result.out, result.err)
    assert said in _one_line(result.err), result.err
    assert store.list_runs() == []


# --- scores on another device ---------------------------------------------------------------

META_IN_EVAL = "y if self.training else y.to('meta')"
META_IN_TRAINING = "y.to('meta') if self.training else y"


@pytest.mark.parametrize(
    ("wrong", "mode"), [(META_IN_EVAL, ""), (META_IN_TRAINING, " in training mode")]
)
def test_scores_on_the_meta_device_are_one_line_up_front(
    cli: Cli, tmp_path: Path, store: RunStore, wrong: str, mode: str
) -> None:
    """Before: eval mode, a traceback from check_finite's read of a meta tensor, exit 1;
    training mode, NotImplementedError "Cannot copy out of meta tensor" from the dry backward."""
    exp = _experiment(tmp_path, wrong)
    said = f"model '{tmp_path / 'm.py'}:Net' returns{mode} its scores on meta; expected them on cpu"
    _refused(cli("run", str(exp)), store, said)


def test_sweep_refuses_scores_on_the_meta_device_before_any_point(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    exp = _experiment(tmp_path, META_IN_EVAL)
    (tmp_path / "sw.toml").write_text(f'base = "{exp}"\n[grid]\n"train.lr" = [0.05, 0.1]\n')
    _refused(cli("sweep", "sw.toml"), store, "its scores on meta; expected them on cpu")


def test_the_api_raises_user_error_for_scores_on_the_meta_device(
    tmp_path: Path, db: str, store: RunStore
) -> None:
    """Before: dlperf.run() raised torch's RuntimeError."""
    exp = _experiment(tmp_path, META_IN_EVAL)
    with pytest.raises(UserError, match="its scores on meta; expected them on cpu"):
        dlperf.run(exp, store=db)
    assert store.list_runs() == []


@pytest.mark.parametrize(
    ("wrong", "where"),
    [
        # Eval mode: two up-front forwards (the dry one and check_finite's is not made for
        # finite scores, so one), then evaluation.
        ("y if self.training or self.calls[False] < 2 else y.to('meta')", " in evaluation"),
        # Training mode: the classifier check's and the dry backward's forwards, then steps.
        ("y if not self.training or self.calls[True] < 3 else y.to('meta')", ""),
    ],
    ids=["evaluation", "training"],
)
def test_scores_that_move_to_the_meta_device_later_fail_the_run_in_one_line(
    cli: Cli, tmp_path: Path, store: RunStore, wrong: str, where: str
) -> None:
    """As the eighth round's outputs wrong only in evaluation: the run fails, one line."""
    result = cli("run", str(_experiment(tmp_path, wrong)))
    assert result.code == 1, (result.code, result.out, result.err)
    said = (
        f"model Net returned its scores on meta for a batch of 16 images{where}: "
        "expected them on cpu, where its parameters are"
    )
    assert said in _one_line(result.err), result.err
    [run] = store.list_runs()
    assert run.status == "failed"
    assert run.error is not None and run.error.startswith(said), run.error


# --- sparse gradients -----------------------------------------------------------------------


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_a_sparse_gradient_is_one_line_up_front(
    cli: Cli, tmp_path: Path, store: RunStore, optimizer: str
) -> None:
    """Before: the first optimizer step's traceback ("add(sparse, dense) is not supported",
    "Adam does not support sparse gradients"), exit 1, the run stored failed."""
    exp = _experiment(tmp_path, cls="Sparse")
    result = cli("run", str(exp), "--set", f"train.optimizer={optimizer}")
    said = (
        f"model '{tmp_path / 'm.py'}:Sparse' cannot be trained: its parameter e.weight gets a "
        "sparse gradient (Embedding(sparse=True))"
    )
    _refused(result, store, said)
    assert "use sparse=False" in _one_line(result.err)


# --- the hint after a failed dry backward ---------------------------------------------------

IN_PLACE_HINT = "use the out-of-place form of the operation"


def test_an_operation_without_a_derivative_is_not_blamed_on_in_place(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    """Before: "the derivative for 'zeta' is not implemented. (use the out-of-place form ...)"."""
    wrong = "torch.special.zeta(2 + self.a.abs(), y.abs() + 1)"
    result = cli("run", str(_experiment(tmp_path, wrong)))
    _refused(result, store, "its backward fails: the derivative for 'zeta' is not implemented")
    assert IN_PLACE_HINT not in result.err
    assert "torch has no derivative for that operation" in _one_line(result.err)


def test_a_forward_that_turns_gradients_off_is_told_so(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    """Before: "element 0 of tensors does not require grad ... (use the out-of-place form ...)";
    and the process was left with gradients off."""
    wrong = "(torch.set_grad_enabled(False), y)[1]"
    result = cli("run", str(_experiment(tmp_path, wrong)))
    _refused(result, store, "its forward turns gradients off and leaves them off")
    assert IN_PLACE_HINT not in result.err
    assert torch.is_grad_enabled()


def test_an_in_place_operation_keeps_its_hint(cli: Cli, tmp_path: Path, store: RunStore) -> None:
    wrong = "y.sigmoid().mul_(2)"
    result = cli("run", str(_experiment(tmp_path, wrong)))
    _refused(result, store, "modified by an inplace operation")
    assert IN_PLACE_HINT in _one_line(result.err)
