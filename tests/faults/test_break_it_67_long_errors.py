"""An error whose text is a megabyte (break-it round 67, W1 C6).

Before: a model's exception with a 1 MB message was said whole: `dlperf analyze` printed it as
one 1 MB line, a sweep twice (its point's line and its closing list of failed runs), and the
failed run stored all of it as its error (`runs show` printed it all). Now `errors.error_text`,
where dlperf takes every error's text, cuts a text longer than 5,000 characters to its first
3,000 and its last 1,000, " ... (N characters left out) ... " between: the line on screen, the
stored error and every other place say the same cut text; shorter texts are as before.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.errors import error_text
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_break_it_66_sweep_frames import BASE  # the same short digits run

Cli = Callable[..., CliResult]

# 1,000,006 characters: what is kept is "BIG" and 2,997 y's, then 997 y's and "END"
HUGE = '"BIG" + "y" * 1_000_000 + "END"'
CUT = "BIG" + "y" * 2997 + " ... (996,006 characters left out) ... " + "y" * 997 + "END"

# Raises in the second epoch's training (as test_break_it_66_sweep_frames's model)
MODEL = f"""\
import torch
from torch import nn
class M(nn.Module):
    def __init__(self, num_classes=10, in_channels=1, **kw):
        super().__init__()
        self.f, self.l, self.n = nn.Flatten(), nn.LazyLinear(num_classes), 0
    def forward(self, x):
        self.n += torch.is_grad_enabled()
        if self.n > 2:
            raise RuntimeError({HUGE})
        return self.l(self.f(x))
"""


def test_a_huge_import_error_is_one_cut_line(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "e1.py").write_text(f"raise RuntimeError({HUGE})\n")
    result = cli("analyze", "e1.py:make")
    assert result.code == 2, result.err[:500]
    assert result.err.splitlines() == [
        f"error: model file e1.py failed to import (e1.py, line 1): RuntimeError: {CUT}"
    ]


def test_a_sweep_point_says_and_stores_a_huge_error_cut(
    cli: Cli, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.py").write_text(MODEL)
    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "sw.toml").write_text('name = "sw"\nbase = "base.toml"\n[grid]\n"run.seed" = [0]\n')
    result = cli("sweep", "sw.toml")
    assert result.code == 1, result.err[:500]
    assert len(result.err) < 20_000  # was 2 MB: the text twice
    said = [line for line in result.err.splitlines() if "RuntimeError: BIG" in line]
    assert said == [
        f"point 1/1 failed: the model raised RuntimeError: {CUT}",
        f"run 1 failed: RuntimeError: {CUT}",
    ]
    [run] = RunStore.open(db).list_runs()
    assert (run.status, run.error) == ("failed", f"RuntimeError: {CUT}")


@pytest.mark.parametrize("length", [5000, 5001])
def test_only_a_text_past_5000_characters_is_cut(length: int) -> None:
    text = "a" * (length - 1) + "z"
    said = error_text(ValueError(text))
    if length == 5000:
        assert said == text  # as before
    else:
        assert said == "a" * 3000 + " ... (1,001 characters left out) ... " + "a" * 999 + "z"
