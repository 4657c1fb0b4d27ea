"""Break-it round 34, the user's data (docs/faults.md, the thirty-fourth round).

C1: VOC boxes written as fractions of the image (0..1, as YOLO, COCO-relative and
Albumentations tools write them) were read as pixels: every corner under 1 became VOC's first
pixel, so each box collapsed to the image's top-left pixel and `detect finetune` trained and
evaluated on that without a word. A box ending before the first pixel (xmax or ymax between 0
and 1) is refused now, naming the fractions and how to turn them into pixels; a 0-based
tool's one-pixel box at the edge (0, 0, 0, 0) is still read as before. Review: a box touching
the far edges (xmin 0.6 to xmax 1) still collapsed; a side within the first pixel with a
fraction for a corner is refused.

C2: an idx file written by hand with NumPy's native int32 dimensions (little-endian on x86)
was called cut short, "holds 31,360 bytes of data for 671088640 x 469762048 x 469762048
(replace it with a whole copy of the file)": no copy mends a file the user wrote. When the
dimensions read little-endian fit the data, the line says so and how to write them big-endian.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from dlperf.config import DataConfig
from dlperf.data import load_data
from dlperf.detect import voc
from dlperf.errors import UserError
from tests.faults.test_break_it_21_data import write_mnist


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
        (("0.0625", "0.1", "0.3281", "0.5"), "<xmin> 0.0625 to <xmax> 0.3281"),
        (("10", "0.1", "30", "0.5"), "<ymin> 0.1 to <ymax> 0.5"),
        # review: a box touching the image's right and bottom edges ends at 1, 1, read as the
        # first pixel's far corner, and collapsed as silently as before
        (("0.6", "0.5", "1", "1.0"), "<xmin> 0.6 to <xmax> 1"),
    ],
)
def test_c1_corners_in_fractions_of_the_image_are_refused(
    tmp_path: Path, corners: tuple[str, str, str, str], said: str
) -> None:
    xml = annotation(tmp_path, *corners)
    with pytest.raises(UserError) as caught:
        voc.parse_annotation(xml)
    assert caught.value.message == (
        f"{xml}: object 1 (square): {said} lies within the image's first pixel: "
        "corners from 0 to 1 are fractions of the image, not pixels"
    )
    assert caught.value.hint == (
        "VOC corners are pixels 1 to <width> and <height>: multiply x by 64 and y by 48"
    )


@pytest.mark.parametrize("corners", [("0", "0", "0", "0"), ("0", "1", "1", "1")])
def test_c1_a_zero_based_one_pixel_box_at_the_edge_is_still_read(
    tmp_path: Path, corners: tuple[str, str, str, str]
) -> None:
    xml = annotation(tmp_path, *corners)
    (box,) = [o.box for o in voc.parse_annotation(xml).objects]
    assert box == (0.0, 0.0, 1.0, 1.0)


def little_endian(name: str, magic: str) -> bytes:
    """The idx file `name` of 40 images or labels, its dimensions little-endian (NumPy's native
    int32 on x86), its magic number in byte order `magic`."""
    array = np.zeros((40, 28, 28), np.uint8) if "images" in name else np.arange(40) % 10
    dims = np.array(array.shape, "<i4").tobytes()
    return struct.pack(f"{magic}I", 0x0800 | array.ndim) + dims + array.astype(np.uint8).tobytes()


@pytest.mark.parametrize(
    ("name", "said", "array"),
    [
        ("train-images-idx3-ubyte", "(40 x 28 x 28)", "images"),
        ("train-labels-idx1-ubyte", "(40)", "labels"),
    ],
)
def test_c2_idx_dimensions_written_little_endian_are_said_so(
    tmp_path: Path, name: str, said: str, array: str
) -> None:
    raw = write_mnist(tmp_path, **{name: little_endian(name, ">")})
    with pytest.raises(UserError) as caught:
        load_data(DataConfig(name="mnist", root=str(tmp_path)))
    assert caught.value.message == (
        f"data.root '{tmp_path}' has no readable MNIST idx files: {raw / name} holds its "
        f"dimensions little-endian {said}: idx files hold them big-endian"
    )
    assert caught.value.hint == (
        f"write them big-endian, e.g. numpy.array({array}.shape, '>i4').tobytes()"
    )


@pytest.mark.parametrize(
    ("name", "magic", "header"),
    [
        ("train-images-idx3-ubyte", "0x03080000 (0x00000803", "[0x0803, *images.shape]"),
        ("t10k-labels-idx1-ubyte", "0x01080000 (0x00000801", "[0x0801, *labels.shape]"),
    ],
)
def test_c2_review_an_idx_header_written_little_endian_whole_is_said_so(
    tmp_path: Path, name: str, magic: str, header: str
) -> None:
    """The whole header in NumPy's native int32 (np.array([2051, n, 28, 28], np.int32)), the
    likelier slip by hand: its magic number was "not an idx file", and the fix a whole copy."""
    raw = write_mnist(tmp_path, **{name: little_endian(name, "<")})
    with pytest.raises(UserError) as caught:
        load_data(DataConfig(name="mnist", root=str(tmp_path)))
    assert caught.value.message == (
        f"data.root '{tmp_path}' has no readable MNIST idx files: {raw / name} holds its magic "
        f"number {magic} read little-endian): idx files hold their header big-endian"
    )
    assert caught.value.hint == (
        f"write magic number and dimensions big-endian, e.g. numpy.array({header}, '>i4').tobytes()"
    )
