"""Break-it round 43, fixer F4: a user's backward hooks and the classes a factory uses.

T1's C1: a model file whose first layer has `register_full_backward_hook(...)` let torch's raw
UserWarning ("Full backward hook is firing when gradients are computed with respect to module
outputs since no inputs require gradients ...") through: `analyze --train` (naming
contextlib.py), `run` (twice, quoting dlperf's own source lines: the dry backward's in
engine/checks.py and the training step's in engine/step.py) and `export` (its dry check). Now
dlperf's own backward passes (analyze's count, predict --measure's, the dry backward before a
run or an export) keep torch's warning off, and the training step's, which is true of the
user's model (its first layer's inputs, the images, need no gradient, so the hook's grad_input
is None), is said once by the dry backward in dlperf's words, as one `warning:` line of the run
(an export, which trains nothing, does not say it).

T1's C2: analyze's output-width warning said "... not the 7 classes it was given (--classes),
which it does not use" of a factory returning num_classes + 3 scores, which uses it. Now it
claims "does not use" only where the model built for another number of classes ends in the
same width (`counting.ignores_classes`); otherwise it says what a classifier ends in.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from dlperf.engine.checks import dry_backward
from dlperf.models.registry import noting
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

# The tester's m.py (/tmp/c1, /tmp/c2), one file
MODELS = """
import torch.nn as nn
def hooked(num_classes=10, in_channels=3):
    m = nn.Sequential(nn.Conv2d(in_channels, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                      nn.Linear(4, num_classes))
    m[0].register_full_backward_hook(lambda mod, gi, go: None)
    return m
def wide2(num_classes=10, in_channels=3):
    return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(in_channels, num_classes + 3))
def own12(num_classes=10, in_channels=3):
    return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(in_channels, 12))
"""

EXP = """
[model]
name = "m.py:hooked"
[data]
name = "digits"
limit = 64
[train]
epochs = 1
batch_size = 32
[run]
threads = 1
checkpoint = false
"""

TORCHS = "Full backward hook is firing"


def _torchs(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if TORCHS in str(w.message)]


@pytest.fixture
def models(tmp_path: Path) -> Path:
    (tmp_path / "m.py").write_text(MODELS)
    return tmp_path


def test_analyze_train_keeps_torchs_hook_warning_off(
    cli: Cli, models: Path, recwarn: pytest.WarningsRecorder
) -> None:
    """C1: was torch's UserWarning, naming contextlib.py, before the table."""
    result = cli("analyze", "m.py:hooked", "--input", "3,8,8", "--train")
    assert result.code == 0, result.err
    assert TORCHS not in result.out + result.err, result.err
    assert "UserWarning" not in result.err, result.err
    assert _torchs(recwarn.list) == []


def test_run_says_the_first_layers_hook_once_in_its_own_words(
    cli: Cli, models: Path, recwarn: pytest.WarningsRecorder
) -> None:
    """C1: was torch's UserWarning twice, quoting engine/checks.py's and engine/step.py's lines."""
    (models / "exp.toml").write_text(EXP)
    result = cli("run", "exp.toml")
    assert result.code == 0, result.err
    both = result.out + result.err
    assert TORCHS not in both and "UserWarning" not in both, both
    assert "# type: ignore" not in both, both
    assert _torchs(recwarn.list) == []
    assert both.count("register_full_backward_hook") == 1, both
    said = " ".join(both.split())  # the console wraps the line at its width
    assert re.search(
        r"warning: model '[^']*m\.py:hooked' has a full backward hook \(register_full_backward_"
        r"hook on 0 \(Conv2d\)\) on a layer whose inputs need no gradient, as the images need "
        r"none: it gets grad_input None at each training step",
        said,
    ), both


def _hooked() -> nn.Module:
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    model.append(nn.Linear(4, 3))
    model[0].register_full_backward_hook(lambda mod, gi, go: None)
    return model


def test_the_dry_backward_says_it_once_a_model_and_warns_nothing_of_torchs() -> None:
    """C1: export's dry check and a DDP worker's second dry backward (outside `noting`) gave
    torch's warning; the dry backward notes it once a model, in its own words."""
    model = _hooked()
    with warnings.catch_warnings(record=True) as caught, noting() as notes:
        warnings.simplefilter("always")
        dry_backward(model, (1, 8, 8), "'m.py:hooked'")
        dry_backward(model, (1, 8, 8), "'m.py:hooked'")
    assert _torchs(caught) == []
    assert len(notes) == 1 and "register_full_backward_hook on 0 (Conv2d)" in notes[0], notes
    with warnings.catch_warnings(record=True) as caught:  # said already: no RuntimeWarning
        warnings.simplefilter("always")
        dry_backward(model, (1, 8, 8), "'m.py:hooked'")
    assert caught == []


def test_a_hook_whose_inputs_need_gradients_is_not_warned_of() -> None:
    """Narrow: a full backward hook on a later layer gets its grad_input; nothing to say."""
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    model.append(nn.Linear(4, 3))
    model[3].register_full_backward_hook(lambda mod, gi, go: None)
    with warnings.catch_warnings(record=True) as caught, noting() as notes:
        warnings.simplefilter("always")
        dry_backward(model, (1, 8, 8), "'m'")
    assert caught == [] and notes == []


def test_the_training_step_keeps_torchs_warning_off() -> None:
    """C1: engine/step.py's backward gave torch's warning at each run's first step (said once
    instead by the dry backward, before it)."""
    from dlperf.config import RunConfig, TrainConfig
    from dlperf.engine.step import prepare

    model = _hooked()
    step = prepare(model, TrainConfig(), RunConfig(), torch.device("cpu"), 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step(torch.zeros(2, 1, 8, 8), torch.tensor([0, 1]))
    assert _torchs(caught) == []


@pytest.mark.parametrize(
    ("factory", "width", "unused"), [("wide2", 10, False), ("own12", 12, True)]
)
def test_analyze_says_does_not_use_only_of_a_factory_ignoring_num_classes(
    cli: Cli, models: Path, factory: str, width: int, unused: bool
) -> None:
    """C2: wide2 (num_classes + 3 scores) was said not to use num_classes."""
    result = cli("analyze", f"m.py:{factory}", "--input", "3,8,8", "--classes", "7")
    assert result.code == 0, result.err
    said = [line for line in result.err.splitlines() if "the model's output is" in line]
    assert len(said) == 1, result.err
    given = f"[batch, {width}]: {width} scores, not the 7 classes it was given (--classes)"
    assert given in said[0], said
    assert ("which it does not use" in said[0]) is unused, said
    if not unused:
        assert "a classifier ends in one score per class" in said[0], said
