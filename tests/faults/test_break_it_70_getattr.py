"""Break-it round 70, T1 borderline 2: a model whose `__getattr__` raises KeyError (not
AttributeError) for a name it lacks trains under `run`, but `analyze` failed as "the model raised
KeyError: 'parametrizations'", a name the model never used: torch asks for it with
getattr(module, name, default), which takes only AttributeError as "none". The line and the
model's frame stay (the bug is the model's); a last line now says what a __getattr__ must raise."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.conftest import CliResult

MODEL = """
import torch.nn as nn

class M(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.table = {}
        self.f = nn.Sequential(nn.Flatten(), nn.Linear(64 * in_channels, num_classes))

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return self.__dict__["table"][name]

    def forward(self, x):
        return self.f(x)
"""


def test_a_getattr_raising_key_error_is_told_what_to_raise(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    (tmp_path / "m.py").write_text(MODEL)
    shown = cli("analyze", f"{tmp_path / 'm.py'}:M", "--input", "1,8,8")
    assert shown.code == 1
    lines = shown.err.strip().splitlines()
    assert lines[0] == "error: the model raised KeyError: 'parametrizations'"
    assert "in __getattr__" in shown.err and "Traceback" not in shown.err
    assert "__getattr__ must raise AttributeError for a name it does not hold" in lines[-2]
