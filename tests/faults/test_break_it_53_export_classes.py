"""Break-it round 53, fixer G1: `dlperf export` given one class.

T2 C4: `export m.py:tiny --num-classes 1` was accepted (export.num_classes allowed 1 where a
run's data.num_classes must be at least 2) and wrote a classifier of one score per image;
`infer` then gave every image index 0 with probability 1.0, a softmax over one score, a number
a user believes. Now export.num_classes is at least 2, as a run's data.num_classes is: one
line, exit 2, in the run's words, before the model file is imported or anything is written.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.config import ExportJob, load_job
from dlperf.errors import UserError
from tests.cli.test_app import one_line_error
from tests.conftest import CliResult

Cli = Callable[..., CliResult]
REFUSED = "export.num_classes: must be at least 2 (got 1)"
# A model file that says when it is imported: the refusal must come before the model is built.
MODEL = """
from pathlib import Path

import torch.nn as nn

Path(__file__).with_name("imported").touch()


def tiny(num_classes=10, in_channels=3):
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels, num_classes))
"""


@pytest.mark.parametrize(
    "given",
    [
        ["--num-classes", "1"],
        ["--set", "export.num_classes=1"],
        ["--config", "one.toml"],
    ],
    ids=["flag", "set", "config"],
)
def test_export_of_one_class_is_refused_before_the_model_is_built(
    cli: Cli, tmp_path: Path, given: list[str]
) -> None:
    (tmp_path / "m.py").write_text(MODEL)
    (tmp_path / "one.toml").write_text("[export]\nnum_classes = 1\n")
    out = tmp_path / "one.onnx"
    result = cli(
        "export", f"{tmp_path / 'm.py'}:tiny", "--input", "3,1,1", *given, "--out", str(out)
    )
    one_line_error(result, REFUSED)
    assert not out.exists() and not (tmp_path / "imported").exists()


def test_two_classes_are_the_fewest_export_takes() -> None:
    assert load_job(ExportJob, None, ["export.num_classes=2"]).export.num_classes == 2
    for override in ("export.num_classes=1", "export.num_classes=0"):
        with pytest.raises(UserError, match=r"export\.num_classes: must be at least 2"):
            load_job(ExportJob, None, [override])
