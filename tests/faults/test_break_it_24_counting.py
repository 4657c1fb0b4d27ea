"""The twenty-fourth break-it round (the user's own models), counting: analyze's side.

C2. A model whose train() takes no mode (a torch.export GraphModule, a `def train(self)`
override) gave a traceback in analyze: now one line naming the model and the fix, exit 2.
C3. analyze --train counted a backward that autograd refuses (an in-place op on a tensor the
backward needs): the saved-tensor hooks that sum the saved bytes skipped autograd's version
check. Now refused in one line, with the out-of-place fix a run gives.
C8. A module run through torch.func.functional_call with other tensors dropped its own
parameters from the totals: they are now listed, as unused, so that rows and the list add up to
model.parameters().
C11. The "check analyze.input (C,H,W) and analyze.batch" hint was given for errors that are not
about the input's shape (an Embedding fed floats, a forward indexing a dict), and a TorchScript
error was cut to "The following operation failed in the TorchScript interpreter.": the hint is
now given for shape errors alone, and a TorchScript error keeps its real line.
(C4, the fvcore convention, is in tests/analytic/test_conventions.py.)
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.func import functional_call, stack_module_state

from dlperf.analytic.counting import analyze_module
from dlperf.errors import UserError
from tests.conftest import CliResult
from tests.faults.test_break_it_24_models_a import NO_MODE
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


@pytest.mark.parametrize(
    ("factory", "said", "fix"),
    [
        ("build_export", "is a torch.export GraphModule", "return the nn.Module"),
        ("build_nomode", "train() does not take the mode", "def train(self, mode=True)"),
    ],
)
def test_a_model_whose_train_takes_no_mode_is_one_line(
    cli: Cli, tmp_path: Path, factory: str, said: str, fix: str
) -> None:
    (tmp_path / "nomode.py").write_text(NO_MODE)
    r = cli("analyze", f"{tmp_path / 'nomode.py'}:{factory}", "--input", "1,8,8")
    one_line(r, 2, said, fix)


def test_train_refuses_a_backward_that_autograd_refuses() -> None:
    # the tester's m6.py: ReLU(inplace=True) overwrites the sigmoid's output, which the
    # sigmoid's backward needs; `dlperf run` refuses it in its dry backward
    bad = nn.Sequential(nn.Flatten(), nn.Linear(64, 10), nn.Sigmoid(), nn.ReLU(inplace=True))
    with pytest.raises(UserError) as e:
        analyze_module(bad, [1, 8, 8], train=True)
    said = str(e.value)
    assert "modified by an inplace operation" in said and "is at version 1" in said
    assert "use the out-of-place form" in said and "leave out --train" in said
    # an in-place ReLU whose input no backward needs (after batch norm in training, which
    # saves its own input) still counts, as autograd runs it
    fine = nn.Sequential(
        nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(inplace=True), nn.Flatten(),
        nn.Linear(144, 10), nn.ReLU(inplace=True),
    )  # fmt: skip
    a = analyze_module(fine, [1, 8, 8], batch=2, train=True)
    assert a.totals()["backward_flops"] > 0


class OtherWeights(nn.Module):
    """The tester's m28.py: `spare` runs, but on the model's w and b, never on its own."""

    def __init__(self) -> None:
        super().__init__()
        self.spare = nn.Linear(64, 10)
        self.w = nn.Parameter(torch.randn(10, 64) * 0.01)
        self.b = nn.Parameter(torch.zeros(10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.spare, {"weight": self.w, "bias": self.b}, (x.flatten(1),))


class Ensemble(nn.Module):
    """The tester's m27.py: torch's ensembling recipe, three stacked Linears run through
    vmap(functional_call) over a meta-device base whose own parameters never compute."""

    def __init__(self) -> None:
        super().__init__()
        models = [nn.Linear(64, 10) for _ in range(3)]
        params, _ = stack_module_state(models)  # type: ignore[no-untyped-call]
        self.p = nn.ParameterDict({n: nn.Parameter(v) for n, v in params.items()})
        self.base = copy.deepcopy(models[0]).to("meta")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def one(p: dict[str, torch.Tensor], h: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = functional_call(self.base, p, (h,))
            return out

        stacked: torch.Tensor = torch.vmap(one, in_dims=(0, None))(dict(self.p), x.flatten(1))
        return stacked.mean(0)


@pytest.mark.parametrize(
    ("model", "rows", "unused"), [(OtherWeights, 650, "spare"), (Ensemble, 1950, "base")]
)
def test_functional_call_on_other_parameters_lists_the_modules_own_as_unused(
    model: type[nn.Module], rows: int, unused: str
) -> None:
    m = model()
    total = sum(p.numel() for p in m.parameters())
    a = analyze_module(m, [1, 8, 8])
    t = a.totals()
    assert (t["params"], t["params_not_run"]) == (rows, 650)
    assert t["params"] + t["params_not_run"] == total == a.params
    assert t["trainable_params"] == rows  # every parameter a row counts needs a gradient
    [listed] = a.to_dict()["not_run"]
    assert (listed["name"], listed["params"], listed["ran"]) == (unused, 650, True)


class EmbeddingFirst(nn.Module):
    """The tester's m9.py: an Embedding fed float images."""

    def __init__(self) -> None:
        super().__init__()
        self.e = nn.Embedding(17, 4)
        self.fc = nn.Linear(4 * 64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc(self.e(x).flatten(1))
        return out


class DictInput(nn.Module):
    """The tester's m22.py: a forward that indexes its input as a dict."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 10)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        out: torch.Tensor = self.fc(batch["image"].flatten(1))
        return out


class FixedBatch(nn.Module):
    """A forward that hard-codes the batch it was traced at (the tester's m2.py)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc(x.reshape(2, -1))
        return out


SHAPE_HINT = "check analyze.input (C,H,W) and analyze.batch"


def test_the_input_hint_is_given_for_shape_errors_alone() -> None:
    for model, said in [(EmbeddingFirst(), "indices"), (DictInput(), "too many indices")]:
        with pytest.raises(UserError) as e:
            analyze_module(model, [1, 8, 8])
        assert said in str(e.value) and SHAPE_HINT not in str(e.value), e.value
    with pytest.raises(UserError) as e:
        analyze_module(nn.Sequential(nn.Flatten(), nn.Linear(50, 10)), [1, 8, 8])
    # on the meta device torch says "a and b must have same reduction dim"
    assert "same reduction dim" in str(e.value) and SHAPE_HINT in str(e.value)
    # A TorchScript model's error: its real line, not the interpreter's first
    traced = torch.jit.trace(FixedBatch(), torch.zeros(2, 1, 8, 8))
    with pytest.raises(UserError) as e:
        analyze_module(traced, [1, 8, 8], batch=3)
    said = str(e.value)
    assert "RuntimeError: a and b must have same reduction dim" in said, said
    assert "TorchScript interpreter" not in said and SHAPE_HINT in said
