"""Break-it round 24, analyze's side of deep models and the measured step (fixer M).

M1. A model nested 3000 deep (nn.Sequential(m, nn.ReLU()) in a loop) gave `dlperf analyze` a
62-line RecursionError traceback from the walk of its modules; at 300 deep the input was
blamed ("the model rejects input [1, 1, 8, 8]: RecursionError ..."). Now one line naming the
nesting, its depth and Python's recursion limit, with the fix, exit 2.
M2. measure.make_step (analyze --measure, calibrate) called model.train(mode) unguarded: a
model whose train() takes no mode was a TypeError traceback; now counting.switch_mode's line.
M3. The totals' "params of modules that never ran" also counted the unused parameters of
modules that ran on others (functional_call): its label now says so.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from dlperf.analytic.counting import analyze_module
from dlperf.analytic.measure import make_step
from dlperf.analytic.tables import not_run_table, totals_table
from dlperf.errors import UserError
from tests.conftest import CliResult
from tests.faults.test_break_it_24_counting import OtherWeights
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

DEEP = """
import torch.nn as nn


def build(num_classes=10, depth=300, **kw):
    m = nn.Linear(64, 64)
    for _ in range(depth):
        m = nn.Sequential(m, nn.ReLU())
    return nn.Sequential(nn.Flatten(), m, nn.Linear(64, num_classes))
"""


@pytest.mark.parametrize(
    "depth",
    [
        300,  # the forward runs out of the limit: it was told as the input's fault
        3000,  # the walk of its modules runs out first: it was a traceback
    ],
)
def test_a_model_nested_too_deep_is_one_line_naming_the_nesting(
    cli: Cli, tmp_path: Path, depth: int
) -> None:
    (tmp_path / "deep.py").write_text(DEEP)
    r = cli(
        "analyze", f"{tmp_path / 'deep.py'}:build", "--input", "1,8,8",
        "--set", f"model.kwargs.depth={depth}",
    )  # fmt: skip
    # the root, `depth` Sequentials and the Linear inside them
    one_line(r, 2, f"nests its modules {depth + 2} deep", "recursion limit", "flatten the nesting")
    assert "sys.setrecursionlimit(" in r.err and "rejects input" not in r.err


class NoMode(nn.Module):
    """A `def train(self)` override that takes no mode (the tester's nomode.py)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def train(self) -> NoMode:  # type: ignore[override]
        return super().train(True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc(x)
        return out


def test_the_measured_step_switches_the_mode_as_counting_does() -> None:
    with pytest.raises(UserError) as e:
        make_step(NoMode(), [4], 2, False, "fp32", torch.device("cpu"))
    said = str(e.value)
    assert "train() does not take the mode" in said and "model.train(False)" in said, said
    assert "def train(self, mode=True)" in said


def test_the_unused_params_total_says_it_counts_modules_that_ran_on_others() -> None:
    result = analyze_module(OtherWeights(), [1, 8, 8]).to_dict()
    rows = {row[0]: row[1] for row in totals_table(result).rows}
    assert "params of modules that never ran" not in rows
    [label] = [k for k in rows if "ran on other parameters" in k]
    assert rows[label] == "650" and "unused" in label
    table = not_run_table(result)
    assert table is not None and "ran on other parameters" in table.title
    # a module that never ran keeps the words it had
    result = analyze_module(Spare(), [1, 8, 8]).to_dict()
    assert "params of modules that never ran" in {row[0] for row in totals_table(result).rows}
    table = not_run_table(result)
    assert table is not None and table.title == "modules that never ran"


class Spare(nn.Module):
    """A module whose `spare` Linear never runs."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 10)
        self.spare = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc(x.flatten(1))
        return out
