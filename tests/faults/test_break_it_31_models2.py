"""Break-it round 31, P1 (the user's own models), causes C4, C5 and C6.

- C4: a model file that armed a timer (`signal.alarm(3)` as a timeout guard, never cancelled)
  as it was imported or in its factory killed `dlperf run` with no word ("Alarm clock", exit
  142), the run left `lost`. The timer is now cancelled, in one line.
- C5: after `dlperf.analyze(...)` torch believed global module hooks were registered for the
  rest of the process (torch's handle of a hook taking kwargs leaves its flag behind): every
  later torch.compile(module) of the caller warned of them. torch's tables are left as they
  were.
- C6: a model with no forward (a typo `def foward`, a factory returning an nn.ModuleList) was
  blamed on the images ("the model rejects digits images of shape ..."). It is now one line
  naming the fault, as the model is built.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from dlperf.analytic.counting import analyze_module
from dlperf.errors import UserError
from dlperf.models.registry import create_model, noting
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

# --- C4: a timer armed by a model file -------------------------------------------------------

ARMS = {
    "alarm": "signal.alarm(60)",
    "itimer": "signal.setitimer(signal.ITIMER_REAL, 60.0, 1.0)",
    "virtual": "signal.setitimer(signal.ITIMER_VIRTUAL, 60.0)",
}
SIGNALS = {"alarm": "SIGALRM", "itimer": "SIGALRM", "virtual": "SIGVTALRM"}
WHICH = {
    "alarm": signal.ITIMER_REAL,
    "itimer": signal.ITIMER_REAL,
    "virtual": signal.ITIMER_VIRTUAL,
}


def _arming(tmp_path: Path, code: str, where: str) -> str:
    path = tmp_path / f"t_{where}.py"
    top, body = (code, "") if where == "import" else ("", f"    {code}\n")
    path.write_text(
        f"import signal\nimport torch.nn as nn\n{top}\n"
        "def build(num_classes=10, in_channels=1):\n"
        f"{body}"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 16, num_classes))\n"
    )
    return f"{path}:build"


@pytest.mark.parametrize("where", ["import", "factory"])
@pytest.mark.parametrize("kind", list(ARMS))
def test_a_timer_armed_by_a_model_file_is_put_back_with_a_line(
    tmp_path: Path, where: str, kind: str
) -> None:
    """A timer that was not armed (SIGVTALRM) is cancelled; one that was (pytest-timeout's
    SIGALRM, where it runs) is put back as it was."""
    which = WHICH[kind]
    before = signal.getitimer(which)
    try:
        with noting() as notes:
            create_model(_arming(tmp_path, ARMS[kind], where), num_classes=10, in_channels=1)
        left, every = signal.getitimer(which)
    finally:
        signal.setitimer(which, *before)  # the test's process, whatever the fix does
    assert abs(left - before[0]) < 1 and every == before[1]
    said = [n for n in notes if SIGNALS[kind] in n]
    assert len(said) == 1, notes
    assert said[0].startswith(f"model file {tmp_path / f't_{where}.py'} ")
    if before[0]:
        assert f"re-armed the process's {SIGNALS[kind]} timer" in said[0], said
    else:
        assert said[0].endswith(
            "; cancelled: by default its signal ends the process, dlperf mid-run with no word"
        )


def test_a_timer_of_the_callers_own_is_left_running(tmp_path: Path) -> None:
    before = signal.getitimer(signal.ITIMER_REAL)
    signal.setitimer(signal.ITIMER_REAL, 600.0)
    try:
        with noting() as notes:
            create_model(_arming(tmp_path, "pass", "import"), num_classes=10, in_channels=1)
        left, _ = signal.getitimer(signal.ITIMER_REAL)
    finally:
        signal.setitimer(signal.ITIMER_REAL, *before)
    assert left > 500 and notes == []


# --- C5: torch's global hook tables after analyze --------------------------------------------


def test_analyze_leaves_no_global_hook_behind() -> None:
    from torch.nn.modules import module

    before = dict(module._global_forward_hooks_with_kwargs)
    assert not module._has_any_global_hook()
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten())
    analyze_module(model, (1, 8, 8))
    analyze_module(model, (1, 8, 8), train=True)
    assert module._global_forward_hooks_with_kwargs == before
    assert not module._has_any_global_hook()


# --- C6: a model with no forward -------------------------------------------------------------

NO_FORWARD = """
import torch.nn as nn
class NoFwd(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.fc = nn.Linear(64, num_classes)
    def foward(self, x):  # typo
        return self.fc(x.flatten(1))
class Called(nn.Module):  # runs its layers from __call__, which is a forward
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.fc = nn.Linear(64, num_classes)
    def __call__(self, x):
        return self.fc(x.flatten(1))
def net(num_classes=10):
    return NoFwd(num_classes)
def mlist(num_classes=10):
    return nn.ModuleList([nn.Flatten(), nn.Linear(64, num_classes)])
def mdict(num_classes=10):
    return nn.ModuleDict({"fc": nn.Linear(64, num_classes)})
def called(num_classes=10):
    return Called(num_classes)
"""


def _no_forward(tmp_path: Path) -> Path:
    path = tmp_path / "nf.py"
    path.write_text(NO_FORWARD)
    return path


def test_a_model_without_forward_is_told_with_the_close_name(tmp_path: Path) -> None:
    spec = f"{_no_forward(tmp_path)}:net"
    with pytest.raises(UserError) as refused:
        create_model(spec, num_classes=10, in_channels=1)
    assert refused.value.message == f"model '{spec}' (class NoFwd) defines no forward()"
    assert refused.value.hint == "it has `foward`: did you mean forward?"


@pytest.mark.parametrize("factory,kind", [("mlist", "ModuleList"), ("mdict", "ModuleDict")])
def test_a_container_without_forward_is_told(tmp_path: Path, factory: str, kind: str) -> None:
    spec = f"{_no_forward(tmp_path)}:{factory}"
    with pytest.raises(UserError) as refused:
        create_model(spec, num_classes=10, in_channels=1)
    assert refused.value.message == (
        f"model '{spec}' is an nn.{kind}, which has no forward(): it holds layers, not how "
        "to call them"
    )
    assert refused.value.hint == (
        "return the layers in an nn.Sequential, or a Module whose forward calls them"
    )


def test_a_model_called_through_its_own_call_is_built(tmp_path: Path) -> None:
    model = create_model(f"{_no_forward(tmp_path)}:called", num_classes=10, in_channels=1)
    assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 10)


def test_analyze_and_run_tell_a_missing_forward_not_the_input(tmp_path: Path, cli: Cli) -> None:
    path = _no_forward(tmp_path)
    counted = cli("analyze", f"{path}:net", "--input", "1,8,8")
    assert counted.code == 2, counted
    assert counted.err.splitlines() == [
        f"error: model '{path}:net' (class NoFwd) defines no forward() "
        "(it has `foward`: did you mean forward?)"
    ]
    experiment = tmp_path / "e.toml"
    experiment.write_text(
        f'[model]\nname="{path}:mlist"\n[data]\nname="digits"\n[train]\nepochs=1\n'
        "[run]\nthreads=1\n"
    )
    trained = cli("run", str(experiment))
    assert trained.code == 2, trained
    assert "is an nn.ModuleList, which has no forward()" in trained.err
    assert "images" not in trained.err


def test_analyze_of_a_given_module_without_forward_tells_it() -> None:
    class Holder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 2)

    with pytest.raises(UserError, match=r"^the model \(class Holder\) defines no forward"):
        analyze_module(Holder(), (4,))
