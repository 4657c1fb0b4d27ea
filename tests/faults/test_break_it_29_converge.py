"""Break-it round 29, P2 causes C, D and G: converge's loss check and sources, detect's class
count.

C1 (C). A negative loss in a converge CSV was refused as "loss/error values must be ≥ 0 (is
the metric right?)": no file, no line, and in `converge regress` no word of which source. Now
named FILE, with the line holding it, as accuracy out of [0, 1] is (`curve.check_values`).
C2 (D). `detect eval` (and finetune) with weights of another class count were told to "pass
the --num-classes it was trained with", an option they do not have. Now the line says the
weights' classes and the set's, with a fix the command takes (eval: a split of the weights'
classes; finetune: no --weights or weights of these classes; export keeps --num-classes, now
with the count).
C3 (G). `converge regress a.csv:depth=20 a.csv:depth=32 ...` trained on one curve counted
twice, exit 0: a file is one curve, whatever features it is given. Now refused as the same
source spelled twice is, naming both.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import CliResult
from tests.faults.test_break_it_21_detect import shapes, sub
from tests.faults.test_break_it_24_detect import finetune, refused_before_training, xml
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]
STEPS = np.arange(1, 41)
XY = ["--x", "step", "--y", "loss"]
REGRESS = ["--features", "depth", "--predict", "depth=56", *XY]


def _loss_csv(path: Path, b0: float, level: float) -> str:
    """An Optimus curve 1 / (b0·k + 1) + level over steps 1..40, as a CSV."""
    rows = "".join(f"{k},{1 / (b0 * k + 1) + level:.5f}\n" for k in STEPS)
    path.write_text("step,loss\n" + rows)
    return str(path)


# --- C1 (C): a negative loss is named by its file and line -----------------------------------


@pytest.mark.parametrize("command", ["fit", "regress"])
def test_a_negative_loss_is_named_by_its_file_and_line(
    cli: Cli, tmp_path: Path, command: str
) -> None:
    """1 / (0.05 k + 1) − 0.4 goes below 0 from k = 31 (line 32: the header is line 1). Before:
    "loss/error values must be ≥ 0 (is the metric right?)", in regress with three sources."""
    neg = _loss_csv(tmp_path / "neg.csv", 0.05, -0.4)
    if command == "fit":
        r = cli("converge", "fit", "--csv", neg, *XY)
    else:
        d20, d44 = (
            _loss_csv(tmp_path / f"d{d}.csv", b0, 0.2) for d, b0 in ((20, 0.05), (44, 0.03))
        )
        r = cli("converge", "regress", f"{d20}:depth=20", f"{neg}:depth=32", f"{d44}:depth=44",
                *REGRESS)  # fmt: skip
    one_line(
        r,
        2,
        f"error: {neg}: loss values must be ≥ 0; line 32 holds -0.00784 (the curves fitted "
        "level off at 0 or above: is converge.metric right? a loss that goes below 0, as a "
        "log-likelihood may: add a constant to it)",
    )


# --- C3 (G): one file given twice with other features ----------------------------------------


def test_one_file_given_twice_with_other_features_is_refused_naming_both(
    cli: Cli, tmp_path: Path
) -> None:
    """Before: exit 0, a regression over 3 "runs", two of them d20.csv's one curve."""
    d20, d44 = (_loss_csv(tmp_path / f"d{d}.csv", b0, 0.2) for d, b0 in ((20, 0.05), (44, 0.03)))
    r = cli("converge", "regress", f"{d20}:depth=20", f"{d20}:depth=32", f"{d44}:depth=44",
            *REGRESS)  # fmt: skip
    one_line(
        r,
        2,
        f"error: {d20}:depth=32 is {d20}:depth=20 again (give each curve once: one given "
        "twice counts twice in the regression, whatever features it is given)",
    )


# --- C2 (D): weights of another class count --------------------------------------------------


@pytest.mark.faults  # four detectors built and one evaluation: over 10 s under load
def test_weights_of_another_class_count_say_both_counts_and_a_fix_the_command_takes(
    cli: Cli, tmp_path: Path
) -> None:
    """make-shapes' 4 images: train squares and discs, val (000003) discs only; the weights a
    state_dict of 3 classes (background + 2). Before: each command said "pass the
    --num-classes it was trained with", which only export takes. Eval's fix, the train split
    (squares and discs), is tried."""
    import torch
    from torchvision.models import detection

    root = shapes(tmp_path)
    weights = tmp_path / "det.pt"
    model = detection.ssdlite320_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=3
    )
    torch.save(model.state_dict(), weights)
    common = ["--weights", str(weights), "--size", "96", "--threads", "1"]
    holds = f"error: {weights} holds a detector of 3 classes (background + 2)"
    one_line(
        cli("detect", "eval", str(root), "--val-split", "val", *common),
        2,
        f"{holds}, split val names 1 (disc) (test it on a split of the 2 classes it was "
        "trained on (--val-split), or give weights fine-tuned on this set: `dlperf detect "
        "finetune`)",
    )
    one_line(
        cli("detect", "export", "--out", str(tmp_path / "det.onnx"), *common),
        2,
        f"error: {weights} does not fit ssdlite320_mobilenet_v3_large with 91 classes: it "
        "holds 3 classes (background + 2) (pass --num-classes 3)",
    )
    # finetune trains on train's classes and val's: a third one in train makes 4 in all
    sub(xml(root, "000000"), "<name>square</name>", "<name>triangle</name>")
    out = tmp_path / "w.pt"
    one_line(
        finetune(cli, root, out, "--weights", str(weights)),
        2,
        f"{holds}, this set names 3 (disc, square, triangle) (fine-tune from weights of "
        "these classes, or leave out --weights to start from random ones)",
    )
    refused_before_training(cli, out)
    sub(xml(root, "000000"), "<name>triangle</name>", "<name>square</name>")
    r = cli("detect", "eval", str(root), "--val-split", "train", *common)
    assert r.code == 0, r.err
    assert "disc" in r.out and "square" in r.out
