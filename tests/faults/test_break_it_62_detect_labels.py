"""Break-it round 62, V1 cause 2: `detect export --weights W --labels FILE` of a detector of 2
classes besides the background said "4 labels for 3 classes (the labels list background first,
...)" of a file of 3 names: the background `read_labels` puts first was counted as the user's,
and the hint read as if the file had to start with it. The names are now counted as given, and
the line says how many the detector needs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.detect import ssd
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

NAME = "ssdlite320_mobilenet_v3_large"


@pytest.mark.parametrize(
    ("lines", "names"), [("x\ny\nz\n", 3), ("a\nb\nc\nd\n", 4), ("__background__\na\nb\nc\n", 3)]
)
def test_a_labels_file_is_counted_as_given(
    cli: Cli, tmp_path: Path, lines: str, names: int
) -> None:
    weights = tmp_path / "det.pt"
    ssd.save_checkpoint(ssd.build(NAME, num_classes=3, size=96), weights)
    (tmp_path / "labels.txt").write_text(lines)
    done = cli("detect", "export", "--weights", str(weights), "--labels", "labels.txt", "--out",
               str(tmp_path / "x.onnx"))  # fmt: skip
    one_line(
        done,
        2,
        f"error: {names} class names for a detector of 2 classes besides the background (give 2 "
        "names, one a line in class id order (a first line __background__ is taken as the "
        "background's))",
    )
    assert not (tmp_path / "x.onnx").exists()
