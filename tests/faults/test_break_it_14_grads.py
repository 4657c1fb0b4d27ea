"""Break-it round 14 (issue 41), gradients: a model file that turns them off at import, a model
whose trained parameters get none, and a detection fine-tuning whose loss diverges.

1. `torch.set_grad_enabled(False)` at a model file's top level left gradients off for the whole
   process: the dry backward turns them on for itself and could not see it, and `dlperf run`
   ended at its first step in torch's 57-line traceback ("element 0 of tensors does not require
   grad"), exit 1, the run stored failed; staleness, scale and sweep gave torch's line as the
   point's failure. Now every trainer's build refuses it in one line, exit 2, nothing stored.
2. A custom autograd.Function whose backward returns None (or a conv before a dynamically
   quantized Linear, which has no autograd kernel) gave no trained parameter a gradient: the
   run "finished", exit 0, with the same loss every epoch. Now refused in one line; a model
   whose backward reaches only some of them trains, with a warning naming the others.
10. `dlperf detect finetune --lr 1e12` ended in a 50-line traceback ending in
   `dlperf.engine.loop.Diverged`, exit 1. Now the run is stored failed with the loop's line
   (its advice from dlperf.engine.divergence), and the command says it in one line, exit 1.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from dlperf.config import Experiment
from dlperf.data import load_data
from dlperf.engine.build import build_model
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_blank_augment_leftovers import POINT
from tests.faults.test_break_it_10_models import _exp as experiment
from tests.faults.test_break_it_12_ddp import UNUSED
from tests.faults.test_break_it_12_detect import finetune_args, shapes
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


@pytest.fixture(autouse=True)
def _gradients_back_on() -> Iterator[None]:
    """The model files here turn gradients off for the whole process, as they would for a
    user's: on again after each test, so that no later test trains without them."""
    yield
    torch.set_grad_enabled(True)


# --- 1. gradients turned off at import -----------------------------------------------------------

# The tester's m/graddisable.py.
GRAD_OFF = """
import torch, torch.nn as nn
torch.set_grad_enabled(False)
def Net(num_classes=10, in_channels=1):
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels*64, num_classes))
"""
OFF = "gradients are off as training starts: the model file turns them off"


@pytest.fixture
def grad_off(tmp_path: Path) -> Path:
    (tmp_path / "graddisable.py").write_text(GRAD_OFF)
    return experiment(tmp_path, f"{tmp_path / 'graddisable.py'}:Net")


def test_run_refuses_a_model_file_that_turns_gradients_off_at_import(
    cli: Cli, grad_off: Path, store: RunStore
) -> None:
    # before: exit 1, torch's traceback ending "RuntimeError: element 0 of tensors does not
    # require grad and does not have a grad_fn", the run stored failed
    result = cli("run", str(grad_off))
    one_line(result, 2, OFF, "torch.set_grad_enabled(False)", "remove it or guard it")
    assert store.list_runs() == []


@pytest.mark.parametrize(
    "command",
    [
        ["staleness", "--train", "{exp}", "--learners", "2"],
        ["scale", "run", "{exp}", *POINT],
    ],
    ids=["staleness", "scale"],
)
def test_studies_refuse_it_up_front_in_the_same_line(
    cli: Cli, grad_off: Path, store: RunStore, command: list[str]
) -> None:
    # before: the study's run or point failed with torch's "element 0 of tensors ..."
    result = cli(*[arg.format(exp=grad_off) for arg in command])
    one_line(result, 2, OFF, "torch.set_grad_enabled(False)")
    assert store.list_runs() == []


def test_a_sweep_refuses_it_before_its_first_point(
    cli: Cli, grad_off: Path, store: RunStore, tmp_path: Path
) -> None:
    sweep = tmp_path / "sw.toml"
    sweep.write_text(f'base = "{grad_off}"\n[grid]\n"train.lr" = [0.05, 0.1]\n')
    result = cli("sweep", str(sweep))
    one_line(result, 2, OFF)
    assert store.list_runs() == []


def test_gradients_off_before_the_model_is_built_are_told_as_the_callers() -> None:
    """dlperf.run called inside torch.no_grad(): not the model file's doing, and said so."""
    exp = Experiment.model_validate(
        {"model": {"name": "smallcnn"}, "data": {"name": "digits", "limit": 32}}
    )
    data = load_data(exp.data)
    with torch.no_grad(), pytest.raises(UserError) as refused:
        build_model(exp, data, torch.device("cpu"))
    assert str(refused.value).startswith(
        "gradients are off as training starts: they were off before the model was built"
    ), refused.value
    assert "model file" not in str(refused.value)
    build_model(exp, data, torch.device("cpu"))  # with them on, the same model builds


# --- 2. no trained parameter gets a gradient -----------------------------------------------------

# The tester's m/stopgrad.py: a straight-through op whose backward forgot its gradient.
STOPGRAD = """
import torch, torch.nn as nn
class Straight(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x): return x.round()
    @staticmethod
    def backward(ctx, g): return None
class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.b = nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, num_classes))
    def forward(self, x): return Straight.apply(self.b(x))
"""
# The tester's m/mm.py:HalfQuant: a conv, then a dynamically quantized Linear, which has no
# autograd kernel: the conv, the one trained layer, gets no gradient.
HALF_QUANT = """
import torch, torch.nn as nn, torch.nn.functional as F
class HalfQuant(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.c = nn.Conv2d(in_channels, 4, 3, padding=1)
        self.q = torch.ao.quantization.quantize_dynamic(
            nn.Sequential(nn.Linear(4 * 64, num_classes)), {nn.Linear})
    def forward(self, x): return self.q(F.relu(self.c(x)).flatten(1))
"""
NONE = "cannot be trained: its backward gives none of its {} trained parameters a gradient"


@pytest.mark.parametrize(
    ("source", "factory", "count", "why"),
    [
        (STOPGRAD, "Net", "2", ""),
        (HALF_QUANT, "HalfQuant", "2", " (torch has no backward for quantized::linear_dynamic)"),
    ],
    ids=["autograd-function-returns-none", "conv-before-quantized-linear"],
)
def test_run_refuses_a_model_whose_backward_gives_no_trained_parameter_a_gradient(
    cli: Cli, tmp_path: Path, store: RunStore, source: str, factory: str, count: str, why: str
) -> None:
    (tmp_path / "m.py").write_text(source)
    exp = experiment(tmp_path, f"{tmp_path / 'm.py'}:{factory}")
    # before: exit 0, "finished", the same loss in every epoch
    result = cli("run", str(exp), "--set", "train.epochs=2")
    one_line(result, 2, f"model '{tmp_path / 'm.py'}:{factory}' {NONE.format(count)}")
    assert f"{why}, so training would leave every weight as it started" in result.err
    assert "autograd kernel was not registered" not in result.err  # torch's warning: in the line
    assert store.list_runs() == []


def test_a_model_whose_backward_misses_some_parameters_trains_and_names_them(
    cli: Cli, tmp_path: Path
) -> None:
    (tmp_path / "unused.py").write_text(UNUSED)
    exp = experiment(tmp_path, f"{tmp_path / 'unused.py'}:Net")
    result = cli("run", str(exp), "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["status"] == "finished"
    # before: nothing said; aux's weights stayed as they started without a word
    assert result.err.count("no gradient") == 1, result.err
    said = " ".join(result.err.split("warning: model '", 1)[1].split())  # the console wraps it
    # round 24: for the probe's zero images, all that is known of them (a branch other images
    # take gets gradients)
    assert (
        "has trained parameters its backward gives no gradient for two zero images "
        "(aux.weight, aux.bias): " in said
    )
    assert "if no image reaches them, they keep their initial values" in said, said


# --- 10. detect finetune diverges ----------------------------------------------------------------


def test_a_diverged_detection_finetuning_is_one_line_and_a_failed_run(
    cli: Cli, tmp_path: Path
) -> None:
    root = shapes(tmp_path / "shapes", 4)  # 3 training images: one step an epoch at --batch 2
    args = finetune_args(root, tmp_path, 2)
    args[args.index("--epochs") + 1] = "2"
    # before: exit 1 and a 50-line traceback ending "dlperf.engine.loop.Diverged: loss
    # became nan at step 2"
    result = cli(*args, "--lr", "1e12", "--set", "train.optimizer=sgd")
    one_line(result, 1, "run 1 failed: loss became nan at step 2", "try a lower train.lr")
    (run,) = RunStore.open(f"sqlite:///{tmp_path / 'dlperf.db'}").list_runs()
    assert run.status == "failed"
    # stored as `dlperf run` stores a diverged run: the loop's line, not "Diverged: ..."
    assert run.error is not None and run.error.startswith("loss became nan at step 2"), run.error
    assert not (tmp_path / "d.pt").exists()
