"""Break-it round 68 (fixer F5): `dlperf export` of a model nested 1,202 deep
(nn.Sequential(m, nn.ReLU()) in a loop), with the default stack and recursion limit, ended in
a RecursionError traceback, exit 1, where `dlperf analyze` and `dlperf run` refuse it in one
line. The dry forward's counting.switch_mode called model.train(False), whose torch walk
recurses a frame a level: it ran out of the limit and was told as "the model's train(False)
fails: RecursionError", a plain UserError, on which export asked engine.build.not_float32
whether the model was built in another dtype, and its model.parameters() recursed and raised
again, uncaught. Now the walks that need no recursion are done without it (switch_mode's
train/eval switch, refuse_still_training's named_modules, not_float32's and other_dtype's
parameters), and a RecursionError in a train() override goes on to the caller that tells it
as the nesting: export says models.registry.too_deep's line, exit 2, as analyze and run do."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from dlperf.analytic.counting import switch_mode
from dlperf.engine.build import not_float32
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

DEPTH = 1200  # with Flatten, the two Linears and the root: 1,202 deep

DEEP = f"""\
import torch.nn as nn

def make(num_classes=10, **kw):
    m = nn.Linear(16, 16)
    for _ in range({DEPTH}):
        m = nn.Sequential(m, nn.ReLU())
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), m, nn.Linear(16, num_classes))
"""

REFUSED = (
    "error: model '{spec}' nests its modules 1202 deep, too deep for Python's recursion limit "
    "({limit}), through which torch walks and calls them (flatten the nesting: one "
    "nn.Sequential of the layers, not each inside the last; or raise the limit in the model "
    "file: import sys; sys.setrecursionlimit(9000))"
)


def _deep(dtype: torch.dtype = torch.float32) -> nn.Module:
    """deep.py's model, its layers built in `dtype` (torch's .double() recurses too)."""
    m: nn.Module = nn.Linear(16, 16, dtype=dtype)
    for _ in range(DEPTH):
        m = nn.Sequential(m, nn.ReLU())
    return nn.Sequential(
        nn.Flatten(), nn.Linear(64, 16, dtype=dtype), m, nn.Linear(16, 10, dtype=dtype)
    )


def test_export_of_a_model_nested_too_deep_is_too_deeps_one_line(cli: Cli, tmp_path: Path) -> None:
    """Before: a RecursionError traceback from not_float32's model.parameters(), exit 1."""
    (tmp_path / "deep.py").write_text(DEEP)
    spec = f"{tmp_path / 'deep.py'}:make"
    r = cli("export", spec, "--input", "1,8,8", "--out", str(tmp_path / "deep.onnx"))
    said = [line for line in r.err.splitlines() if "triton not found" not in line]
    assert (r.code, said) == (2, [REFUSED.format(spec=spec, limit=sys.getrecursionlimit())])
    assert not (tmp_path / "deep.onnx").exists()


def test_the_mode_is_switched_without_recursion_on_every_module() -> None:
    """Before: "the model's train(False) fails: RecursionError: maximum recursion depth
    exceeded ..." (a UserError that blamed train(), not the nesting)."""
    model = _deep()
    switch_mode(model, False, "dlperf")
    # the root, Flatten, 2 Linears, the 1,200 levels' Sequential and ReLU, the innermost Linear
    assert [m.training for m in _modules(model)] == [False] * 2405
    switch_mode(model, True, "dlperf")
    assert all(m.training for m in _modules(model))


def _modules(model: nn.Module) -> list[nn.Module]:
    """model.modules() of these models, none shared, without torch's recursion."""
    found, stack = [], [model]
    while stack:
        found.append(module := stack.pop())
        stack.extend(module.children())
    return found


class Frozen(nn.Module):
    """A train() override inside the nesting: kept in eval mode whatever it is asked."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(16)

    def train(self, mode: bool = True) -> Frozen:
        return super().train(False)


def test_a_train_override_inside_the_model_is_still_called() -> None:
    inner = Frozen()
    model = nn.Sequential(nn.Linear(16, 16), nn.Sequential(inner, nn.ReLU()))
    switch_mode(model, True, "dlperf")
    assert model.training and model[1].training and not inner.training
    assert not inner.norm.training  # the override's own switch of its children


def test_a_walk_names_modules_and_parameters_as_torchs_does() -> None:
    from dlperf.models.walk import named_modules, named_parameters  # new in this round

    shared = nn.Linear(4, 4)
    model = nn.Sequential(shared, nn.Sequential(nn.ReLU(), shared), nn.Linear(4, 2, bias=False))
    assert list(named_modules(model)) == list(model.named_modules())
    assert list(named_parameters(model)) == list(model.named_parameters())


def test_not_float32_walks_a_deep_models_parameters_without_recursion() -> None:
    """Before: RecursionError from model.parameters() at 1,202 deep."""
    assert not_float32(_deep(), "'deep.py:make'", "mat1 and mat2 shapes cannot be", None) is None
    told = not_float32(_deep(torch.float64), "'deep.py:make'", "mat1 and mat2 shapes", None)
    assert told is not None and told.message == (
        "model 'deep.py:make': its parameters are float64, but dlperf feeds it float32 images"
    )
    half = _deep()
    half[3].half()  # the head alone: named as analyze names it
    told = not_float32(half, "'deep.py:make'", "mat1 and mat2 must have the same dtype", None)
    assert told is not None and told.message == (
        "model 'deep.py:make': its parameters (3.weight) are float16, but dlperf feeds it "
        "float32 images"
    )
