"""Break-it round 22, P2 causes 5, 10, 12, 14, 15 and 16: what the user's own files decode to.

5: a `--labels` file (infer, detect export and run) was read without an encoding: a UTF-8 byte
order mark stayed in the first name ("\\ufeffcat"; a detector's "__background__" was then not
recognised and added a second time), and bytes that are not UTF-8 were a UnicodeDecodeError
traceback. It is read as "utf-8-sig"; a file that is not UTF-8 is one line naming it.
10: `infer` and `detect run` refused a 100-megapixel image that training reads, after two lines
of Pillow's DecompressionBombWarning, and said no way on. They now decode a file up to
training's cap (Pillow's decompression-bomb cap) without the warning; past it, the one line
says to resize it below the cap.
12: a VOC object named "__background__" was trained as a class (the labels held it twice, and
the AP table had a nan row). It is refused in one line naming the annotation.
14: a newline or a tab in a class or file name split a table's row in `data describe`,
`data samples` and `infer`. Table cells are written as one line (a newline as \\n); --json keeps
the name as it is.
15: a palette PNG with transparency printed Pillow's two-line UserWarning wherever it was
decoded (describe, run, infer, detect run). It is converted through RGBA, quietly, to the same
pixels.
16: fine-tuning on a val split without objects trained, then reported mAP nan and said nothing.
It is refused before training in one line.
"""

from __future__ import annotations

import json
import struct
import warnings
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dlperf import image_modes
from dlperf.deploy import runtime
from dlperf.detect import ssd, voc
from dlperf.errors import UserError
from dlperf.table import Table
from tests.conftest import CliResult
from tests.deploy.test_server import flat_classifier
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]
BOMB_CAP = 2 * Image.MAX_IMAGE_PIXELS  # Pillow refuses to open more: training's readers too


@contextmanager
def no_warnings() -> Iterator[list[warnings.WarningMessage]]:
    """Every warning the body raises, recorded (none is printed in-process under pytest: the
    test asserts the list is empty where the command printed them)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def shown(caught: list[warnings.WarningMessage]) -> list[str]:
    return [f"{w.category.__name__}: {w.message}" for w in caught]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A classifier of 1 x 8 x 8 images into 10 classes with dlperf's metadata, as `dlperf
    export smallcnn --input 1,8,8` writes one: what infer reads of a classifier. Written with
    onnx's helper (Flatten, Gemm): these tests read images and labels, never an export, and
    a real export took 8 of this module's 18 CPU-seconds (export is tests/deploy's)."""
    path = tmp_path_factory.mktemp("bk22_decode") / "m.onnx"
    return flat_classifier(path, 1, 10, "smallcnn", model_kwargs={})


def png(path: Path, size: tuple[int, int] = (8, 8)) -> Path:
    Image.fromarray(np.random.default_rng(0).integers(0, 256, size[::-1], np.uint8)).save(path)
    return path


# --- cause 5: labels files ------------------------------------------------------------------


def test_a_labels_file_with_a_byte_order_mark_names_its_first_class_without_it(
    cli: Cli, model: Path, tmp_path: Path
) -> None:
    """Before: the first label was "\\ufeffcat"."""
    labels = tmp_path / "labels.txt"
    labels.write_bytes(b"\xef\xbb\xbf" + "".join(f"c{i}\r\n" for i in range(10)).encode())
    assert runtime.read_labels(labels) == [f"c{i}" for i in range(10)]
    r = cli("infer", str(model), str(png(tmp_path / "a.png")), "--labels", str(labels), "--json")
    assert r.code == 0, r.err
    top = json.loads(r.out)["predictions"][0]["top"]
    assert {t["label"] for t in top} <= {f"c{i}" for i in range(10)}, top


def test_a_detectors_labels_file_with_a_byte_order_mark_gets_one_background(
    tmp_path: Path,
) -> None:
    """Before: ["__background__", "\\ufeff__background__", "disc", "square"]: 4 labels for
    3 classes, refused by `detect export`."""
    labels = tmp_path / "det_labels.txt"
    labels.write_bytes(b"\xef\xbb\xbf__background__\r\ndisc\r\nsquare\r\n")
    assert ssd.read_labels(labels) == ["__background__", "disc", "square"]


def test_a_labels_file_that_is_not_utf8_is_one_line(cli: Cli, model: Path, tmp_path: Path) -> None:
    """Before: a UnicodeDecodeError traceback, exit 1."""
    labels = tmp_path / "latin.txt"
    labels.write_bytes(b"cat\n\xff\xfedog\n")
    r = cli("infer", str(model), str(png(tmp_path / "a.png")), "--labels", str(labels))
    one_line(r, 2, f"{labels}: not UTF-8 text (byte 0xff) (save it as UTF-8)")
    with pytest.raises(UserError) as caught:
        ssd.read_labels(labels)  # detect export and detect run read theirs here
    assert str(caught.value) == f"{labels}: not UTF-8 text (byte 0xff) (save it as UTF-8)"


# --- cause 10: images over Pillow's warning size ----------------------------------------------


def test_infer_reads_a_100_megapixel_image_as_training_does_without_a_warning(
    cli: Cli, model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: Pillow's DecompressionBombWarning (2 lines), then "huge.png is 10000x10000
    pixels, more than the 40,000,000 accepted", exit 2: training reads it.

    The image is 41 megapixels, not 100: over serve's cap (the 40,000,000 infer applied) and,
    with Pillow's warning size (PIL.Image.MAX_IMAGE_PIXELS, its documented setting) lowered
    to 40,000,000, over that too, yet under twice it, the cap training keeps."""
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 40_000_000)
    size = (10_000, 4_100)
    assert runtime.MAX_PIXELS < size[0] * size[1] < 2 * Image.MAX_IMAGE_PIXELS
    huge = tmp_path / "huge.png"
    Image.new("L", size, 77).save(huge)
    with no_warnings() as caught:
        r = cli("infer", str(model), str(huge), "--json")
    assert r.code == 0, r.err
    assert shown(caught) == []
    with no_warnings() as caught:  # detect run decodes its images here
        assert runtime.decode(huge.read_bytes(), str(huge)).size == size
    assert shown(caught) == []


def header_only_png(path: Path, width: int, height: int) -> Path:
    """A PNG whose header claims width x height grey pixels (the pixel data is one row): the
    size a decompression bomb claims, refused before anything is decoded."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        checksum = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + checksum

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    row = zlib.compress(b"\x00" * (width + 1))
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", row) + chunk(b"IEND", b"")
    )
    return path


def test_an_image_over_trainings_cap_is_refused_saying_how_to_go_on(
    cli: Cli, model: Path, tmp_path: Path
) -> None:
    """Before: Pillow's own text, no way on."""
    bomb = header_only_png(tmp_path / "bomb.png", 20_000, 10_000)
    with no_warnings() as caught:
        r = cli("infer", str(model), str(bomb))
    assert shown(caught) == []
    one_line(
        r,
        2,
        f"error: {bomb} is too large to decode: 200,000,000 pixels, over the {BOMB_CAP:,} "
        "dlperf decodes (Pillow's decompression-bomb cap, which training's readers keep too)",
        f"(resize it to at most {BOMB_CAP:,} pixels first)",
    )
    with pytest.raises(runtime.ImageTooLarge):  # detect run's images
        runtime.decode(bomb.read_bytes(), str(bomb))


def test_the_servers_own_cap_is_unchanged(tmp_path: Path) -> None:
    """`serve --max-pixels` (default 40,000,000) still caps an upload."""
    with pytest.raises(runtime.ImageTooLarge) as caught:
        runtime.decode(png(tmp_path / "a.png", (10, 10)).read_bytes(), "upload", max_pixels=99)
    assert str(caught.value) == "upload is 10x10 pixels, more than the 99 accepted"


# --- cause 12: a VOC object named __background__ ------------------------------------------------


def shapes(tmp_path: Path) -> Path:
    """make-shapes' 4 images of 64 px (3 train, 1 val)."""
    root = tmp_path / "det"
    voc.make_shapes(root, images=4, size=64, seed=1)
    return root


def test_a_voc_object_named_background_is_refused_naming_the_file(cli: Cli, tmp_path: Path) -> None:
    """Before: trained as a class: labels __background__, __background__, disc, square."""
    root = shapes(tmp_path)
    xml = root / "Annotations" / f"{voc.read_split(root, 'train')[1]}.xml"
    text = xml.read_text()
    name = text.split("<name>", 1)[1].split("</name>", 1)[0]
    xml.write_text(text.replace(f"<name>{name}</name>", "<name>__background__</name>", 1))
    r = cli("detect", "finetune", str(root), "--size", "96", "--epochs", "1", "--batch", "2",
            "--threads", "1", "--out", str(tmp_path / "w.pt"))  # fmt: skip
    one_line(
        r,
        2,
        f"error: {xml}: object 1 (__background__): __background__ is the name dlperf gives "
        "the background (label 0), not a class (rename the object's class)",
    )
    assert not (tmp_path / "w.pt").exists()


# --- cause 14: line breaks in names in tables ---------------------------------------------------


def test_a_table_cell_with_a_newline_or_tab_stays_one_line() -> None:
    """Before: "cat\\ndog" printed as two rows, the second with no count."""
    table = Table("classes", ["class", "images"], [["cat\ndog", 3], ["b\tc", 2], ["\u2028x", 1]])
    assert table.text().splitlines()[2:] == ["cat\\ndog  3", "b\\tc      2", "\\u2028x   1"]


def test_data_describe_shows_a_class_with_a_newline_in_one_row(cli: Cli, tmp_path: Path) -> None:
    for split in ("train", "val"):
        for name in ("cat\ndog", "b"):
            (tmp_path / "if" / split / name).mkdir(parents=True)
            for i in range(2):
                png(tmp_path / "if" / split / name / f"{i}.png", (16, 16))
    args = ("data", "describe", "imagefolder", "--set", f"data.root={tmp_path / 'if'}",
            "--set", "data.image_size=16")  # fmt: skip
    r = cli(*args)
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert any(line.split()[:1] == ["cat\\ndog"] for line in lines), r.out
    assert not any(line.split()[:1] == ["dog"] for line in lines), r.out
    r = cli(*args, "--json")
    assert r.code == 0, r.err
    assert "cat\ndog" in json.loads(r.out)["counts"], r.out  # JSON keeps the name


def test_infer_shows_a_file_name_with_a_newline_in_one_row(
    cli: Cli, model: Path, tmp_path: Path
) -> None:
    image = png(tmp_path / "new\nline.png")
    r = cli("infer", str(model), str(image), "--topk", "2")
    assert r.code == 0, r.err
    assert "new\\nline.png" in r.out and "\nline.png" not in r.out, r.out


# --- cause 15: palette images with transparency --------------------------------------------------


def palette_png(path: Path) -> tuple[Path, np.ndarray]:
    """A palette PNG with transparency in bytes (tRNS), and the RGB pixels it shows."""
    indices = np.random.default_rng(3).integers(0, 4, (8, 8), dtype=np.uint8)
    colours = np.array([[0, 0, 0], [255, 0, 0], [0, 200, 30], [9, 99, 199]], dtype=np.uint8)
    image = Image.fromarray(indices, "P")
    image.putpalette(colours.flatten().tolist())
    image.save(path, transparency=b"\x00\x80\xff\xff")
    return path, colours[indices]


def test_a_palette_image_with_transparency_decodes_quietly_to_its_colours(
    cli: Cli, model: Path, tmp_path: Path
) -> None:
    """Before: Pillow's "Palette images with Transparency expressed in bytes should be
    converted to RGBA images" (2 lines) in describe, run, infer and detect run."""
    path, expected = palette_png(tmp_path / "p.png")
    with Image.open(path) as image, no_warnings() as caught:
        assert image.mode == "P" and isinstance(image.info["transparency"], bytes)
        np.testing.assert_array_equal(np.asarray(image_modes.rgb(image, str(path))), expected)
    assert shown(caught) == []
    with no_warnings() as caught:
        r = cli("infer", str(model), str(path), "--json")
    assert r.code == 0, r.err
    assert shown(caught) == []


# --- cause 16: a val split with no objects ------------------------------------------------------


def test_finetuning_on_a_val_split_without_objects_is_refused_before_training(
    cli: Cli, tmp_path: Path
) -> None:
    """Before: it trained, then mAP nan (null in --json), not a word."""
    root = shapes(tmp_path)
    (val_id,) = voc.read_split(root, "val")
    xml = root / "Annotations" / f"{val_id}.xml"
    text = xml.read_text()
    xml.write_text(text[: text.index("  <object>")] + "</annotation>\n")
    r = cli("detect", "finetune", str(root), "--size", "96", "--epochs", "1", "--batch", "2",
            "--threads", "1", "--out", str(tmp_path / "w.pt"))  # fmt: skip
    one_line(
        r,
        2,
        f"error: {root}: the val split has no objects to measure AP on (its 1 image has none)",
        "(annotate objects in its images, or name a split that has some with --val-split)",
    )
    assert not (tmp_path / "w.pt").exists()
    r = cli("runs", "list", "--json")
    assert r.code == 0 and json.loads(r.out) == [], r.out  # nothing was recorded


def test_a_val_split_with_only_difficult_objects_is_refused_too(tmp_path: Path) -> None:
    root = shapes(tmp_path)
    annotations = voc.load_split(root, "val")
    for a in annotations:
        for o in a.objects:
            o.difficult = True
    with pytest.raises(UserError) as caught:
        voc.check_measurable(root, "val", annotations)
    assert caught.value.message == (
        f"{root}: the val split has no objects to measure AP on (its 1 image has only "
        "difficult ones, which AP leaves out)"
    )
