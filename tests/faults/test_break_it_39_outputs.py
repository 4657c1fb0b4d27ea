"""Break-it round 39, fixer F5: T3's causes C2 and C3, empty output paths and `detect export`'s
parity of a random detector.

C2. Typer reads a path option or argument given '' as Path('.'): `data samples --out ''` wrote
its PNG files into the current directory ("wrote 10 images to ."), `detect make-shapes ''` its
Annotations/ ImageSets/ JPEGImages/, `detect run ... --out ''` its annotated copies, all exit 0;
'  ' made a folder named by the blanks; `export RUN --out ''` was refused naming '.' ("cannot
use .: Is a directory"), not what was typed. `report --out ''` and `runs export --out ''` were
refused in one line (round 38). Now every option or argument that names an output (a
directory or a file: data samples/describe --out, detect make-shapes ROOT, detect run --out,
every `outputs.out_file` --out, every --plot, runs plot --out) is refused as it is parsed, in
that one line (`parsing.not_blank`), exit 2, nothing written.
C3. `detect export` of a random SSDlite at --size 96 failed parity about one run in seven on a
correct export: the weights were not seeded, and two detections of near-tied scores (3.5e-6
apart) ordered otherwise by ONNX Runtime were compared by position, a 54-px "box diff" and
labels "not equal", exit 1. Now the random weights are drawn from a seeded generator (the same
detector every run) and detections are matched label to label where their scores tie within
atol, while the scores are still compared in order: a box, label or score that differs, or an
order that differs where the scores do not tie, still fails.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from dlperf.detect import ssd
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

# --- C2: '' or blanks for an output path ------------------------------------------------------

CURVE = Path(__file__).parents[2] / "examples" / "pollux" / "cifar10_validation-128.csv"
EMPTY = [
    (
        ("data", "samples", "digits", "--per-class", "1", "--out"),
        "data samples writes its PNG files into a directory, not {!r} "
        "(give its path, e.g. --out samples)",
    ),
    (
        ("data", "describe", "digits", "--out"),
        "data describe writes its figures into a directory, not {!r} "
        "(give its path, e.g. --out figures)",
    ),
    (
        ("detect", "make-shapes", "--images", "2"),
        "detect make-shapes writes its data set into a directory, not {!r} "
        "(give its path, e.g. dlperf detect make-shapes shapes)",
    ),
    (
        ("detect", "run", "det.onnx", "a.png", "--out"),
        "detect run writes its annotated copies into a directory, not {!r} "
        "(give its path, e.g. --out annotated)",
    ),
    (
        ("detect", "export", "--num-classes", "3", "--out"),
        "--out names the ONNX file to write, not {!r} (give its path, e.g. --out det.onnx)",
    ),
    (
        ("detect", "finetune", "shapes", "--out"),
        "--out names the checkpoint to write, not {!r} (give its path, e.g. --out detector.pt)",
    ),
    (
        ("export", "smallcnn", "--out"),
        "--out names the file to write, not {!r} (give its path, e.g. --out FILE)",
    ),
    (
        ("converge", "fit", "--csv", str(CURVE), "--y", "metric", "--to-csv"),
        "--to-csv names the file to write, not {!r} (give its path, e.g. --to-csv FILE)",
    ),
    (
        ("predict", "smallcnn", "--device", "K80", "--plot"),
        "--plot names the figure to write, not {!r} (give its path, e.g. --plot fig.png)",
    ),
    (
        ("runs", "plot", "1", "--out"),
        "--out names the figure to write, not {!r} (give its path, e.g. --out runs.png)",
    ),
]


@pytest.mark.parametrize("text", ["", "  "])
@pytest.mark.parametrize(("args", "said"), EMPTY, ids=[" ".join(a[:2]) for a, _ in EMPTY])
def test_an_empty_output_path_is_refused_as_parsed(
    cli: Cli, tmp_path: Path, args: tuple[str, ...], said: str, text: str
) -> None:
    """The path last: make-shapes' ROOT is its argument, the others' an option's value.
    Refused in report's one line, exit 2, and nothing written where the command ran."""
    before = set(os.listdir(tmp_path))
    r = cli(*args, text)
    one_line(r, 2, "error: " + said.format(text))
    assert set(os.listdir(tmp_path)) == before


def test_a_path_of_its_own_still_writes(cli: Cli, tmp_path: Path) -> None:
    """The check takes nothing else: a path of characters and blanks is a path."""
    r = cli("data", "samples", "digits", "--per-class", "1", "--classes", "0,", "--out", " a")
    assert r.code == 0, r.err
    assert [p.name for p in (tmp_path / " a").iterdir()] == ["test-00011-0.png"]


# --- C3: detect export's parity ---------------------------------------------------------------

BOXES = np.array(
    [[0, 0, 10, 10], [20, 20, 40, 40], [50, 5, 90, 30], [1, 60, 30, 90]], dtype=np.float32
)
SCORES = np.array([0.9, 0.397, 0.39699, 0.2], dtype=np.float32)
LABELS = np.array([1, 2, 1, 2], dtype=np.int64)


def _compared(order: list[int], boxes: np.ndarray = BOXES, labels: np.ndarray = LABELS) -> dict:
    """PyTorch's detections against ONNX Runtime's `order` of them (its `boxes` and `labels`)."""
    got = {"boxes": boxes[order], "scores": SCORES[order], "labels": labels[order]}
    return ssd.compare_detections((BOXES, SCORES, LABELS), got, atol=1e-3)


def test_tied_scores_ordered_otherwise_still_match() -> None:
    """Detections 1 and 2 score within 1e-5 of each other: ONNX Runtime may order them the
    other way, labels and all; each is matched to its own, not to its neighbour."""
    same = _compared([0, 1, 2, 3])
    assert same["parity"] and same["reordered_ties"] == 0
    swapped = _compared([0, 2, 1, 3])
    assert swapped["parity"] and swapped["labels_equal"]
    assert swapped["max_abs_diff_boxes"] == 0.0 and swapped["reordered_ties"] == 2
    assert swapped["max_abs_diff_scores"] == pytest.approx(1e-5, abs=1e-6)


def test_a_real_mismatch_still_fails() -> None:
    """A box moved, a label changed, or an order that differs where scores do not tie."""
    moved = BOXES.copy()
    moved[2, 0] += 5  # one of the tied pair: its partner's box is no closer
    shifted = _compared([0, 2, 1, 3], boxes=moved)
    assert not shifted["parity"] and shifted["max_abs_diff_boxes"] == 5.0
    relabelled = LABELS.copy()
    relabelled[3] = 1
    other = _compared([0, 1, 2, 3], labels=relabelled)
    assert not other["parity"] and not other["labels_equal"]
    misordered = _compared([3, 1, 2, 0])  # 0.9 and 0.2 swapped: no tie
    assert not misordered["parity"] and misordered["max_abs_diff_scores"] == pytest.approx(0.7)
    fewer = ssd.compare_detections(
        (BOXES, SCORES, LABELS), {"boxes": BOXES[:3], "scores": SCORES[:3], "labels": LABELS[:3]}
    )
    assert not fewer["parity"] and fewer["max_abs_diff_boxes"] is None


def test_random_weights_are_seeded() -> None:
    """The same detector whatever torch's global generator holds, and that generator left as
    it was (a caller's own seeding is not disturbed)."""
    torch.manual_seed(1)
    first = ssd.build("ssdlite320_mobilenet_v3_large", 3, size=96).model.state_dict()
    torch.manual_seed(2)
    state = torch.get_rng_state()
    second = ssd.build("ssdlite320_mobilenet_v3_large", 3, size=96).model.state_dict()
    assert torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_export_of_near_tied_detections_passes(tmp_path: Path) -> None:
    """The detector T3's case drew: with torch 2.14 on x86 CPUs, global seed 2 (as finetune
    seeds it, seed=None) at 96 px gave two detections 1e-6 apart that ONNX Runtime ordered
    the other way, a 34.7-px positional box diff and parity false; elsewhere it may tie
    nowhere, and parity holds either way."""
    torch.manual_seed(2)
    det = ssd.build("ssdlite320_mobilenet_v3_large", 3, size=96, seed=None)
    result = ssd.export(det, tmp_path / "det.onnx")
    assert result["detections_torch"] == result["detections_onnx"] > 0
    assert result["parity"] and result["labels_equal"], result
    assert result["max_abs_diff_boxes"] <= 1e-3 and result["max_abs_diff_scores"] <= 1e-3


def test_boxes_are_held_to_a_tolerance_that_grows_with_the_image() -> None:
    """Found fixing C3: a random SSD300-MobileNet-V1's correct export failed parity, its boxes
    2.1e-3 px apart at 300 px (float32's rounding of a corner grows with the coordinate) past
    the scores' absolute 1e-3. Boxes are held to `BOX_RTOL` of the image side (3e-3 px at
    300), never less than the scores' atol; a box moved by more still fails, in one line."""
    nudged = BOXES + np.float32(2e-3)
    got = {"boxes": nudged, "scores": SCORES, "labels": LABELS}
    box_atol = max(1e-3, ssd.BOX_RTOL * 300)
    assert box_atol == pytest.approx(3e-3)
    held = ssd.compare_detections((BOXES, SCORES, LABELS), got, 1e-3, box_atol)
    assert held["parity"] and held["atol_boxes"] == box_atol and held["atol"] == 1e-3
    assert not ssd.compare_detections((BOXES, SCORES, LABELS), got, 1e-3)["parity"]
    moved = {"boxes": BOXES + np.float32(5e-3), "scores": SCORES, "labels": LABELS}
    failed = ssd.compare_detections((BOXES, SCORES, LABELS), moved, 1e-3, box_atol)
    assert not failed["parity"]
    line = ssd.parity_failure({**failed, "detections_onnx": 4, "detections_torch": 4})
    assert "\n" not in line and "box diff 0.005" in line and "boxes' 0.003 px" in line
