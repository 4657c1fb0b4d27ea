"""Break-it round 39, fixer F1: a model whose forward adds layers to itself (T1's C1, cases
23, 24 and 39).

A forward that created `self.extra = nn.Linear(...)` at its fifth call trained, rc 0, with no
word: the layer appeared during the dry checks (the fifth forward was the run's batch-size
check), so it was trained and saved in the checkpoint, yet the factory builds no such layer,
and `dlperf export` failed blaming a "nondeterministic factory" though the file and the
factory were the ones trained. A layer made later still (during training) was never in the
optimizer at all: a random layer every later score passed through, saved in the checkpoint.

Now the model's parameters (each one itself) and persistent buffers after its first forward
are held against every later dry-check forward: one that registers new ones is refused in one
line naming them and the fix (create every layer in __init__), exit 2, nothing stored. A layer
made in the first forward (a size taken from the input, as a lazy layer) is the network every
rebuild makes as its checks run, and still trains and exports. During training the model is
held against what the optimizer was built with as each epoch ends (after its evaluation,
before its checkpoint) and after the test set's evaluation: the run fails with that one line.
Export's line for a checkpoint that holds parameters the model lacks (a run stored before)
names the forward that adds them beside the nondeterministic factory.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from dlperf.engine import checkpoint
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

EXP = """
[model]
name = "smallcnn"
[data]
name = "digits"
limit = 256
[train]
epochs = 1
batch_size = 32
lr = 0.05
[run]
threads = 1
warmup_steps = 1
"""

# The tester's m_mutate.py: a layer made at the forward's `at`-th call.
GROWS = """
import torch, torch.nn as nn
class M(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.nc = num_classes
        self.l = nn.Linear(64 * in_channels, num_classes)
        self.n = 0
    def forward(self, x):
        self.n += 1
        if self.n == AT:
            self.extra = nn.Linear(self.nc, self.nc)
        out = self.l(x.flatten(1))
        if hasattr(self, "extra"):
            out = self.extra(out)
        return out
def make(num_classes=10, in_channels=1): return M(num_classes, in_channels)
"""

# A buffer registered at the third forward (the dry backward's), which the checkpoint holds.
COUNTS = """
import torch, torch.nn as nn
class M(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.l = nn.Linear(64 * in_channels, num_classes)
        self.n = 0
    def forward(self, x):
        self.n += 1
        if self.n == 3:
            self.register_buffer("seen", torch.zeros(()))
        return self.l(x.flatten(1))
def make(num_classes=10, in_channels=1): return M(num_classes, in_channels)
"""

# A layer made at the third training step: no dry check trains at a batch of 32 with gradients.
IN_TRAINING = """
import torch, torch.nn as nn
class M(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.nc = num_classes
        self.l = nn.Linear(64 * in_channels, num_classes)
        self.steps = 0
    def forward(self, x):
        if self.training and torch.is_grad_enabled() and x.shape[0] == 32:
            self.steps += 1
            if self.steps == 3:
                self.extra = nn.Linear(self.nc, self.nc)
        out = self.l(x.flatten(1))
        if hasattr(self, "extra"):
            out = self.extra(out)
        return out
def make(num_classes=10, in_channels=1): return M(num_classes, in_channels)
"""

# Its layer sized by the first input it sees, made in that first forward: a lazy layer.
FIRST_FORWARD = """
import torch, torch.nn as nn
class M(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.nc = num_classes
    def forward(self, x):
        if not hasattr(self, "fc"):
            self.fc = nn.Linear(x.flatten(1).shape[1], self.nc).to(x.device)
        return self.fc(x.flatten(1))
def make(num_classes=10, in_channels=1): return M(num_classes, in_channels)
"""


# Round 40 (T1 C1): a layer deleted at the forward's fifth call (the batch-size check's).
SHRINKS = """
import torch, torch.nn as nn
class M(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.l = nn.Linear(64 * in_channels, num_classes)
        self.extra = nn.Linear(num_classes, num_classes)
        self.n = 0
    def forward(self, x):
        self.n += 1
        if self.n == 5:
            del self.extra
        out = self.l(x.flatten(1))
        if hasattr(self, "extra"):
            out = self.extra(out)
        return out
def make(num_classes=10, in_channels=1): return M(num_classes, in_channels)
"""


def _run(cli: Cli, tmp_path: Path, source: str) -> CliResult:
    (tmp_path / "exp.toml").write_text(EXP)
    (tmp_path / "m.py").write_text(source)
    return cli("run", "exp.toml", "--set", f"model.name={tmp_path / 'm.py'}:make")


def _one_error(result: CliResult) -> str:
    lines = [line for line in result.err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.err, result.err
    return errors[0]


@pytest.mark.parametrize("at", [2, 5])  # the training-mode dry forward; the batch-size check's
def test_a_forward_that_adds_a_layer_after_its_first_is_refused(
    cli: Cli, tmp_path: Path, db: str, at: int
) -> None:
    result = _run(cli, tmp_path, GROWS.replace("AT", str(at)))
    assert result.code == 2, result.err
    line = _one_error(result)
    assert "registered new parameters (extra.weight, extra.bias)" in line, line
    assert "create every layer in __init__" in line, line
    assert RunStore.open(db).list_runs() == []  # refused before the run was recorded


def test_a_forward_that_registers_a_buffer_later_is_refused(
    cli: Cli, tmp_path: Path, db: str
) -> None:
    result = _run(cli, tmp_path, COUNTS)
    assert result.code == 2, result.err
    line = _one_error(result)
    assert "registered new buffers (seen)" in line, line
    assert RunStore.open(db).list_runs() == []


def test_a_layer_added_during_training_fails_the_run(cli: Cli, tmp_path: Path, db: str) -> None:
    result = _run(cli, tmp_path, IN_TRAINING)
    assert result.code != 0, result.err  # was 0: it trained with a random, untrained layer
    runs = RunStore.open(db).list_runs()
    assert [r.status for r in runs] == ["failed"]
    error = runs[0].error or ""
    assert "registered new parameters (extra.weight, extra.bias)" in error, error
    assert "after the optimizer was built" in error and "__init__" in error, error


def test_a_layer_made_in_the_first_forward_still_trains_and_exports(
    cli: Cli, tmp_path: Path
) -> None:
    result = _run(cli, tmp_path, FIRST_FORWARD)
    assert result.code == 0, result.err
    exported = cli("export", "1", "--out", str(tmp_path / "m.onnx"))
    assert exported.code == 0, exported.err


def test_export_of_a_checkpoint_holding_more_names_a_forward_that_adds_them() -> None:
    model = nn.Linear(64, 10)
    weights = model.state_dict() | {"extra.weight": torch.zeros(10, 10)}
    with pytest.raises(UserError) as caught:
        checkpoint.fit_weights(model, weights, 1, "/abs/m.py:make", 10, same_file=True)
    said = f"{caught.value.message} ({caught.value.hint})"
    assert "extra.weight is not in the model" in said, said
    assert "its forward adds them" in said and "__init__" in said, said
    # a checkpoint that lacks some of the model's is the factory's alone, as before
    with pytest.raises(UserError) as caught:
        checkpoint.fit_weights(model, {"weight": weights["weight"]}, 1, "/abs/m.py:make", 10, True)
    assert "forward adds" not in caught.value.message
    assert "nondeterministic" in caught.value.message


def test_a_forward_that_removes_a_layer_after_its_first_is_refused(
    cli: Cli, tmp_path: Path, db: str
) -> None:
    """Round 40, T1 C1: a layer deleted in a forward trained on, exit 0, and export blamed a
    nondeterministic factory, as round 39's added layer had."""
    result = _run(cli, tmp_path, SHRINKS)
    assert result.code == 2, result.err
    line = _one_error(result)
    assert "removed parameters or buffers (extra.weight, extra.bias)" in line, line
    assert RunStore.open(db).list_runs() == []
