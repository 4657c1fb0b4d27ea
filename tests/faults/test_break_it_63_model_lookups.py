"""Break-it round 63, W1 cause 1: a KeyError or ValueError Python raises in the model's own line
was blamed on the images.

Before: a forward with a dict-key typo (`self.cfg["scael"]`), an `int("1.5")` or a pre-hook
throwing a KeyError through a generator was told "the model rejects digits images of shape
(1, 8, 8): KeyError: 'scael'", exit 2, by `run` and `analyze` alike: only a `raise` in the model
file and Python's NameError, AttributeError, ZeroDivisionError, RecursionError and ImportError
counted as the model's own. Now a KeyError or ValueError raised at the model file's line is the
model's error, with its frames, exit 1, as a `raise KeyError` there is; a ValueError unpacking
the input's shape (`n, c, h, w, z = x.shape`) is still the input's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import TINY, CliResult

Cli = Callable[..., CliResult]

MODELS = """\
from torch import nn


class Base(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.fc = nn.Linear(in_channels * 64, num_classes)
        self.cfg = {"scale": 1.0}

    def forward(self, x):
        return self.fc(x.flatten(1))


class DictKey(Base):
    def forward(self, x):
        return self.fc(x.flatten(1)) * self.cfg["scael"]


class IntParse(Base):
    def forward(self, x):
        return self.fc(x.flatten(1)) * int("1.5")


class Thrown(Base):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__(num_classes, in_channels)
        self.register_forward_pre_hook(lambda m, i: (_ for _ in ()).throw(KeyError("pre")))


class Unpacks(Base):
    def forward(self, x):
        n, c, h, w, z = x.shape
        return self.fc(x.flatten(1))
"""

CASES = [
    ("DictKey", "KeyError: 'scael'", '        return self.fc(x.flatten(1)) * self.cfg["scael"]'),
    (
        "IntParse",
        "ValueError: invalid literal for int() with base 10: '1.5'",
        '        return self.fc(x.flatten(1)) * int("1.5")',
    ),
    (
        "Thrown",
        "KeyError: 'pre'",
        '.throw(KeyError("pre")))',
    ),
]


@pytest.fixture
def models(tmp_path: Path) -> Path:
    (tmp_path / "m.py").write_text(MODELS)
    (tmp_path / "base.toml").write_text(TINY.format(epochs=1))
    return tmp_path


@pytest.mark.parametrize(("factory", "said", "line"), CASES)
def test_run_tells_the_models_own_lookup_as_the_models_error(
    cli: Cli, models: Path, factory: str, said: str, line: str
) -> None:
    done = cli("run", "base.toml", "--set", f"model.name=m.py:{factory}")
    assert done.code == 1, done.err
    lines = done.err.splitlines()
    assert lines[0] == f"error: the model raised {said}", done.err
    assert any(shown.startswith("    ") and line.strip() in shown for shown in lines), done.err
    assert "rejects" not in done.err


@pytest.mark.parametrize(("factory", "said", "line"), CASES)
def test_analyze_tells_the_models_own_lookup_as_the_models_error(
    cli: Cli, models: Path, factory: str, said: str, line: str
) -> None:
    done = cli("analyze", f"m.py:{factory}", "--input", "1,8,8")
    assert done.code == 1, done.err
    assert done.err.splitlines()[0] == f"error: the model raised {said}", done.err
    assert "rejects" not in done.err


def test_unpacking_the_inputs_shape_is_still_the_inputs(cli: Cli, models: Path) -> None:
    done = cli("run", "base.toml", "--set", "model.name=m.py:Unpacks")
    assert done.code == 2, done.err
    assert done.err.strip() == (
        "error: the model rejects digits images of shape (1, 8, 8): ValueError: not enough "
        "values to unpack (expected 5, got 4)"
    )
