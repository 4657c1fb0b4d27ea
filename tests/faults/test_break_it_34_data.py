"""Break-it round 34, the user's data (docs/faults.md, the thirty-fourth round).

C1: VOC boxes written as fractions of the image (0..1, as YOLO, COCO-relative and
Albumentations tools write them) were read as pixels: every corner under 1 became VOC's first
pixel, so each box collapsed to the image's top-left pixel and `detect finetune` trained and
evaluated on that without a word. A box ending before the first pixel (xmax or ymax between 0
and 1) is refused now, naming the fractions and how to turn them into pixels; a 0-based
tool's one-pixel box at the edge (0, 0, 0, 0) is still read as before.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.detect import voc
from dlperf.errors import UserError


def annotation(tmp_path: Path, xmin: str, ymin: str, xmax: str, ymax: str) -> Path:
    xml = tmp_path / "000000.xml"
    xml.write_text(
        "<annotation><filename>000000.png</filename>"
        "<size><width>64</width><height>48</height><depth>3</depth></size>"
        "<object><name>square</name><difficult>0</difficult><bndbox>"
        f"<xmin>{xmin}</xmin><ymin>{ymin}</ymin><xmax>{xmax}</xmax><ymax>{ymax}</ymax>"
        "</bndbox></object></annotation>"
    )
    return xml


@pytest.mark.parametrize(
    ("corners", "said"),
    [
        (("0.0625", "0.1", "0.3281", "0.5"), "<xmax> 0.3281"),
        (("10", "0.1", "30", "0.5"), "<ymax> 0.5"),
    ],
)
def test_c1_corners_in_fractions_of_the_image_are_refused(
    tmp_path: Path, corners: tuple[str, str, str, str], said: str
) -> None:
    xml = annotation(tmp_path, *corners)
    with pytest.raises(UserError) as caught:
        voc.parse_annotation(xml)
    assert caught.value.message == (
        f"{xml}: object 1 (square): {said} ends the box before the image's first pixel: "
        "corners from 0 to 1 are fractions of the image, not pixels"
    )
    assert caught.value.hint == (
        "VOC corners are pixels 1 to <width> and <height>: multiply x by 64 and y by 48"
    )


def test_c1_a_zero_based_one_pixel_box_at_the_edge_is_still_read(tmp_path: Path) -> None:
    xml = annotation(tmp_path, "0", "0", "0", "0")
    (box,) = [o.box for o in voc.parse_annotation(xml).objects]
    assert box == (0.0, 0.0, 1.0, 1.0)
