"""Break-it round 37, T1 (the user's own models), fixer F11.

C6. analyze's "modules that never ran" named a container (`ml ModuleList`) whose
    parameter-free members ran (a ReLU) instead of the layer that never ran (`ml.1 Linear`):
    `not_run` let a container stand for its subtree when no parameter under it was counted,
    though modules without parameters under it had run. It stands for its subtree only if no
    module under it ran.
C7. What a model file did to torch's global state (a factory turning deterministic algorithms
    on) was told by analyze and predict as a raw Python warning (`file.py:0: RuntimeWarning:
    ...`), and under `python -W error` failed as "factory ... failed"; run tells it as
    `warning: ...`. analyze, predict and export collect the notes (models.registry.noting) as
    run does and the CLI prints them as `warning: ...`; dlperf.analyze warns them as
    RuntimeWarnings once the model is counted.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

import dlperf
from dlperf.analytic.counting import analyze_module
from dlperf.deploy.export import resolve
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

# --- C6: a container whose parameter-free members ran ---------------------------------------


class _Forgotten(nn.Module):
    """The tester's model (c6_model.py), and a container none of whose members ran (`aux`)."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(64, 10)
        self.ml = nn.ModuleList([nn.ReLU(), nn.Linear(7, 7)])  # ml[0] runs, ml[1] never
        self.md = nn.ModuleDict({"act": nn.ReLU(), "spare": nn.Linear(5, 5)})
        self.aux = nn.ModuleList([nn.ReLU(), nn.Linear(3, 3)])  # none of it runs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.md["act"](self.ml[0](self.head(x.flatten(1))))


def test_a_container_whose_members_ran_is_not_named_for_the_layer_that_never_ran() -> None:
    a = analyze_module(_Forgotten(), [1, 8, 8])
    # before: [("ml", "ModuleList", 56), ("md", "ModuleDict", 30), ("aux", ...)], while
    # ml.0 and md.act were rows of the same table
    assert [(m.name, m.type, m.params) for m in a.not_run] == [
        ("ml.1", "Linear", 56),
        ("md.spare", "Linear", 30),
        ("aux", "ModuleList", 12),
    ]


# --- C7: a model file's change to torch's global state, told as run tells it -----------------

FLIPS = """import torch, torch.nn as nn
def make(num_classes=10, in_channels=1):
    torch.use_deterministic_algorithms(True)  # a global switch the factory flips
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, num_classes))
"""
SAID = "turned torch's deterministic algorithms on in its factory; put back off"


@pytest.fixture
def flips(tmp_path: Path) -> str:
    path = tmp_path / "flips.py"
    path.write_text(FLIPS)
    return f"{path}:make"


@pytest.mark.parametrize("command", ["analyze", "predict"])
def test_the_cli_tells_a_model_files_global_change_as_a_warning_line_under_w_error(
    cli: Cli, flips: str, command: str
) -> None:
    device = ["--set", "predict.device=k80"] if command == "predict" else []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # python -W error
        r = cli(command, flips, "--input", "1,8,8", *device)
    # before: "error: factory ...:make failed: RuntimeWarning: model file ...", exit 2; and
    # without -W error "flips.py:0: RuntimeWarning: model file ..."
    assert r.code == 0, r.err
    path, said = flips.rpartition(":")[0], " ".join(r.err.split())  # the console wraps it
    assert f"warning: model file {path} {SAID}, as the process had them" in said, r.err
    assert said.count("deterministic") == 1 and "RuntimeWarning" not in said, r.err
    assert not torch.are_deterministic_algorithms_enabled()


def test_export_by_name_keeps_the_note_among_its_warnings(flips: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        source = resolve(flips, lambda: pytest.fail("a name opens no store"), (1, 8, 8))
    assert any(SAID in said for said in source.warnings), source.warnings  # before: raised


def test_the_python_api_warns_the_note_once_the_model_is_counted(flips: str) -> None:
    with pytest.warns(RuntimeWarning, match="deterministic algorithms on in its factory"):
        result = dlperf.analyze(flips, (1, 8, 8))
    assert result.to_dict()["totals"]["params"] == 650
