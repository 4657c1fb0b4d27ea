"""Break-it round 63, W1 cause 2: `dlperf analyze` (and `predict`) of a factory that leaves
torch.set_default_dtype(torch.float64) set refused the float64 model it built in one line,
"the model's parameters are float64, but analyze feeds it float32 input (...) (build it in
float32 (drop .double()), ...)", and dropped the "warning: model file ... set torch's default
dtype ..." line that `run` prints before the same refusal (and analyze prints when it counts
the model): the fix named a .double() the file never calls, and nothing said the cause. The
model file's warnings are now told as soon as the model is built, before its count refuses
it, and the fix names torch.set_default_dtype too.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

MODEL = """\
import torch
from torch import nn


def leave64(num_classes=10, in_channels=1):
    torch.set_default_dtype(torch.float64)
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, num_classes))


def put_back(num_classes=10, in_channels=1):
    torch.set_default_dtype(torch.float64)
    model = nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, num_classes)).float()
    return model
"""


# the model file as analyze was given it, relative to the directory it ran in
WARNING = (
    "warning: model file m.py set torch's default dtype to torch.float64 in its "
    "factory; put back to torch.float32, in which dlperf builds and trains models"
)


@pytest.mark.parametrize(
    "command", [("analyze",), ("predict", "--device", "K80")], ids=["analyze", "predict"]
)
def test_a_refused_float64_model_keeps_its_files_warning(
    cli: Cli, tmp_path: Path, command: tuple[str, ...]
) -> None:
    (tmp_path / "m.py").write_text(MODEL)
    result = cli(command[0], "m.py:leave64", "--input", "1,8,8", *command[1:])
    one_line(
        result,
        2,
        f"error: the model's parameters are float64, but {command[0]} feeds it float32 input",
        "(build it in float32 (drop .double()) and leave torch's default dtype float32 "
        "(no torch.set_default_dtype), or cast the input in forward",
    )
    lines = [line for line in result.err.splitlines() if line.startswith("warning: ")]
    assert lines == [WARNING], result.err
    # told once, before the refusal it explains
    assert result.err.index(WARNING) < result.err.index("error: ")


def test_a_counted_models_warning_is_told_once(cli: Cli, tmp_path: Path) -> None:
    """The model counted (cast back to float32 by its factory): the warning once, as before."""
    (tmp_path / "m.py").write_text(MODEL)
    result = cli("analyze", "m.py:put_back", "--input", "1,8,8", "--json")
    assert result.code == 0, result.err
    assert result.err.splitlines().count(WARNING) == 1, result.err
    assert '"params": 650' in result.out
