"""Break-it round 24, P2 causes C3-C5: what `detect finetune` trains on.

C3: train and val splits that share images (`--train-split trainval --val-split val`, both of
which make-shapes writes, or one split named twice) trained on the images AP was measured on,
exit 0, not a word: an inflated mAP. Splits sharing an image id, or an image file, are refused
before anything is trained or stored.
C4: two annotations of a split whose <filename> names one image (a copy-pasted XML) scored one
image's boxes on another's pixels, silently. They are refused as the split loads, naming both.
C5: a train split without an object that is not difficult (difficult ones are left out of the
targets) trained on background alone, exit 0. It is refused before training, as the val split
has been (`check_measurable`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.detect import voc
from dlperf.errors import UserError
from tests.conftest import CliResult
from tests.faults.test_break_it_21_detect import shapes, sub
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


def finetune(cli: Cli, root: Path, out: Path, *args: str) -> CliResult:
    return cli("detect", "finetune", str(root), "--size", "96", "--epochs", "1", "--batch", "2",
               "--threads", "1", "--out", str(out), *args)  # fmt: skip


def refused_before_training(cli: Cli, out: Path) -> None:
    """No weights written, no run stored."""
    assert not out.exists()
    r = cli("runs", "list", "--json")
    assert r.code == 0 and json.loads(r.out) == [], r.out


def xml(root: Path, image_id: str) -> Path:
    return root / "Annotations" / f"{image_id}.xml"


# --- C3: train and val splits that share images ----------------------------------------------


def _name_train_image(root: Path) -> None:
    """val's one annotation names train's first image (both are 64 x 64)."""
    sub(xml(root, "000003"), "<filename>000003.jpg", "<filename>000000.jpg")


@pytest.mark.parametrize(
    ("splits", "edit", "message", "hint"),
    [
        (
            ["--train-split", "trainval"],
            None,
            "the trainval and val splits share 1 image (000003): AP on val would be measured "
            "on images trained on",
            "(train on a split without them: --train-split train)",
        ),
        (
            ["--val-split", "train"],
            None,
            "train is both the training and the validation split: AP on train would be "
            "measured on images trained on",
            "(measure on a split without them: --val-split val)",
        ),
        (
            [],
            _name_train_image,
            "the train and val splits share 1 image (val's 000003 names the image of train's "
            "000000, {jpeg}): AP on val would be measured on images trained on",
            "(name a training split with none of the val images with --train-split, or another "
            "split to measure on with --val-split)",
        ),
    ],
    ids=["shared-ids", "one-split-twice", "shared-file"],
)
def test_finetuning_on_the_images_ap_is_measured_on_is_refused(
    cli: Cli,
    tmp_path: Path,
    splits: list[str],
    edit: Callable[[Path], None] | None,
    message: str,
    hint: str,
) -> None:
    """Before: exit 0, no word, the mAP measured on trained images."""
    root = shapes(tmp_path)
    if edit is not None:
        edit(root)
    out = tmp_path / "w.pt"
    message = message.format(jpeg=(root / "JPEGImages" / "000000.jpg").resolve())
    one_line(finetune(cli, root, out, *splits), 2, f"error: {root}: {message}", hint)
    refused_before_training(cli, out)


# --- C4: two annotations naming one image ------------------------------------------------------


def test_two_annotations_naming_one_image_are_refused_naming_both(cli: Cli, tmp_path: Path) -> None:
    """Before: 000001's boxes were trained on 000000's pixels; 000001.jpg was never read."""
    root = shapes(tmp_path)
    sub(xml(root, "000001"), "<filename>000001.jpg", "<filename>000000.jpg")
    out = tmp_path / "w.pt"
    one_line(
        finetune(cli, root, out),
        2,
        f"error: {root}: split train: {xml(root, '000000')} and {xml(root, '000001')} both "
        f"name the image {(root / 'JPEGImages' / '000000.jpg').resolve()}",
        "(give each annotation its own image in <filename> (VOC's is <id>.jpg))",
    )
    refused_before_training(cli, out)
    # a path that reaches the same file by another way is the same image
    sub(xml(root, "000001"), "<filename>000000.jpg", "<filename>../JPEGImages/000000.jpg")
    with pytest.raises(UserError, match=re.escape("both name the image")):
        voc.load_split(root, "train")
    # an image that is a link loop is still left to its read to name (no RuntimeError here)
    sub(xml(root, "000001"), "<filename>../JPEGImages/000000.jpg", "<filename>000001.jpg")
    loop = root / "JPEGImages" / "000002.jpg"
    loop.unlink()
    loop.symlink_to(loop.name)
    assert len(voc.load_split(root, "train")) == 3


# --- C5: a train split with nothing to train on -------------------------------------------------


def _all_difficult(root: Path) -> None:
    for image_id in voc.read_split(root, "train"):
        text = xml(root, image_id).read_text().replace("<difficult>0<", "<difficult>1<")
        xml(root, image_id).write_text(text)


def _no_objects(root: Path) -> None:
    for image_id in voc.read_split(root, "train"):
        text = xml(root, image_id).read_text()
        xml(root, image_id).write_text(text[: text.index("  <object>")] + "</annotation>\n")


@pytest.mark.parametrize(
    ("edit", "which"),
    [(_all_difficult, "only difficult ones, which training leaves out"), (_no_objects, "none")],
    ids=["all-difficult", "no-objects"],
)
def test_a_train_split_without_objects_to_learn_is_refused_before_training(
    cli: Cli, tmp_path: Path, edit: Callable[[Path], None], which: str
) -> None:
    """Before: exit 0, the detector trained on background only and an "after" mAP reported."""
    root = shapes(tmp_path)
    edit(root)
    out = tmp_path / "w.pt"
    one_line(
        finetune(cli, root, out),
        2,
        f"error: {root}: the train split has no objects to train on (its 3 images have {which})",
        "(annotate objects in its images, or name a split that has some with --train-split)",
    )
    refused_before_training(cli, out)
