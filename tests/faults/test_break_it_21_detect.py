"""Break-it round 21, P2 causes 8-10: detection's VOC data.

8: detection decoded its images with Pillow's convert("RGB"), which clips a 16-bit grey image
(I;16) at 255, so a 16-bit PNG trained as pure white, while `detect run`, `serve` and the
classifiers' readers decode it through image_modes.rgb and see its greys; the annotated PNG of
`detect run` drew the image white too. Both now decode through image_modes.rgb.
9: the boxes were checked against the XML's <size> only: an XML saying 960 x 960 beside a
96 x 96 image trained a box 400 px outside the image, exit 0. The image's header size (read
without decoding) is now compared with <size> as the split loads, before anything is trained,
and again when the image is read (a file replaced since).
10: a split file starting with a UTF-8 byte order mark named its first id with the mark, and
blamed the annotation of that id (which exists) as missing. Split files are read as
"utf-8-sig"; a file that is not UTF-8 is one line.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dlperf.detect import ssd, voc
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]
SIZE_XML = "<width>64</width><height>64</height>"
SIZE_HINT = "write the image's own size in <size>, and its boxes in that image's pixels"


def shapes(tmp_path: Path) -> Path:
    """make-shapes' 4 images of 64 px (3 train, 1 val)."""
    root = tmp_path / "det"
    voc.make_shapes(root, images=4, size=64, seed=1)
    return root


def first(root: Path, split: str = "train") -> tuple[Path, Path]:
    """The XML and the image of the split's first id."""
    image_id = voc.read_split(root, split)[0]
    return root / "Annotations" / f"{image_id}.xml", root / "JPEGImages" / f"{image_id}.jpg"


def sub(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


# --- cause 8: wide grey modes ---------------------------------------------------------------


def wide(grey: np.ndarray, mode: str) -> Image.Image:
    """The 8-bit grey `grey` in `mode`, spanning that mode's own range (65535 or 1.0 white)."""
    if mode == "I;16":
        image = Image.fromarray(grey.astype(np.uint16) * 257)
    else:
        image = Image.fromarray(grey.astype(np.float32) / 255)
    assert image.mode == mode
    return image


@pytest.mark.parametrize(("mode", "suffix"), [("I;16", "png"), ("F", "tiff")])
def test_a_wide_grey_image_trains_as_its_greys(tmp_path: Path, mode: str, suffix: str) -> None:
    """Before: every pixel of the 16-bit PNG was 1.0 (white); the F TIFF was clipped too."""
    root = shapes(tmp_path)
    xml, jpeg = first(root)
    with Image.open(jpeg) as im:
        grey = np.asarray(im.convert("L"))
    name = f"{jpeg.stem}.{suffix}"
    wide(grey, mode).save(jpeg.with_name(name))
    sub(xml, f"<filename>{jpeg.name}", f"<filename>{name}")
    annotations = voc.load_split(root, "train")
    data = voc.VocDataset(root, annotations, voc.class_names(annotations))
    image, _ = data[0]
    assert tuple(image.shape) == (3, *grey.shape)
    expected = grey.astype(np.float32) / 255
    for channel in image.numpy():
        np.testing.assert_array_equal(channel, expected)


def test_detect_runs_annotated_image_draws_a_16_bit_grey_as_its_greys() -> None:
    """`detect run --out`'s picture. Before: the photo under the boxes was white."""
    grey = np.tile(np.arange(0, 256, 4, dtype=np.uint8), (64, 1))
    drawn = np.asarray(ssd.draw(wide(grey, "I;16"), [], "grey.png"))
    assert np.array_equal(drawn, np.asarray(ssd.draw(Image.fromarray(grey), [], "grey.png")))
    assert 0 < (drawn == 255).mean() < 1


# --- cause 9: <size> against the image ------------------------------------------------------


@pytest.mark.parametrize(("width", "height"), [(640, 640), (64, 200), (32, 64)])
def test_a_size_other_than_the_images_is_refused_as_the_split_loads(
    tmp_path: Path, width: int, height: int
) -> None:
    """Boxes are checked against <size>: a <size> that is not the image's checks nothing.
    (32 x 64: a box is outside <size>'s width too, but the size is the mistake to name.)"""
    root = shapes(tmp_path)
    xml, jpeg = first(root)
    sub(xml, SIZE_XML, f"<width>{width}</width><height>{height}</height>")
    with pytest.raises(UserError) as caught:
        voc.load_split(root, "train")
    assert caught.value.message == f"{xml}: <size> says {width} x {height}, but {jpeg} is 64 x 64"
    assert caught.value.hint == SIZE_HINT


def test_an_image_replaced_since_the_split_loaded_is_refused_when_read(tmp_path: Path) -> None:
    root = shapes(tmp_path)
    xml, jpeg = first(root)
    annotations = voc.load_split(root, "train")
    data = voc.VocDataset(root, annotations, voc.class_names(annotations))
    Image.new("RGB", (80, 48), (9, 9, 9)).save(jpeg)
    with pytest.raises(UserError) as caught:
        data[0]
    assert caught.value.message == f"{xml}: <size> says 64 x 64, but {jpeg} is 80 x 48"
    assert caught.value.hint == SIZE_HINT


def test_detect_finetune_refuses_a_box_outside_the_real_image(cli: Cli, tmp_path: Path) -> None:
    """The report's case: <size> 960 x 960 on a 64 px image and <xmax> 500. Before: exit 0, a
    box trained 400 px outside the image. Now one line, before anything is stored or trained."""
    root = shapes(tmp_path)
    xml, jpeg = first(root)
    sub(xml, SIZE_XML, "<width>960</width><height>960</height>")
    text = xml.read_text()
    start = text.index("<xmax>") + len("<xmax>")
    xml.write_text(text[:start] + "500" + text[text.index("</xmax>") :])
    out = tmp_path / "x.pt"
    result = cli(
        "detect", "finetune", str(root), "--size", "96", "--epochs", "1", "--batch", "2",
        "--threads", "1", "--out", str(out),
    )  # fmt: skip
    one_line(result, 2, f"error: {xml}: <size> says 960 x 960, but {jpeg} is 64 x 64", SIZE_HINT)
    assert not out.exists()
    assert list(RunStore.open(f"sqlite:///{tmp_path / 'dlperf.db'}").list_runs()) == []


def test_an_image_that_cannot_be_read_as_the_split_loads_keeps_its_own_line(
    tmp_path: Path,
) -> None:
    """A missing or undecodable image is left to the read, as before: its own line there."""
    root = shapes(tmp_path)
    _, jpeg = first(root)
    jpeg.write_bytes(b"not an image")
    annotations = voc.load_split(root, "train")
    data = voc.VocDataset(root, annotations, voc.class_names(annotations))
    with pytest.raises(UserError, match=f"^{jpeg}: cannot decode the image"):
        data[0]


# --- cause 10: split files ------------------------------------------------------------------


@pytest.mark.parametrize("line_end", ["\n", "\r\n"])
def test_a_split_file_with_a_byte_order_mark_reads_its_ids(tmp_path: Path, line_end: str) -> None:
    """Before: "split train lists \\ufeff000000 but .../\\ufeff000000.xml is missing"."""
    root = shapes(tmp_path)
    split = root / "ImageSets" / "Main" / "train.txt"
    ids = split.read_text().split()
    split.write_bytes(("\ufeff" + line_end.join(ids) + line_end).encode())
    assert voc.read_split(root, "train") == ids
    assert [a.image_id for a in voc.load_split(root, "train")] == ids


def test_a_split_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    """UTF-16 (Windows' "Unicode"). Before: a UnicodeDecodeError traceback."""
    root = shapes(tmp_path)
    split = root / "ImageSets" / "Main" / "train.txt"
    split.write_bytes(split.read_text().encode("utf-16"))
    with pytest.raises(UserError) as caught:
        voc.read_split(root, "train")
    assert (caught.value.message, caught.value.hint) == (
        f"{split}: not UTF-8 text (byte 0xff)",
        "save it as UTF-8",
    )
