"""Break-it round 27, P1 (the user's own models), fixer fxF:

C2. `dlperf export FILE.py:factory --num-classes N` exported a model of another width, exit 0
and no word, where the factory takes no num_classes or ignores it. It is now refused, or warned
of, as `analyze` refuses or warns (the same code).
C3. `analyze --train` of a model with no trainable parameter (all frozen, or none: buffers
only) counted a backward of 0 MACs; it is now refused in one line, in run's words.
C4. Complex scores were refused with the fix "return the scores before any argmax or
rounding", which made none of them complex; the fix for them is now real scores (.real,
.abs()), in run's check and export's alike.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.deploy.export import from_registry, resolve
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

# The tester's files (/tmp/bk27/P1/m/cls.py, buf.py, outs.py), one file
MODELS = """
import torch, torch.nn as nn


def fixed12():
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 12))


def own12(num_classes=12, in_channels=1):
    return nn.Sequential(nn.Flatten(), nn.Linear(64 * in_channels, 12))


def frozen(num_classes=10, in_channels=1):
    m = nn.Sequential(nn.Flatten(), nn.Linear(64 * in_channels, num_classes))
    m.requires_grad_(False)
    return m


class BufOnly(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.register_buffer("w", torch.randn(64 * in_channels, num_classes))

    def forward(self, x):
        return x.flatten(1) @ self.w


class Outs(nn.Module):
    def __init__(self, kind="complex", num_classes=10, in_channels=1):
        super().__init__()
        self.f = nn.Linear(64 * in_channels, num_classes)
        self.kind = kind

    def forward(self, x):
        y = self.f(x.flatten(1))
        return torch.complex(y, y) if self.kind == "complex" else y.round().long()
"""


@pytest.fixture
def models(tmp_path: Path) -> str:
    path = tmp_path / "cls.py"
    path.write_text(MODELS)
    return str(path)


def _no_store() -> RunStore:
    raise AssertionError("a registry model opens no store")


def test_export_refuses_or_warns_of_classes_the_model_does_not_use(
    cli: Cli, models: str, tmp_path: Path
) -> None:
    # the factory takes no num_classes: refused, as analyze refuses it, before any export
    out = tmp_path / "h.onnx"
    refused = cli("export", f"{models}:fixed12", "--input", "1,8,8", "--num-classes", "5",
                  "--out", str(out))  # fmt: skip
    one_line(refused, 2, "export.num_classes 5: the factory fixed12 takes no num_classes")
    assert not out.exists()
    with pytest.raises(UserError, match=r"model\.kwargs\.num_classes 5: the factory fixed12"):
        resolve(f"{models}:fixed12", _no_store, (1, 8, 8), None, {"num_classes": 5})
    # the factory takes num_classes and ignores it: warned of, in analyze's words
    source = resolve(f"{models}:own12", _no_store, (1, 8, 8), 5)
    assert source.warnings == [
        "the model's output is [batch, 12]: 12 scores, not the 5 classes it was given "
        "(export.num_classes), which it does not use"
    ]
    assert resolve(f"{models}:own12", _no_store, (1, 8, 8), 12).warnings == []
    # bench rebuilds an exported model with its graph's width: no number of the user's
    assert from_registry(f"{models}:fixed12", (1, 8, 8), 12).warnings == []


@pytest.mark.parametrize(
    ("factory", "said"),
    [
        ("frozen", "model {spec} has 650 parameters, all frozen (requires_grad=False)"),
        ("BufOnly", "model {spec} has no parameters to train"),
    ],
)
def test_analyze_train_refuses_a_model_with_nothing_to_train(
    cli: Cli, models: str, factory: str, said: str
) -> None:
    spec = f"{models}:{factory}"
    result = cli("analyze", spec, "--input", "1,8,8", "--train")
    one_line(result, 2, said.format(spec=f"'{spec}'"), "leave out --train")
    assert cli("analyze", spec, "--input", "1,8,8").code == 0  # its forward is counted


def test_complex_scores_are_told_to_be_real(
    cli: Cli, models: str, tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    spec = f"{models}:Outs"
    run = cli("run", str(tiny_exp(epochs=1)), "--set", f'model.name="{spec}"',
              "--set", "data.limit=64")  # fmt: skip
    one_line(run, 2, "torch.complex64 values", ".real", ".abs()")
    assert "argmax" not in run.err
    out = str(tmp_path / "c.onnx")
    export = cli("export", spec, "--input", "1,8,8", "--out", out)
    one_line(export, 2, "torch.complex64 values", ".real", ".abs()")
    assert "argmax" not in export.err
    # integer scores keep their fix
    integer = cli(
        "export", spec, "--input", "1,8,8", "--out", out, "--set", 'model.kwargs.kind="int"'
    )
    one_line(integer, 2, "torch.int64 values", "before any argmax or rounding")
