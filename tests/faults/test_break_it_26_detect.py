"""Break-it round 26, P2 causes 2 (VOC), 10, 11 and 14: how a VOC set is read.

2: object names equal but for their Unicode normalisation (café as NFC in one annotation and
as NFD, a copy from macOS, in another) were two classes printed alike, each with its own head
output and AP row. They are refused in one line naming both spellings and their files.
10: a corner at 0 (accepted for tools writing 0-based corners) was read as -1, a box partly or
wholly outside the image. A 0 is read as the image's first pixel, 1.
11: a JPEG stored 96 x 64 with EXIF orientation 6, whose <size> is its displayed 64 x 96, was
told to "write the image's own size" (relabel every box). The line names the orientation and
the fix that keeps the boxes: rotate the pixels with ImageOps.exif_transpose.
14: a split file's id holding a space ("img 0000") was cut at the space and blamed on a
missing img.xml. A line is one id, unless it is VOC's per-class "id flag".
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest
from PIL import Image

from dlperf.detect import voc
from dlperf.errors import UserError
from tests.faults.test_break_it_21_detect import SIZE_XML, first, shapes, sub
from tests.faults.test_break_it_24_detect import Cli, finetune, refused_before_training, xml
from tests.faults.test_store_faults import one_line

NFC = unicodedata.normalize("NFC", "café")
NFD = unicodedata.normalize("NFD", "café")

# --- 2: object names that differ only in Unicode normalisation -----------------------------


def test_object_names_differing_only_in_normalisation_are_refused(cli: Cli, tmp_path: Path) -> None:
    """Before: exit 0 and two "café" rows in the AP table. make-shapes' 4 images: train
    000000-000002, val 000003; two discs in 000001 and two in 000003, each split's renamed
    one in each spelling (so that each is trained and measured)."""
    root = shapes(tmp_path)
    for image_id, names in (("000001", (NFD, NFC)), ("000003", (NFC, NFD))):
        for name in names:
            sub(xml(root, image_id), "<name>disc</name>", f"<name>{name}</name>")
    out = tmp_path / "w.pt"
    one_line(
        finetune(cli, root, out),
        2,
        "error: object names differ only in Unicode normalisation, café as NFD 'cafe\\u0301' "
        "(Annotations/000001.xml) and NFC 'caf\\xe9' (Annotations/000001.xml): they would "
        "be two classes that show as one name",
        "(write each class's name in one spelling: unicodedata.normalize('NFC', name) of each "
        "<name> gives one)",
    )
    refused_before_training(cli, out)


# --- 10: a corner at 0 ---------------------------------------------------------------------


def test_a_corner_at_0_is_read_as_the_first_pixel(tmp_path: Path) -> None:
    """Before: <xmin>0 gave x1 = -1, and 0,0,0,0 the box (-1, -1, 0, 0), outside the image."""
    root = shapes(tmp_path)
    path, _ = first(root)
    text = path.read_text()
    box = "<bndbox><xmin>{}</xmin><ymin>{}</ymin><xmax>{}</xmax><ymax>{}</ymax></bndbox>"
    one = re.search(r"<bndbox>.*?</bndbox>", text)
    assert one is not None
    for corners, read in [
        ((0, 0, 0, 0), (0.0, 0.0, 1.0, 1.0)),  # one pixel, the first, as 1,1,1,1 is
        ((0, 5, 10, 20), (0.0, 4.0, 10.0, 20.0)),
        ((1, 1, 1, 1), (0.0, 0.0, 1.0, 1.0)),  # VOC's own first pixel, as before
    ]:
        path.write_text(text.replace(one.group(0), box.format(*corners), 1))
        annotation = voc.parse_annotation(path, root / "JPEGImages")
        assert annotation.objects[0].box == read, corners
        assert all(0 <= v <= 64 for o in annotation.objects for v in o.box)


# --- 11: an EXIF-rotated JPEG whose <size> is its displayed size ---------------------------


def test_a_size_that_is_the_exif_rotated_view_names_the_orientation(tmp_path: Path) -> None:
    """Before: "write the image's own size in <size>, and its boxes in that image's pixels",
    a fix that means redrawing every box drawn on the rotated view."""
    root = shapes(tmp_path)
    path, jpeg = first(root)
    exif = Image.Exif()
    exif[0x0112] = 6  # stored 96 x 64, shown turned a quarter, 64 x 96
    Image.new("RGB", (96, 64), (90, 90, 90)).save(jpeg, exif=exif.tobytes())
    sub(path, SIZE_XML, "<width>64</width><height>96</height>")
    with pytest.raises(UserError) as caught:
        voc.load_split(root, "train")
    assert caught.value.message == (
        f"{path}: <size> says 64 x 96, the size {jpeg} shows at (its EXIF orientation 6 "
        "turns it), but its pixels are stored 96 x 64, which is how they are read"
    )
    assert caught.value.hint == (
        "turn the pixels themselves, keeping the boxes: "
        "PIL.ImageOps.exif_transpose(Image.open(f)).save(f); or write the stored size, "
        "96 x 64, in <size> and the boxes in the stored pixels"
    )
    # the fix it names reads
    from PIL import ImageOps

    with Image.open(jpeg) as im:
        ImageOps.exif_transpose(im).save(jpeg)
    assert voc.load_split(root, "train")[0].width == 64


def test_a_square_image_turned_by_exif_with_its_own_size_is_read(tmp_path: Path) -> None:
    """Review: the quarter-turn line came before the size was compared, so a square JPEG with
    EXIF orientation 6 and its own <size> was refused as the split loaded (the dataset's own
    check passed it); and the orientation is read only where the sizes differ, as reading a
    PNG's EXIF decodes the whole image."""
    root = shapes(tmp_path)
    path, jpeg = first(root)
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.new("RGB", (96, 96), (90, 90, 90)).save(jpeg, exif=exif.tobytes())
    sub(path, SIZE_XML, "<width>96</width><height>96</height>")
    assert voc.load_split(root, "train")[0].width == 96


# --- 14: an image id holding a space -------------------------------------------------------


def _rename(root: Path, old: str, new: str) -> None:
    """Image `old` as `new`: its files, its <filename> and its line in every split."""
    (root / "Annotations" / f"{old}.xml").rename(root / "Annotations" / f"{new}.xml")
    (root / "JPEGImages" / f"{old}.jpg").rename(root / "JPEGImages" / f"{new}.jpg")
    sub(xml(root, new), f"<filename>{old}.jpg", f"<filename>{new}.jpg")
    for split in (root / "ImageSets" / "Main").iterdir():
        split.write_text(split.read_text().replace(old, new))


def test_an_image_id_holding_a_space_is_read_whole(tmp_path: Path) -> None:
    """Before: "split train lists img but .../img.xml is missing"."""
    root = shapes(tmp_path)
    _rename(root, "000000", "img 0000")
    _rename(root, "000001", "img 0001")  # before: "image id img is listed on lines 1 and 2"
    assert voc.read_split(root, "train") == ["img 0000", "img 0001", "000002"]
    assert [a.image_id for a in voc.load_split(root, "train")] == ["img 0000", "img 0001", "000002"]
    # VOC's per-class files ("id flag", 1, 0 or -1) still read their ids
    split = root / "ImageSets" / "Main" / "train.txt"
    split.write_text("img 0000  1\n000002 -1\n")
    assert voc.read_split(root, "train") == ["img 0000", "000002"]
    # an id with a space whose annotation is missing is named whole, with how lines are read
    split.write_text("img 0002\n")
    with pytest.raises(UserError) as caught:
        voc.load_split(root, "train")
    assert caught.value.message == (
        f"{root}: split train lists 'img 0002' but {xml(root, 'img 0002')} is missing"
    )
    assert caught.value.hint is not None and "the whole line" in caught.value.hint
