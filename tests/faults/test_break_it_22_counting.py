"""The twenty-second break-it round (P1: the user's own models), the faults of analyze's counts
and lines (fixer J):

- C. Parameters or submodules a forward makes on its first call (`self.w = nn.Parameter(...)`,
  `self.head = nn.Linear(...)`, Keras-style "build on first call") were counted as 0 params,
  and the root, which ran, was listed under "modules that never ran". They are now claimed
  when the forward of the module that made them ends, a submodule made so has its own row, and
  a module that ran is never listed as not run.
- E. A `def build(**kw)` factory was said to take no num_classes (classes null), though
  --classes reaches it through **kw: its classes are read from the output.
- G. A model built with .double() or .half() was blamed on analyze.input and analyze.batch;
  a .half() model was counted "at fp32": its parameters' dtype is now named, with the fix.
- H. `analyze --train` of a model whose outputs carry no gradient (int outputs, a whole forward
  under torch.no_grad) reported a training step with backward MACs 0, as run refuses it: it is
  now refused in one line.
- I. Two Parameters sharing one storage (`dec.weight = nn.Parameter(enc.weight.t())`, dec never
  run): the unused one was counted in the other's row. Each row now counts its own
  Parameters, by identity, as model.parameters() counts them.
- K. A keyword-only forward input (`forward(self, *, x)`) was told it "needs 2 arguments ...
  give x a default", and the forward so fixed was told it "takes no argument": now one line
  saying the input is keyword-only, with the fix "make it positional".
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import dlperf
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

MODELS = """
import torch, torch.nn as nn, torch.nn.functional as F


class ManualLazy(nn.Module):
    # the tester's: a weight made on the first call
    def __init__(self, num_classes=10):
        super().__init__()
        self.n = num_classes

    def forward(self, x):
        h = x.flatten(1)
        if not hasattr(self, "w"):
            self.w = nn.Parameter(torch.randn(h.shape[1], self.n, device=h.device) * 0.01)
        return h @ self.w


class HeadInForward(nn.Module):
    # the tester's: a submodule made on the first call
    def __init__(self, num_classes=10):
        super().__init__()
        self.n = num_classes
        self.stem = nn.Flatten()

    def forward(self, x):
        h = self.stem(x)
        if not hasattr(self, "head"):
            self.head = nn.Linear(h.shape[1], self.n).to(h.device)
        return self.head(h)


class Nested(nn.Module):
    # a made submodule holding a made parameter of its own, under a container that ran
    def __init__(self, num_classes=10):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, 16))
        self.inner = ManualLazy(num_classes)

    def forward(self, x):
        return self.inner(self.body(x)[:, :, None])


def manual_lazy(num_classes=10):
    return ManualLazy(num_classes)


def head_in_forward(num_classes=10):
    return HeadInForward(num_classes)


def nested(num_classes=10):
    return Nested(num_classes)


def varkw(**kw):
    return nn.Sequential(
        nn.Flatten(), nn.Linear(kw.get("in_channels", 1) * 64, kw.get("num_classes", 10))
    )


def dbl(num_classes=10):
    return nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes)).double()


def half(num_classes=10):
    return nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes)).half()


class IntOut(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.f = nn.Linear(64, num_classes)

    def forward(self, x):
        return (self.f(x.flatten(1)) * 100).long()


class NoGradAll(IntOut):
    def forward(self, x):
        with torch.no_grad():
            return self.f(x.flatten(1))


def intout(num_classes=10):
    return IntOut(num_classes)


def nogradall(num_classes=10):
    return NoGradAll(num_classes)


class TiedT(nn.Module):
    # the tester's: dec.weight a new Parameter over enc.weight's storage (transposed); dec
    # never runs, enc.weight is used again transposed; proj2 tied to proj
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.enc = nn.Linear(in_channels * 64, 32)
        self.dec = nn.Linear(32, in_channels * 64)
        self.dec.weight = nn.Parameter(self.enc.weight.t())
        self.head = nn.Linear(32, num_classes)
        self.proj = nn.Linear(32, 32, bias=False)
        self.proj2 = nn.Linear(32, 32, bias=False)
        self.proj2.weight = self.proj.weight

    def forward(self, x):
        h = F.relu(self.enc(x.flatten(1)))
        h = self.proj2(self.proj(h))
        r = F.linear(h, self.enc.weight.t())
        return self.head(h) + 0 * r.sum(1, keepdim=True)


def tied_t(num_classes=10, in_channels=1):
    return TiedT(num_classes, in_channels)


class KeywordOnly(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = nn.Linear(64, 10)

    def forward(self, *, x):
        return self.f(x.flatten(1))


class KeywordOnlyDefault(KeywordOnly):
    # the fix the old line gave: it still cannot take the input by position
    def forward(self, *, x=None):
        return self.f(x.flatten(1))


class KeywordOnlyTwo(KeywordOnly):
    def forward(self, *, x, mask):
        return self.f(x.flatten(1)) * mask


def kwonly():
    return KeywordOnly()


def kwonly_default():
    return KeywordOnlyDefault()


def kwonly_two():
    return KeywordOnlyTwo()
"""


@pytest.fixture
def models(tmp_path: Path) -> Path:
    path = tmp_path / "mine22.py"
    path.write_text(MODELS)
    return path


def _module(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location("fxj_models", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _torch_counts(model: nn.Module, batch: int = 1) -> tuple[int, int]:
    """torch's own counts, on real CPU tensors: FlopCounterMode's FLOPs of the first forward,
    and the parameters model.parameters() holds after it."""
    with FlopCounterMode(display=False) as counter:
        model(torch.rand(batch, 1, 8, 8))
    return counter.get_total_flops(), sum(p.numel() for p in model.parameters())


def _counted(cli: Cli, *args: str) -> dict[str, Any]:
    result = cli(*args, "--json")
    assert result.code == 0, result.err
    assert "Traceback" not in result.err
    doc: dict[str, Any] = json.loads(result.out)
    return doc


def _unwrapped(text: str) -> str:
    return " ".join(text.split())


# --- C: parameters and submodules made in forward ---------------------------------------------


@pytest.mark.parametrize(
    ("factory", "rows"),
    [
        ("manual_lazy", {"(model)": 640}),
        ("head_in_forward", {"head": 650, "stem": 0}),
        ("nested", {"body.1": 1040, "inner": 160}),
    ],
)
def test_parameters_made_in_forward_are_counted_in_the_row_that_made_them(
    cli: Cli, models: Path, factory: str, rows: dict[str, int]
) -> None:
    """Before: params 0 in every row and total, and '(model) N 640' under 'modules that never
    ran', the root that ran; head_in_forward's head had no row, its MACs in (model)'s."""
    doc = _counted(cli, "analyze", f"{models}:{factory}", "--input", "1,8,8", "--batch", "3")
    flops, params = _torch_counts(getattr(_module(models), factory)(), 3)
    assert doc["totals"]["params"] == params
    assert doc["totals"]["trainable_params"] == params
    assert 2 * doc["totals"]["macs"] == flops
    assert doc["not_run"] == [] and doc["totals"]["params_not_run"] == 0
    counted = {row["name"]: row for row in doc["layers"]}
    for name, held in rows.items():
        assert counted[name]["params"] == held, doc["layers"]
    if factory == "head_in_forward":
        assert counted["head"]["macs"] == 3 * 640 and counted["head"]["type"] == "Linear"
        assert "(model)" not in counted or counted["(model)"]["macs"] == 0


def test_a_module_counts_the_same_before_and_after_its_first_forward(models: Path) -> None:
    """Before: dlperf.analyze(module) gave 0 params before a real forward, 650 after."""
    for factory in ("manual_lazy", "head_in_forward"):
        model = getattr(_module(models), factory)()
        before = dlperf.analyze(model, (1, 8, 8)).to_dict()
        model(torch.rand(1, 1, 8, 8))
        after = dlperf.analyze(model, (1, 8, 8)).to_dict()
        # the same parameters and MACs; the first call's FLOPs include its initialiser's
        for key in ("params", "trainable_params", "params_not_run", "macs"):
            assert before["totals"][key] == after["totals"][key], (factory, key)
        assert before["totals"]["params"] == sum(p.numel() for p in model.parameters())
        assert before["not_run"] == []


def test_analyze_train_counts_a_head_made_in_forward(cli: Cli, models: Path) -> None:
    doc = _counted(cli, "analyze", f"{models}:head_in_forward", "--input", "1,8,8", "--train")
    counted = {row["name"]: row for row in doc["layers"]}
    assert counted["head"]["params"] == 650 and counted["head"]["backward_macs"] > 0
    assert doc["totals"]["training_memory"]["gradients_bytes"] == 650 * 4


# --- E: a **kw factory ------------------------------------------------------------------------


def test_a_factory_taking_kwargs_is_not_said_to_take_no_num_classes(cli: Cli, models: Path) -> None:
    """Before: classes null, classes_source 'the model takes no num_classes'."""
    doc = _counted(cli, "analyze", f"{models}:varkw", "--input", "1,8,8")
    assert doc["classes"] == 10
    assert "**kwargs" in doc["classes_source"]
    assert "takes no num_classes" not in doc["classes_source"]
    given = _counted(cli, "analyze", f"{models}:varkw", "--input", "1,8,8", "--classes", "5")
    assert given["classes"] == 5 and given["classes_source"] == "--classes"
    assert given["totals"]["params"] == 64 * 5 + 5


# --- G: a model built in float64 or float16 ---------------------------------------------------


@pytest.mark.parametrize(
    ("factory", "dtype", "drop"), [("dbl", "float64", ".double()"), ("half", "float16", ".half()")]
)
def test_a_model_built_in_another_dtype_is_told_so_by_analyze(
    cli: Cli, models: Path, factory: str, dtype: str, drop: str
) -> None:
    """Before: 'the model rejects input [1, 1, 8, 8]: ... mat1 and mat2 must have the same
    dtype ... (check analyze.input (C,H,W) and analyze.batch ...)' for .double(), and .half()
    counted 'at fp32', which run refuses."""
    result = cli("analyze", f"{models}:{factory}", "--input", "1,8,8")
    one_line(result, 2)
    said = _unwrapped(result.err)
    assert f"the model's parameters are {dtype}, but analyze feeds it float32 input" in said
    assert f"build it in float32 (drop {drop})" in said
    assert "analyze.input" not in said and "rejects input" not in said


def test_a_float16_model_is_counted_at_fp16(cli: Cli, models: Path) -> None:
    doc = _counted(cli, "analyze", f"{models}:half", "--input", "1,8,8", "--precision", "fp16")
    assert doc["totals"]["params"] == 650 and doc["totals"]["macs"] == 640


def test_a_float64_model_casting_its_input_is_still_counted_as_built(
    cli: Cli, tmp_path: Path
) -> None:
    """The float64 model that casts its input, as a run at fp32 trains it, counts as before."""
    path = tmp_path / "cast64.py"
    path.write_text(
        "import torch.nn as nn\n"
        "class N(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__(); self.f = nn.Linear(64, 10)\n"
        "    def forward(self, x): return self.f(x.flatten(1).double())\n"
        "def build(): return N().double()\n"
    )
    doc = _counted(cli, "analyze", f"{path}:build", "--input", "1,8,8")
    assert doc["totals"]["params"] == 650
    assert "float64" in doc["conventions"]["precision"]


# --- H: analyze --train of outputs without a gradient -----------------------------------------


@pytest.mark.parametrize(
    ("factory", "why"),
    [("intout", "returns torch.int64 values"), ("nogradall", "carry no gradient")],
)
def test_analyze_train_refuses_outputs_without_a_gradient(
    cli: Cli, models: Path, factory: str, why: str
) -> None:
    """Before: exit 0, backward MACs 0, step FLOPs the forward's, gradient and optimizer memory
    reported, no word; run refuses both."""
    result = cli("analyze", f"{models}:{factory}", "--input", "1,8,8", "--train")
    one_line(result, 2, "650 trainable parameters", why, "leave out --train")
    # the forward alone is still counted
    assert (
        _counted(cli, "analyze", f"{models}:{factory}", "--input", "1,8,8")["totals"]["macs"] == 640
    )


# --- I: two Parameters over one storage -------------------------------------------------------


def test_parameters_sharing_a_storage_are_each_counted_in_their_own_row(
    cli: Cli, models: Path
) -> None:
    """Before: the enc row held 4,128 for a Linear(64, 32) (dec.weight's 2,048 too), dec.bias
    alone under not_run, and a total of 5,482: neither by identity (5,546) nor by storage."""
    doc = _counted(cli, "analyze", f"{models}:tied_t", "--input", "1,8,8", "--batch", "2")
    flops, params = _torch_counts(_module(models).tied_t(), 2)
    counted = {row["name"]: row["params"] for row in doc["layers"]}
    assert counted["enc"] == 64 * 32 + 32 and counted["proj"] == 1024
    assert counted["proj2"] == 0 and counted["head"] == 330
    assert [(m["name"], m["params"]) for m in doc["not_run"]] == [("dec", 32 * 64 + 64)]
    totals = doc["totals"]
    assert totals["params"] + totals["params_not_run"] == params == 5546
    assert 2 * totals["macs"] == flops
    said = doc["conventions"]["params_counted"]
    assert "by identity" in said and "model.parameters()" in said and "dec.weight" in said


def test_a_tied_model_says_nothing_of_shared_storage(cli: Cli, models: Path) -> None:
    """proj2.weight is proj.weight itself (one Parameter): counted once, nothing to say."""
    doc = _counted(cli, "analyze", f"{models}:nested", "--input", "1,8,8")
    assert "params_counted" not in doc["conventions"]


# --- K: a keyword-only forward input ----------------------------------------------------------


@pytest.mark.parametrize(
    ("factory", "shown"),
    [("kwonly", "forward(*, x)"), ("kwonly_default", "forward(*, x=None)")],
)
def test_a_keyword_only_input_is_told_to_be_made_positional(
    cli: Cli, models: Path, factory: str, shown: str
) -> None:
    """Before: 'forward(*, x) needs 2 arguments ... (give x a default (x=None) ...)', and with
    that done, 'forward() takes no argument'."""
    result = cli("analyze", f"{models}:{factory}", "--input", "1,8,8")
    one_line(result, 2, shown, "keyword only", "analyze feeds it one, the input tensor")
    said = _unwrapped(result.err)
    assert "make it positional: def forward(self, x)" in said
    assert "2 arguments" not in said and "a default" not in said and "no argument" not in said


def test_two_keyword_only_arguments_are_told_both(cli: Cli, models: Path) -> None:
    result = cli("analyze", f"{models}:kwonly_two", "--input", "1,8,8")
    one_line(result, 2, "forward(*, x, mask)", "needs 2 arguments", "keyword only")
    assert "def forward(self, x, *, mask=None)" in _unwrapped(result.err)


def test_run_tells_a_keyword_only_input_to_be_made_positional(
    cli: Cli, models: Path, tiny_exp: Callable[..., Path]
) -> None:
    result = cli("run", str(tiny_exp(epochs=1)), "--set", f"model.name={models}:kwonly")
    one_line(result, 2, "forward(*, x)", "keyword only", "one tensor, a batch of images")
    assert "make it positional: def forward(self, x)" in _unwrapped(result.err)
