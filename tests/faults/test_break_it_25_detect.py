"""Break-it round 25, P2 causes C3 and C12: what `detect finetune` scores, and how a VOC
annotation is read.

C3: a class with objects in the val split but none to train on in the train split (none
there, or difficult ones only, which training leaves out) was trained with no examples, and
its "after" AP (0) averaged into the mAP, exit 0, not a word. It is refused before anything
is trained or stored, naming the classes and the fix.
C12: an annotation whose root declares a default XML namespace (xmlns="...") was told
"missing <size/width>" though the element was there, in that namespace. Elements are read by
their local names, so the file reads as it would without the namespace.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dlperf.detect import voc
from dlperf.errors import UserError
from tests.faults.test_break_it_21_detect import shapes, sub
from tests.faults.test_break_it_24_detect import Cli, finetune, refused_before_training, xml
from tests.faults.test_store_faults import one_line

# --- C3: a class the val split has that the train split does not train ---------------------


def test_a_class_with_no_objects_to_train_on_is_refused_before_training(
    cli: Cli, tmp_path: Path
) -> None:
    """Before: exit 0, `triangle  before 0.009  after 0` in the table and in the mAP, never
    trained. make-shapes' 4 images: train has squares (some difficult) and discs, val 2 discs."""
    root = shapes(tmp_path)
    train, val = (voc.load_split(root, s) for s in ("train", "val"))
    voc.check_classes_trained(root, "train", train, "val", val)  # a train-only square is fine
    # val's first disc a class no train image has; train's discs (all in 000001) difficult
    sub(xml(root, "000003"), "<name>disc</name>", "<name>triangle</name>")
    text = xml(root, "000001").read_text().replace("<difficult>0<", "<difficult>1<")
    xml(root, "000001").write_text(text)
    out = tmp_path / "w.pt"
    one_line(
        finetune(cli, root, out),
        2,
        f"error: {root}: 2 classes of the val split have no objects to train on in the train "
        "split (difficult ones are left out): disc, triangle; their AP after fine-tuning would "
        "be of classes never trained",
        "(annotate them in images of the train split, name a training split that has them "
        "with --train-split, or remove them from the val split's annotations)",
    )
    refused_before_training(cli, out)
    # one class, named on one line as a table shows it (its tab escaped)
    sub(xml(root, "000003"), "<name>triangle</name>", "<name>tri\tangle</name>")
    text = xml(root, "000001").read_text().replace("<difficult>1<", "<difficult>0<")
    xml(root, "000001").write_text(text)
    train, val = (voc.load_split(root, s) for s in ("train", "val"))
    expected = (
        "1 class of the val split has no objects to train on in the train split (difficult "
        "ones are left out): tri\\tangle"
    )
    with pytest.raises(UserError, match=re.escape(expected + "; its AP after fine-tuning")):
        voc.check_classes_trained(root, "train", train, "val", val)


# --- C12: an annotation in an XML namespace --------------------------------------------------


def test_an_annotation_in_a_namespace_reads_as_one_without(tmp_path: Path) -> None:
    """Before: "missing <size/width>", the element there in the namespace."""
    root = shapes(tmp_path)
    path, images = xml(root, "000003"), root / "JPEGImages"
    plain = voc.parse_annotation(path, images)
    sub(path, "<annotation>", '<annotation xmlns="http://example.com/voc">')
    assert voc.parse_annotation(path, images) == plain
    assert [a.objects for a in voc.load_split(root, "val")] == [plain.objects]
    # an element written with a prefix is read by its local name too
    sub(path, '">', '" xmlns:v="urn:v">')
    sub(path, "<name>disc</name>", "<v:name>disc</v:name>")
    assert voc.parse_annotation(path, images) == plain
