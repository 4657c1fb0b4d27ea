"""The twenty-fourth break-it round, P1 (the user's own models), causes of `dlperf run`'s
checks and of the CLI's line for a model's error.

- C1: run.compile with a TorchScript model was a 68-line traceback after the run was
  recorded; an error raised inside a TorchScript model while training was Python's whole
  traceback (it has no Python frame in the model file); and a forward that fixes the batch at
  2 (x.reshape(2, -1)) passed the two-image dry forward and failed after the run was recorded.
- C2: a model whose train() cannot take the mode (a torch.export GraphModule; an override
  `def train(self)`) was a traceback from the dry forward.
- C12: the dry forward ran without run.channels_last, so a .view after a conv failed only
  after the run was recorded, blaming the model alone.
- C13: a parameter on a data-dependent branch, which the zero-image probe does not reach, was
  said to "keep their initial values".
- C15: torch's "None of the inputs have requires_grad=True" warning came twice, from the dry
  forwards (under torch.no_grad), for a model with a reentrant torch.utils.checkpoint.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from torch import nn

from dlperf.engine.checks import dry_forward
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_break_it_22_models import _unwrapped, _write

RUN = """
[model]
name = "{name}"
[data]
name = "digits"
limit = 200
[train]
epochs = 1
batch_size = 32
lr = 0.05
[run]
threads = 1
checkpoint = false
"""


def _run(
    cli: Callable[..., CliResult], tmp_path: Path, text: str, factory: str, *sets: str
) -> CliResult:
    """`dlperf run` of the model file `text`'s `factory`, with `sets` (--set KEY=VALUE)."""
    path = _write(tmp_path, text)
    (tmp_path / "exp.toml").write_text(RUN.format(name=f"{path}:{factory}"))
    return cli("run", "exp.toml", *[a for s in sets for a in ("--set", s)])


def _refused(
    cli: Callable[..., CliResult], db: str, tmp_path: Path, text: str, factory: str, *sets: str
) -> str:
    """Run refused in one line, exit 2, before anything is recorded: its error, unwrapped."""
    done = _run(cli, tmp_path, text, factory, *sets)
    assert done.code == 2, done.err
    assert "Traceback" not in done.err, done.err
    assert RunStore.open(db).list_runs() == []
    return _unwrapped(done.err)


# --- C1: TorchScript models, and a batch fixed in the forward ----------------------------------

SCRIPTED = """
import torch, torch.nn as nn
class S(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.fc = nn.Linear(64, num_classes)
    def forward(self, x):
        if self.training and x.shape[0] == 32:
            raise ValueError("no batch of 32 here")
        return self.fc(x.flatten(1))
def build(num_classes=10):
    return torch.jit.script(S(num_classes))
"""

FIXED_TWO = """
import torch.nn as nn
class N(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__(); self.fc = nn.Linear(64, num_classes)
    def forward(self, x):
        return self.fc(x.reshape(2, -1))
def build(num_classes=10): return N(num_classes)
class Flat(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__(); self.fc = nn.Linear(64, num_classes)
    def forward(self, x):
        return self.fc(x.flatten(1)[:2])
def build_flat(num_classes=10): return Flat(num_classes)
"""


def test_compile_of_a_torchscript_model_is_refused_before_the_run(
    cli: Callable[..., CliResult], db: str, tmp_path: Path
) -> None:
    said = _refused(cli, db, tmp_path, SCRIPTED, "build", "run.compile=true")
    assert _unwrapped("run.compile: a TorchScript model cannot be compiled") in said, said


def test_an_error_inside_a_torchscript_model_is_the_models_line(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    done = _run(cli, tmp_path, SCRIPTED, "build")
    assert done.code == 1, done.err
    assert "Traceback (most recent call last)" not in done.err, done.err  # before: Python's
    assert "error: the model raised ValueError: no batch of 32 here" in done.err, done.err


@pytest.mark.parametrize(
    ("factory", "expected"),
    [
        # torch refuses the batch of 3 (mat1 and mat2 ...)
        ("build", "takes a batch of 2 images but not of 3: mat1 and mat2"),
        # scores for 2 images, whatever the batch: [2, 10] for 3
        ("build_flat", "returns shape [2, 10] for a batch of 3 images"),
    ],
)
def test_a_forward_that_fixes_the_batch_at_two_is_refused_before_the_run(
    cli: Callable[..., CliResult], db: str, tmp_path: Path, factory: str, expected: str
) -> None:
    said = _refused(cli, db, tmp_path, FIXED_TWO, factory)
    assert _unwrapped(expected) in said, said
    assert "x.size(0)" in said, said


# --- C2: a train() that cannot take the mode --------------------------------------------------

NO_MODE = """
import torch, torch.nn as nn
def _m(num_classes): return nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))
def build_export(num_classes=10):
    return torch.export.export(_m(num_classes), (torch.zeros(2, 1, 8, 8),)).module()
class NoMode(nn.Sequential):
    def train(self):
        return super().train(True)
def build_nomode(num_classes=10):
    return NoMode(nn.Flatten(), nn.Linear(64, num_classes))
"""


@pytest.mark.parametrize(
    ("factory", "expected"),
    [
        ("build_export", "is a torch.export GraphModule (torch.export.export(...).module())"),
        ("build_nomode", "the model's train() does not take the mode"),
    ],
)
def test_a_model_whose_train_takes_no_mode_is_one_line(
    cli: Callable[..., CliResult], db: str, tmp_path: Path, factory: str, expected: str
) -> None:
    said = _refused(cli, db, tmp_path, NO_MODE, factory)
    assert _unwrapped(expected) in said, said


# --- C12: the dry forward in the run's memory format ------------------------------------------

VIEW = """
import torch, torch.nn as nn
class N(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.c = nn.Conv2d(1, 8, 3, padding=1); self.fc = nn.Linear(8 * 64, num_classes)
    def forward(self, x):
        h = torch.relu(self.c(x))
        return self.fc(h.view(h.size(0), -1))
def build(num_classes=10): return N(num_classes)
"""


def test_a_view_that_channels_last_breaks_is_refused_before_the_run(
    cli: Callable[..., CliResult], db: str, tmp_path: Path
) -> None:
    said = _refused(cli, db, tmp_path, VIEW, "build", "run.channels_last=true")
    assert _unwrapped("fails in run.channels_last's memory format") in said, said
    assert _unwrapped("set run.channels_last = false") in said, said


# --- C13: a branch the zero images do not take ------------------------------------------------

BRANCH = """
import torch.nn as nn
class DD(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__(); self.a = nn.Linear(64, num_classes); self.b = nn.Linear(64, num_classes)
    def forward(self, x):
        h = x.flatten(1)
        if h.mean() > 0.0:
            return self.a(h)
        return self.b(h) * 3
def build(num_classes=10): return DD(num_classes)
"""


def test_a_branch_the_probe_does_not_take_is_not_said_to_keep_its_values(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    done = _run(cli, tmp_path, BRANCH, "build")
    assert done.code == 0, done.err
    said = _unwrapped(done.err)
    # before: "... (a.weight, a.bias): they keep their initial values", yet branch a trains
    assert _unwrapped("no gradient for two zero images (a.weight, a.bias)") in said, done.err
    assert _unwrapped("they keep their initial values;") not in said, done.err


# --- C15: torch's checkpoint warning from the dry forward -------------------------------------


class _Reentrant(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c = nn.Conv2d(1, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 64, 10)

    def forward(self, x: object) -> object:
        from torch.utils.checkpoint import checkpoint

        h = checkpoint(self.c, x, use_reentrant=True)
        return self.fc(h.flatten(1))


@pytest.mark.parametrize("training", [False, True])
def test_the_dry_forward_says_nothing_of_a_reentrant_checkpoint(training: bool) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dry_forward(_Reentrant(), (1, 8, 8), "rejects", training=training)
    said = [str(w.message) for w in caught]
    assert not [s for s in said if "None of the inputs have requires_grad" in s], said
