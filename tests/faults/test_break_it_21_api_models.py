"""The twenty-first break-it round (P1, causes C3 and C8b): the Python API and the user's own
models.

C3: `dlperf.analyze(module)` of a module whose lazy layers had not run yet blamed the input
("the model rejects input [1, 1, 8, 8]: AssertionError: ... in_features from self.weight: 0";
LazyConv2d: IndexError), and a LazyBatchNorm2d failed outside UserError, while the same
layers from a model file were counted (5,210 params). The meta copy the API counts now keeps
each lazy placeholder a placeholder, on the meta device, so the count is the command's; the
caller's module stays lazy.

C8b: `dlperf.run` of a model file that turns gradients off at import was refused (right), but
left the caller's process with gradients off: the next sound `dlperf.run` in it was refused as
"they were off before the model was built". The caller's grad mode is now put back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn.parameter import is_lazy

import dlperf

# The tester's m/lazy.py, and its layers one at a time.
LAZY_FILE = """
import torch.nn as nn
def build(num_classes=10, in_channels=3):
    return nn.Sequential(nn.LazyConv2d(8, 3, padding=1), nn.ReLU(), nn.Flatten(),
                         nn.LazyLinear(num_classes))
def linear(num_classes=10, in_channels=3):
    return nn.Sequential(nn.Flatten(), nn.LazyLinear(num_classes))
def conv(num_classes=10, in_channels=3):
    return nn.Sequential(nn.LazyConv2d(4, 3), nn.Flatten(), nn.Linear(144, num_classes))
def norm(num_classes=10, in_channels=3):
    return nn.Sequential(nn.LazyConv2d(8, 3, padding=1), nn.LazyBatchNorm2d(), nn.Flatten(),
                         nn.LazyLinear(num_classes))
"""
COMPARED = ("params", "trainable_params", "forward_macs", "flops", "activations")


@pytest.fixture
def lazy_file(tmp_path: Path) -> Path:
    path = tmp_path / "lazy.py"
    path.write_text(LAZY_FILE)
    return path


def _totals(result: dlperf.AnalysisResult) -> dict[str, Any]:
    totals = result.totals
    return {key: totals[key] for key in COMPARED if key in totals}


def _factory(path: Path, name: str) -> nn.Module:
    """The module the file's factory `name` builds, on the CPU and still lazy."""
    scope: dict[str, Any] = {}
    exec(compile(path.read_text(), str(path), "exec"), scope)
    model: nn.Module = scope[name]()
    return model


@pytest.mark.parametrize("train", [False, True], ids=["forward", "train"])
@pytest.mark.parametrize("factory", ["build", "linear", "conv", "norm"])
def test_analyze_counts_a_module_with_lazy_layers_as_the_command_does(
    lazy_file: Path, factory: str, train: bool
) -> None:
    # before: UserError "the model rejects input [1, 1, 8, 8]: AssertionError: The in_features
    # inferred from input: 64 is not equal to in_features from self.weight: 0" (conv: an
    # IndexError; norm: RuntimeError "Attempted to use an uninitialized parameter")
    model = _factory(lazy_file, factory)
    lazy_before = [name for name, t in (*model.named_parameters(), *model.named_buffers())]
    counted = dlperf.analyze(model, (1, 8, 8), train=train)
    command = dlperf.analyze(f"{lazy_file}:{factory}", (1, 8, 8), train=train)
    assert _totals(counted) == _totals(command)
    if factory == "build":
        assert counted.totals["params"] == 5_210  # the tester's count, FlopCounterMode's too
    # The caller's module is left as it was: lazy, on the CPU, its hooks its own.
    assert any(is_lazy(t) for t in model.parameters())
    assert [name for name, _ in (*model.named_parameters(), *model.named_buffers())] == lazy_before
    assert all(t.device.type == "cpu" for t in (*model.parameters(), *model.buffers()))
    out = model(torch.rand(2, 1, 8, 8))  # and still takes its shapes from its first input
    assert out.shape == (2, 10)
    assert not any(is_lazy(t) for t in model.parameters())


def test_analyze_of_a_lazy_module_that_ran_counts_it_as_it_is(lazy_file: Path) -> None:
    """A lazy module once run holds ordinary weights: counted as any module, unchanged."""
    model = _factory(lazy_file, "build")
    model(torch.rand(1, 1, 8, 8))
    weights = [t.clone() for t in model.parameters()]
    assert dlperf.analyze(model, (1, 8, 8)).totals["params"] == 5_210
    assert all(torch.equal(a, b) for a, b in zip(weights, model.parameters(), strict=True))


# --- C8b: gradients off after a refused run -----------------------------------------------------

GRAD_OFF = """
import torch, torch.nn as nn
torch.set_grad_enabled(False)
def build(num_classes=10, in_channels=3):
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, num_classes))
"""
OFF = "gradients are off as training starts: the model file turns them off"


@pytest.fixture(autouse=True)
def _gradients_back_on() -> Iterator[None]:
    """Gradients on again after each test whatever it did, so that no later test trains
    without them (the test itself checks that dlperf put them back)."""
    yield
    torch.set_grad_enabled(True)


@pytest.fixture
def experiment(tmp_path: Path) -> Callable[[str], dict[str, Any]]:
    def make(model: str) -> dict[str, Any]:
        return {
            "model": {"name": model},
            "data": {"name": "digits", "limit": 64},
            "train": {"epochs": 1, "batch_size": 32, "lr": 0.05},
            "run": {"threads": 1, "checkpoint": False, "out_dir": str(tmp_path / "runs")},
        }

    return make


def test_a_refused_run_puts_the_callers_gradients_back_and_the_next_run_trains(
    db: str, tmp_path: Path, experiment: Callable[[str], dict[str, Any]]
) -> None:
    # before: the second run was refused, "gradients are off as training starts: they were off
    # before the model was built", and torch.is_grad_enabled() was False after the first
    (tmp_path / "gradoff.py").write_text(GRAD_OFF)
    assert torch.is_grad_enabled()
    with pytest.raises(dlperf.UserError) as refused:
        dlperf.run(experiment(f"{tmp_path / 'gradoff.py'}:build"), store=db)
    assert str(refused.value).startswith(OFF), refused.value
    assert torch.is_grad_enabled()
    assert dlperf.Store(db).runs() == []  # the refusal stays: nothing stored
    result = dlperf.run(experiment("smallcnn"), store=db)
    assert result["status"] == "finished", result
    assert torch.is_grad_enabled()


def test_a_run_refused_in_the_callers_no_grad_leaves_them_off(
    db: str, experiment: Callable[[str], dict[str, Any]]
) -> None:
    """The grad mode put back is the caller's own: off, where the caller turned it off."""
    with torch.no_grad():
        with pytest.raises(dlperf.UserError, match="they were off before the model was built"):
            dlperf.run(experiment("smallcnn"), store=db)
        assert not torch.is_grad_enabled()
    assert torch.is_grad_enabled()
