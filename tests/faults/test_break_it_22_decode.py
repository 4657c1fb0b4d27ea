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


@pytest.fixture
def model(cli: Cli) -> Path:
    """smallcnn, untrained, exported for 1 x 8 x 8 images: what infer needs of a classifier."""
    r = cli("export", "smallcnn", "--input", "1,8,8", "--out", "m.onnx")
    assert r.code == 0, r.err
    return Path("m.onnx").absolute()


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
