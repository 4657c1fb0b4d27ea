"""Break-it round 34, P1 (the user's own models), fixer F1.

- C1: a model calling an operator of the user's own (torch.library's define and impl, or a
  @torch.library.custom_op) with no fake impl was refused by `analyze` and `predict` as "the
  model rejects input [1, 3, 32, 32] ... its forward must take that": the input is fine (a
  run trains it on the CPU), the meta device the count runs on is what the operator lacks.
  Such a model is now counted on real CPU tensors, as one whose torch code reads values is,
  saying which operator has no fake impl, the operator itself "not counted"; too large for
  real tensors, one line names the operator and how to register a fake impl. Review: torch's
  own operators without a Meta kernel (aten::_ctc_loss) meet the same fallback, and were told
  to register a fake impl for aten's operator; they are named as torch's own now, the fix a
  smaller input.
- R1 (found fixing C1): the receptive field's reason named a user's operator as ATen's
  ("aten.twice in (model)"); it names each operator by its own namespace now.
- C2: run.seed seeded torch only: a model (or its file) drawing from numpy's or Python's
  `random` trained differently at every run of one seed, though a resumed run restores both
  generators (checkpoint.rng_state). The seed now seeds all three wherever torch was seeded:
  before and after the model file's import, before the factory, after the dry checks.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from dlperf.analytic import counting
from dlperf.analytic.counting import analyze_module
from dlperf.engine.build import build_model
from dlperf.errors import UserError
from tests.conftest import CliResult
from tests.engine.test_build import FakeData, experiment

Cli = Callable[..., CliResult]

# --- C1: an operator of the user's own with no fake impl ------------------------------------

# Defined once a process: torch.library refuses a namespace or an operator defined twice.
_LIB = torch.library.Library("dlperf_bk34", "DEF")
_LIB.define("quad(Tensor x) -> Tensor")
_LIB.impl("quad", lambda x: x * 4, "CPU")


@torch.library.custom_op("dlperf_bk34c::thrice", mutates_args=())
def thrice(x: torch.Tensor) -> torch.Tensor:
    return x * 3


class UserOp(nn.Module):
    """The tester's model (bk34 P1, lib2.py): a convolution, the user's operator, a head."""

    def __init__(self, num_classes: int = 10, custom: bool = False) -> None:
        super().__init__()
        self.custom = custom
        self.c = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4 * 30 * 30, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.c(x)
        y = thrice(y) if self.custom else torch.ops.dlperf_bk34.quad(y)
        return self.fc(y.flatten(1))


MODEL = """
from tests.faults.test_break_it_34_models import UserOp
def make(num_classes=10): return UserOp(num_classes)
"""

# what the conv and the head count on any device: 4*30*30 outputs of 27 MACs, then 3600 x 10
MACS = 4 * 30 * 30 * 27 + 3600 * 10


@pytest.fixture
def user_op(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.py").write_text(MODEL)
    return tmp_path


@pytest.mark.parametrize("command", ["analyze", "predict"])
def test_c1_a_torch_library_op_without_fake_impl_is_counted_on_real_tensors(
    cli: Cli, user_op: Path, command: str
) -> None:
    device = ["--device", "K80"] if command == "predict" else []
    result = cli(command, "m.py:make", *device)
    assert result.code == 0, result.err
    assert "rejects input" not in result.err
    err = " ".join(result.err.split())
    assert "counted on real CPU tensors" in err
    assert "the operator dlperf_bk34::quad has no fake impl" in err
    assert "dlperf_bk34.quad x1" in err


def test_c1_a_custom_op_without_fake_impl_is_counted_on_real_tensors() -> None:
    counted = analyze_module(UserOp(custom=True), [3, 32, 32])
    assert counted.real_tensors is not None
    assert "dlperf_bk34c::thrice has no fake impl" in counted.real_tensors
    assert counted.unsupported_ops == {"dlperf_bk34c.thrice": 1}
    assert sum(layer.macs for layer in counted.layers) == MACS


def test_c1_too_large_for_real_tensors_names_the_op_and_its_fix(
    cli: Cli, user_op: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(counting, "REAL_TENSORS_MAX_BYTES", 1000)
    result = cli("analyze", "m.py:make")
    assert result.code == 2
    assert result.out == ""
    err = " ".join(result.err.split())
    assert err.startswith("error: the operator dlperf_bk34::quad has no fake impl"), err
    assert "torch.library.register_fake('dlperf_bk34::quad')" in err
    assert "rejects input" not in err


class Ctc(nn.Module):
    """A forward calling torch's own operator that has no Meta kernel (aten::_ctc_loss)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(12, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x.flatten(1))
        steps = y.log_softmax(1).expand(3, -1, -1)
        n, targets = x.shape[0], torch.ones(x.shape[0], 1, dtype=torch.long, device=x.device)
        three = torch.full((n,), 3, dtype=torch.long, device=x.device)
        loss = nn.functional.ctc_loss(steps, targets, three, torch.ones_like(three))
        return y + 0 * loss


def test_c1_torchs_own_op_without_meta_kernel_is_no_users_to_register(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torch's own operators meet the same fallback ("aten::_ctc_loss.Tensor: attempted to
    run this operator with Meta tensors"): the fix is no fake impl for the user to register."""
    counted = analyze_module(Ctc(), [3, 2, 2])
    assert counted.real_tensors == "torch's own operator aten::_ctc_loss.Tensor has no Meta kernel"
    monkeypatch.setattr(counting, "REAL_TENSORS_MAX_BYTES", 250)  # weights 208 B, input 48
    with pytest.raises(UserError) as refused:
        analyze_module(Ctc(), [3, 2, 2])
    assert refused.value.message.startswith(
        "torch's own operator aten::_ctc_loss.Tensor has no Meta kernel for the meta device"
    )
    assert refused.value.hint == "a smaller analyze.batch or analyze.input fits"


# --- R1 (found fixing C1): the receptive field named a user's operator as aten's -------------


@torch.library.custom_op("dlperf_bk34f::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@twice.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def test_r1_the_receptive_field_names_a_user_op_by_its_own_namespace() -> None:
    """Counted on meta (it has a fake impl), the field ends at the user's operator, which is
    no ATen operator: it was "aten.twice in (model)"."""
    model = nn.Sequential(nn.Conv2d(3, 4, 3))
    model.register_forward_hook(lambda module, args, out: twice(out))
    counted = analyze_module(model, [3, 8, 8])
    reason = str(counted.receptive_field["reason"])
    assert "dlperf_bk34f.twice in (model)" in reason, reason
    assert "aten.twice" not in reason


# --- C2: run.seed seeds numpy's and Python's generators too --------------------------------

# The tester's model (bk34 P1, rm3.py), its noise drawn from numpy and Python in the forward,
# and a factory drawing from both as it builds
DRAWS = """
import random
import numpy as np
import torch, torch.nn as nn
class M(nn.Module):
    def __init__(s, num_classes=10):
        super().__init__(); s.fc = nn.Linear(64, num_classes)
    def forward(s, x):
        return s.fc(x.flatten(1)) + float(np.random.rand()) + random.random()
def make(num_classes=10, in_channels=1):
    m = M(num_classes)
    with torch.no_grad():
        m.fc.bias.fill_(float(np.random.rand()) + random.random())
    return m
"""


def test_c2_run_seed_seeds_numpy_and_python_random_as_torch(tmp_path: Path) -> None:
    (tmp_path / "draws.py").write_text(DRAWS)
    exp = experiment(f"{tmp_path}/draws.py:make")
    built, drawn = [], []
    for _ in range(2):
        np.random.seed(None)  # whatever the generators held before, as a fresh process has
        random.seed()
        built.append(build_model(exp, FakeData(), torch.device("cpu")))  # type: ignore[arg-type]
        drawn.append((np.random.rand(), random.random()))  # where training starts drawing
    assert torch.equal(built[0].fc.bias, built[1].fc.bias)
    assert drawn[0] == drawn[1]
    np.random.seed(3)
    random.seed(3)
    assert drawn[0] == (np.random.rand(), random.random())  # the dry checks drew nothing
