"""Break-it round 61, U1 cause 4: `dlperf detect export --weights W --num-classes 5` of a
`detect finetune` checkpoint of 3 classes said "3 labels for 5 classes (the labels list
background first, one name per class id)": the checkpoint's own labels, counted against
--num-classes, sent the user to a labels list they never gave. A plain state_dict of the same
weights was told the documented "(pass --num-classes 3)"; the checkpoint now is too.
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


@pytest.mark.parametrize("labels", [None, ["a", "b", "c", "d"]])
def test_a_checkpoint_of_other_classes_is_told_the_num_classes_it_needs(
    cli: Cli, tmp_path: Path, labels: list[str] | None
) -> None:
    weights = tmp_path / "base.pt"
    ssd.save_checkpoint(ssd.build(NAME, num_classes=3, size=96), weights)
    args = ["--weights", str(weights), "--num-classes", "5", "--out", str(tmp_path / "e.onnx")]
    if labels is not None:  # 5 with the background put first: the weights still hold 3
        (tmp_path / "labels.txt").write_text("\n".join(labels) + "\n")
        args += ["--labels", str(tmp_path / "labels.txt")]
    one_line(
        cli("detect", "export", *args),
        2,
        f"error: {weights} does not fit {NAME} with 5 classes: it holds 3 classes (background "
        "+ 2) (pass --num-classes 3)",
    )
    assert not (tmp_path / "e.onnx").exists()
