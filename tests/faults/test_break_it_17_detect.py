"""Break-it round 17, part E, cause C: `detect eval` on a split whose only object of a class
the detector does not know is difficult warned "its AP is 0", while the table showed nan, the
JSON null, and mAP left the class out (VOC's rule: no object that is not difficult, no AP).
The warning now says what the output shows."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import torch

from dlperf.detect import ssd, voc
from tests.conftest import CliResult
from tests.detect.test_ssd import LABELS


def test_an_unknown_class_whose_objects_are_all_difficult_is_said_to_have_no_ap(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    root = tmp_path / "shapes"
    voc.make_shapes(root, images=6, size=96)
    # One val object renamed to a class the detector lacks, and marked difficult.
    first = (root / "ImageSets" / "Main" / "val.txt").read_text().split()[0]
    xml = root / "Annotations" / f"{first}.xml"
    tree = ET.parse(xml)
    obj = tree.getroot().findall("object")[0]
    obj.find("name").text, obj.find("difficult").text = "triangle", "1"  # type: ignore[union-attr]
    tree.write(xml)
    objects = voc.load_split(root, "val")[0].objects
    assert (objects[0].name, objects[0].difficult) == ("triangle", True)
    torch.manual_seed(0)
    weights = tmp_path / "shapes.pt"
    ssd.save_checkpoint(ssd.build("ssdlite320_mobilenet_v3_large", labels=LABELS, size=96), weights)

    args = ("detect", "eval", str(root), "--weights", str(weights), "--threads", "1")
    doc = json.loads(cli(*args, "--json").out)
    assert doc["unknown"] == ["triangle"] and doc["ap"]["triangle"] is None
    r = cli(*args)
    assert r.code == 0, r.err
    assert r.err == (
        "warning: the detector has no class 'triangle': its objects here are all difficult, "
        "so it has no AP and is left out of mAP\n"
    )
