"""VOC layout parsing, the synthetic shapes set, and AP@0.5 against hand-worked cases."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dlperf.detect import voc
from dlperf.detect.evaluate import match_classes
from dlperf.errors import UserError
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

XML = """<annotation>
  <folder>VOC2007</folder>
  <filename>000005.jpg</filename>
  <size><width>500</width><height>375</height><depth>3</depth></size>
  <object>
    <name>chair</name><pose>Rear</pose><truncated>0</truncated><difficult>0</difficult>
    <bndbox><xmin>263</xmin><ymin>211</ymin><xmax>324</xmax><ymax>339</ymax></bndbox>
  </object>
  <object>
    <name>chair</name><pose>Unspecified</pose><truncated>1</truncated><difficult>1</difficult>
    <bndbox><xmin>5</xmin><ymin>244</ymin><xmax>67</xmax><ymax>374</ymax></bndbox>
  </object>
  <object>
    <name>person</name>
    <bndbox><xmin>1</xmin><ymin>1</ymin><xmax>10</xmax><ymax>20</ymax></bndbox>
  </object>
</annotation>
"""


def test_parse_real_voc_xml(tmp_path: Path) -> None:
    path = tmp_path / "000005.xml"
    path.write_text(XML)
    a = voc.parse_annotation(path)
    assert (a.image_id, a.filename, a.width, a.height) == ("000005", "000005.jpg", 500, 375)
    assert [(o.name, o.box, o.difficult) for o in a.objects] == [
        ("chair", (262.0, 210.0, 324.0, 339.0), False),  # 1-based inclusive -> 0-based corners
        ("chair", (4.0, 243.0, 67.0, 374.0), True),
        ("person", (0.0, 0.0, 10.0, 20.0), False),  # no <difficult>: not difficult
    ]


def test_bad_annotation_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "x.xml"
    path.write_text(XML.replace("<ymax>339</ymax>", "<ymax>abc</ymax>"))
    with pytest.raises(UserError, match=r"object 1 \(chair\): <ymax> is 'abc', not a number"):
        voc.parse_annotation(path)
    path.write_text("<annotation><filename>a.jpg</filename>")
    with pytest.raises(UserError, match="not a readable VOC annotation"):
        voc.parse_annotation(path)


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("shapes")
    return root, voc.make_shapes(root, images=30, size=96, seed=3)


def test_shapes_set_parses_back(shapes: tuple[Path, dict]) -> None:
    root, summary = shapes
    assert voc.find_root(root) == root
    train, val = voc.load_split(root, "train"), voc.load_split(root, "val")
    assert (len(train), len(val)) == (summary["train"], summary["val"]) == (22, 8)
    assert not {a.image_id for a in train} & {a.image_id for a in val}
    assert voc.read_split(root, "trainval") == [a.image_id for a in train + val]
    objects = [o for a in train + val for o in a.objects]
    counted = {name: sum(o.name == name for o in objects) for name in voc.SHAPES}
    assert counted == summary["objects"]
    xml_text = "".join(p.read_text() for p in (root / "Annotations").glob("*.xml"))
    hard = sum(o.difficult for o in objects)
    assert hard == xml_text.count("<difficult>1</difficult>") > 0
    for a in train + val:
        with Image.open(root / "JPEGImages" / a.filename) as im:
            assert im.size == (a.width, a.height) == (96, 96)
        for o in a.objects:
            x1, y1, x2, y2 = o.box
            assert 0 <= x1 < x2 <= 96 and 0 <= y1 < y2 <= 96
            assert x2 - x1 == y2 - y1  # squares and discs have square boxes
    assert voc.class_names(train, val) == ["__background__", "disc", "square"]


def test_shapes_pixels_sit_inside_their_boxes(shapes: tuple[Path, dict]) -> None:
    root, _ = shapes
    a = next(a for a in voc.load_split(root, "train") if any(not o.difficult for o in a.objects))
    pixels = np.asarray(Image.open(root / "JPEGImages" / a.filename), dtype=np.float64)
    o = next(o for o in a.objects if not o.difficult)
    x1, y1, x2, y2 = (int(v) for v in o.box)
    centre = pixels[
        (y1 + y2) // 2 - 2 : (y1 + y2) // 2 + 2, (x1 + x2) // 2 - 2 : (x1 + x2) // 2 + 2
    ]
    # A filled shape is one flat colour (bar JPEG ringing); the noisy background is not.
    assert centre.std(axis=(0, 1)).max() < 8
    outside = np.ones(pixels.shape[:2], dtype=bool)
    for other in a.objects:
        x1, y1, x2, y2 = (int(v) for v in other.box)
        outside[y1:y2, x1:x2] = False
    assert pixels[outside].std(axis=0).min() > 8


def test_dataset_leaves_difficult_objects_out_of_training(shapes: tuple[Path, dict]) -> None:
    root, _ = shapes
    annotations = voc.load_split(root, "trainval")
    labels = voc.class_names(annotations)
    data = voc.VocDataset(root, annotations, labels)
    i = next(i for i, a in enumerate(annotations) if any(o.difficult for o in a.objects))
    image, target = data[i]
    assert tuple(image.shape) == (3, 96, 96) and 0 <= float(image.min()) <= float(image.max()) <= 1
    kept = [o for o in annotations[i].objects if not o.difficult]
    assert target["boxes"].tolist() == [list(o.box) for o in kept]
    assert target["labels"].tolist() == [labels.index(o.name) for o in kept]


def test_find_root_accepts_a_vocdevkit(tmp_path: Path) -> None:
    voc.make_shapes(tmp_path / "VOCdevkit" / "VOC2007", images=2, size=64)
    assert voc.find_root(tmp_path / "VOCdevkit") == tmp_path / "VOCdevkit" / "VOC2007"
    with pytest.raises(UserError, match="is not a VOC data set"):
        voc.find_root(tmp_path)


# --- AP, worked by hand ------------------------------------------------------------------

BOX_A = (0.0, 0.0, 10.0, 10.0)
BOX_B = (20.0, 20.0, 30.0, 30.0)


def truths(*boxes: tuple[float, ...], difficult: tuple[bool, ...] = ()) -> dict:
    flags = difficult or (False,) * len(boxes)
    return {"img": (np.asarray(boxes, dtype=np.float64).reshape(-1, 4), np.asarray(flags))}


def test_perfect_detections_score_one() -> None:
    dets = [("img", 0.9, BOX_A), ("img", 0.8, BOX_B)]
    assert voc.class_ap(dets, truths(BOX_A, BOX_B)) == 1.0
    assert voc.class_ap(dets, truths(BOX_A, BOX_B), method="11point") == 1.0


def test_false_positive_ranked_first_halves_ap() -> None:
    # Ranks: FP (p=0, r=0), TP (p=1/2, r=1): envelope 0.5 over recall 0..1.
    dets = [("img", 0.9, BOX_B), ("img", 0.5, BOX_A)]
    assert voc.class_ap(dets, truths(BOX_A)) == pytest.approx(0.5)
    assert voc.class_ap(dets, truths(BOX_A), method="11point") == pytest.approx(0.5)


def test_missed_object_caps_recall() -> None:
    # One of two objects found at precision 1: area 0.5; 11 points: r = 0, .1 .. .5 -> 6/11.
    dets = [("img", 0.9, BOX_A)]
    assert voc.class_ap(dets, truths(BOX_A, BOX_B)) == pytest.approx(0.5)
    assert voc.class_ap(dets, truths(BOX_A, BOX_B), method="11point") == pytest.approx(6 / 11)


def test_duplicate_is_a_false_positive_and_iou_threshold_applies() -> None:
    # TP, duplicate FP, then a box with IoU 50/150 = 1/3 < 0.5 (FP): p = 1, 1/2, 1/3 at r = 1.
    shifted = (5.0, 0.0, 15.0, 10.0)
    dets = [("img", 0.9, BOX_A), ("img", 0.8, BOX_A), ("img", 0.7, shifted)]
    assert voc.class_ap(dets, truths(BOX_A)) == 1.0
    assert voc.class_ap([("img", 0.9, shifted)], truths(BOX_A)) == 0.0


def test_difficult_objects_are_ignored() -> None:
    # A hit on the difficult B counts neither way; B is not a positive either.
    dets = [("img", 0.9, BOX_B), ("img", 0.8, BOX_A)]
    assert voc.class_ap(dets, truths(BOX_A, BOX_B, difficult=(False, True))) == 1.0
    # Only difficult objects: the class has no positives, so no AP.
    assert math.isnan(voc.class_ap(dets, truths(BOX_B, difficult=(True,))))


def test_evaluate_averages_classes_with_objects(tmp_path: Path) -> None:
    a = voc.VocAnnotation(
        "img",
        "img.jpg",
        50,
        50,
        [voc.VocObject("cat", BOX_A, False), voc.VocObject("dog", BOX_B, False)],
    )
    labels = ["__background__", "cat", "dog", "emu"]
    prediction = {
        "boxes": np.asarray([BOX_A, BOX_B, BOX_B]),
        "scores": np.asarray([0.9, 0.4, 0.8]),
        "labels": np.asarray([1, 2, 1]),  # the 0.8 "cat" on B is a false positive ranked first
    }
    result = voc.evaluate([a], [prediction], labels)
    assert result["ap"]["cat"] == pytest.approx(1.0)  # TP ranked above the FP
    assert result["ap"]["dog"] == pytest.approx(1.0)
    assert math.isnan(result["ap"]["emu"])
    assert result["map"] == pytest.approx(1.0)
    prediction["scores"] = np.asarray([0.7, 0.4, 0.8])
    result = voc.evaluate([a], [prediction], labels)
    assert result["ap"]["cat"] == pytest.approx(0.5)
    assert result["map"] == pytest.approx(0.75)


def test_coco_names_score_as_voc_classes() -> None:
    a = voc.VocAnnotation(
        "img",
        "img.jpg",
        50,
        50,
        [voc.VocObject("aeroplane", BOX_A, False), voc.VocObject("sofa", BOX_B, False)],
    )
    coco = ["__background__", "person", "airplane", "couch", "truck"]
    names, renamed = match_classes(coco, ["__background__", "aeroplane", "sofa", "cow"])
    assert names == ["__background__", "person", "aeroplane", "sofa", "truck"]
    assert renamed == {"aeroplane": "airplane", "sofa": "couch"}
    prediction = {
        "boxes": np.asarray([BOX_A, BOX_B, BOX_A]),
        "scores": np.asarray([0.9, 0.8, 0.95]),
        "labels": np.asarray([2, 3, 4]),  # a "truck" on A ranked first: not an aeroplane FP
    }
    result = voc.evaluate([a], [prediction], names, classes=["aeroplane", "sofa", "cow"])
    assert list(result["ap"]) == ["aeroplane", "sofa", "cow"]  # the data set's, not COCO's 4
    assert result["ap"]["aeroplane"] == result["ap"]["sofa"] == 1.0
    assert math.isnan(result["ap"]["cow"]) and result["map"] == 1.0  # no cow in the split
    # A detector that has the VOC name keeps its own labels as they are.
    both = ["__background__", "aeroplane", "airplane"]
    assert match_classes(both, ["__background__", "aeroplane"]) == (both, {})


# --- CLI -----------------------------------------------------------------------------------


def test_make_shapes_cli(cli: Cli, tmp_path: Path) -> None:
    r = cli("detect", "make-shapes", str(tmp_path / "s"), "--images", "4", "--size", "64")
    assert r.code == 0, r.err
    assert r.out.startswith("wrote 4 images (") and r.out.rstrip().endswith("3 train, 1 val")
    assert len(list((tmp_path / "s" / "JPEGImages").glob("*.jpg"))) == 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["finetune", "missing"], "error: missing is not a VOC data set"),
        (["finetune", ".", "--model", "yolo"], "error: unknown detector 'yolo'"),
        (["finetune", ".", "--ap", "101point"], "error: --ap: detect.ap_method"),
        (["make-shapes", "x", "--images", "1"], "error: make-shapes needs at least 2 images"),
    ],
)
def test_finetune_bad_input_is_one_line(cli: Cli, args: list[str], message: str) -> None:
    r = cli("detect", *args)
    assert r.code == 2
    assert r.err.startswith(message) and r.err.count("\n") == 1
