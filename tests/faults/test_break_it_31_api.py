"""Break-it round 31, fixer B: what the Python API does to the caller's objects and keys.

C3 (P1). `dlperf.analyze(model)` ran the caller's own forward hooks (and global module hooks)
on its meta copy: an activation the caller captured was replaced by a meta tensor, a counter
moved, and a hook reading values was blamed on the model's forward or its input.
C2 (P3). A tracked run's `final` kept -0.0 where its stored metric is 0.0.
C4 (P3). Metric, phase and config keys holding a control or format character (tab, newline,
CR, U+200F, U+200B) were stored, then shown escaped and could not be named again.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.utils.prune
from torch import nn
from torch.nn.modules.module import register_module_forward_hook

import dlperf
from tests.conftest import CliResult

Cli = Callable[..., CliResult]


# --- C2: -0.0 ---------------------------------------------------------------------------------


def test_c2_final_of_minus_zero_is_the_stored_zero(db: str) -> None:
    """Before: summary final {'m/d': -0.0} over metrics [(1, 0.0)]."""
    with dlperf.track("z", store=db) as run:
        run.log(1, **{"m/d": -0.0})
    store = dlperf.Store(db)
    final = store.run(run.id).summary["final"]["m/d"]
    ((_, stored),) = store.metrics(run.id, "m/d")
    assert str(final) == str(stored) == "0.0"


# --- C3: the caller's hooks on analyze's meta copy ------------------------------------------


def _net() -> torch.nn.Module:
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(256, 10))


def test_c3_analyze_runs_none_of_the_callers_hooks() -> None:
    """The report's script. Before: the captured activation became a meta tensor of the
    count's batch, every hook and the global one ran once per module, and a hook reading
    values failed the count as "the model's forward reads tensor values"."""
    model = _net().eval()
    features: dict[str, torch.Tensor] = {}
    calls: list[str] = []
    model[0].register_forward_hook(lambda m, i, o: features.__setitem__("conv", o.detach()))
    model[0].register_forward_pre_hook(lambda m, i: calls.append("pre"))
    model[3].register_forward_hook(lambda m, i, o: calls.append(str(o.mean().item())))
    model[3].register_full_backward_hook(lambda m, gi, go: calls.append("backward"))
    seen = register_module_forward_hook(lambda m, i, o: calls.append(type(m).__name__))
    try:
        model(torch.randn(4, 1, 8, 8))
        captured, calls[:] = features["conv"], []
        result = dlperf.analyze(model, (1, 8, 8), batch=2, train=True)
        assert result.totals["params"] == 4 * 9 + 4 + 256 * 10 + 10
        assert features["conv"] is captured and captured.device.type == "cpu"
        assert calls == []
        model[0](torch.randn(1, 1, 8, 8))  # the caller's hooks, the global one, are still there
        assert calls == ["pre", "Conv2d"]
    finally:
        seen.remove()


class _Scaled(nn.Module):
    """A model whose own forward pre-hook (a method of its own) gives forward its second
    argument, and whose weight torch's spectral_norm computes in a hook of torch's."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.utils.spectral_norm(nn.Linear(8, 4))
        self.register_forward_pre_hook(self._scale)

    def _scale(self, module: nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[Any, ...]:
        return (args[0], 2.0)

    def forward(self, x: torch.Tensor, scale: float) -> torch.Tensor:
        return self.fc(x) * scale


def test_c3_torchs_hooks_and_the_models_own_still_run() -> None:
    """spectral_norm's pre-hook makes the weight the count multiplies by (its power
    iteration counted with it), and a model's own method hook is part of its forward: both
    run on the copy."""
    model = _Scaled().eval()
    result = dlperf.analyze(model, (8,), batch=2)
    assert result.totals["params"] == 8 * 4 + 4  # weight_orig, bias
    assert result.totals["macs"] > 2 * 8 * 4
    assert model.fc.weight.device.type == "cpu"


@pytest.mark.parametrize("norm", ["weight_norm", "prune"])
def test_c3_modules_torchs_hooks_make_weights_of_are_counted(norm: str) -> None:
    """weight_norm's and pruning's hooks keep the weight they compute as a plain attribute,
    no graph leaf. Before: deepcopy refused it, a RuntimeError from analyze."""
    layer = nn.Linear(8, 4)
    if norm == "prune":
        torch.nn.utils.prune.l1_unstructured(layer, "weight", 0.5)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # weight_norm is deprecated
            layer = torch.nn.utils.weight_norm(layer)
    result = dlperf.analyze(layer, (8,), batch=2)
    assert result.totals["macs"] >= 2 * 8 * 4
    assert layer.weight.device.type == "cpu" and layer.weight.grad_fn is not None
