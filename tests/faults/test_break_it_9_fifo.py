"""What the ninth break-it round found in the file arguments: a FIFO, each seen failing first.

A FIFO given where dlperf reads a file (a model file, model.weights, an ONNX model, a labels
file, an image to infer on or to load a server with, a detector's weights, a VOC split file,
annotation or JPEG) was called "not found", "no such file" or "missing": a file that is there.
Each is now '<path> is not a regular file (a FIFO)', exit 2, the path stat'ed and never opened
(opening a FIFO waits for a writer, for ever when there is none); a path that is not there is
still "not found" (tests/faults/test_bad_inputs.py).

A regression that opened the FIFO would block: the module's timeout fails it instead, and the
library calls run in a thread that a writer's open sets free.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dlperf.errors import UserError
from tests.conftest import TINY, CliResult
from tests.deploy.test_server import tiny_classifier
from tests.faults.test_store_faults import one_line

pytestmark = pytest.mark.timeout(240)

Cli = Callable[..., CliResult]
FIFO = "is not a regular file (a FIFO)"
GUARD_S = 60


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A classifier of 3x8x8 images with dlperf's metadata, written with onnx's helper (no
    export: each command refuses its FIFO before it runs the graph)."""
    return tiny_classifier(tmp_path_factory.mktemp("fifo") / "small.onnx")


@pytest.fixture(scope="module")
def detector(classifier: Path) -> Path:
    """The classifier's graph labelled a detector: enough for `detect run` to reach its
    images, which it checks before any inference."""
    from dlperf.deploy import meta as meta_io

    path = classifier.with_name("det.onnx")
    shutil.copy(classifier, path)
    meta = meta_io.load(path)
    meta.task = "detection"
    meta_io.save(path, meta)
    return path


def files(root: Path) -> None:
    """The good files the commands name beside the FIFO, in the working directory."""
    (root / "exp.toml").write_text(TINY.format(epochs=1))
    Image.fromarray(np.zeros((8, 8), dtype=np.uint8)).save(root / "img.png")


def guarded(call: Callable[[], object], fifo: Path) -> BaseException | None:
    """What `call` raised, run in a thread; a call blocked opening `fifo` fails the test (a
    writer's open and close set it free first)."""
    caught: list[BaseException] = []

    def target() -> None:
        try:
            call()
        except BaseException as e:  # handed to the test's thread
            caught.append(e)

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(timeout=GUARD_S)
    if worker.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(timeout=GUARD_S)
        pytest.fail(f"blocked opening the FIFO {fifo}")
    return caught[0] if caught else None


# --- the CLI: each file argument a FIFO -------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "fifo", "expected"),
    [
        # models/registry.py: before "model file fifo.py not found"
        ("run exp.toml --set model.name=fifo.py:build", "fifo.py", "/fifo.py " + FIFO),  # absolute
        ("analyze fifo.py:build", "fifo.py", "model file fifo.py " + FIFO),
        # engine/pretrained.py: before "model.weights fifo.pt: no such file"
        ("run exp.toml --set model.weights=fifo.pt", "fifo.pt", "model.weights fifo.pt " + FIFO),
        # deploy/meta.py: before "no model file fifo.onnx"
        ("infer fifo.onnx img.png", "fifo.onnx", "fifo.onnx " + FIFO),
        ("infer bench fifo.onnx", "fifo.onnx", "fifo.onnx " + FIFO),
        ("serve fifo.onnx", "fifo.onnx", "fifo.onnx " + FIFO),
        ("detect run fifo.onnx img.png", "fifo.onnx", "fifo.onnx " + FIFO),
        # deploy/runtime.py: before "no image file fifo.png", "no labels file fifo.txt"
        ("infer {classifier} fifo.png", "fifo.png", "fifo.png " + FIFO),
        ("infer {classifier} img.png --labels fifo.txt", "fifo.txt", "fifo.txt " + FIFO),
        ("detect export --out d.onnx --labels fifo.txt", "fifo.txt", "fifo.txt " + FIFO),
        # deploy/loadgen.py: before "no image file fifo.png"
        ("serve bench http://127.0.0.1:1 --image fifo.png", "fifo.png", "fifo.png " + FIFO),
        # detect/ssd.py: before "no weights file fifo.pt", "no image file fifo.png"
        ("detect export --out d.onnx --weights fifo.pt", "fifo.pt", "fifo.pt " + FIFO),
        ("detect run {detector} fifo.png", "fifo.png", "fifo.png " + FIFO),
    ],
)
def test_a_fifo_file_argument_is_not_called_missing(
    cli: Cli,
    classifier: Path,
    detector: Path,
    tmp_path: Path,
    line: str,
    fifo: str,
    expected: str,
) -> None:
    files(tmp_path)
    os.mkfifo(tmp_path / fifo)
    result = cli(*line.format(classifier=classifier, detector=detector).split())
    one_line(result, 2, expected)
    assert not (tmp_path / "d.onnx").exists()


@pytest.mark.parametrize(
    ("fifo", "expected"),
    [
        # before "no split file shapes/ImageSets/Main/{split}.txt"
        ("ImageSets/Main/{split}.txt", "shapes/ImageSets/Main/{split}.txt " + FIFO),
        # before "shapes: split train lists 000000 but shapes/Annotations/000000.xml is missing"
        ("Annotations/{id}.xml", "shapes/Annotations/{id}.xml " + FIFO),
        # before: refused only as training read it, "... names {id}.jpg, which is missing"
        ("JPEGImages/{id}.jpg", "shapes/JPEGImages/{id}.jpg " + FIFO),
    ],
)
@pytest.mark.parametrize("command", ["finetune", "eval"])
def test_a_fifo_in_a_voc_set_is_not_called_missing(
    cli: Cli, tmp_path: Path, fifo: str, expected: str, command: str
) -> None:
    from dlperf.detect import voc

    voc.make_shapes(tmp_path / "shapes", images=4, size=64, seed=1)
    split = "train" if command == "finetune" else "val"
    image_id = (tmp_path / f"shapes/ImageSets/Main/{split}.txt").read_text().split()[0]
    path = tmp_path / "shapes" / fifo.format(id=image_id, split=split)
    path.unlink()
    os.mkfifo(path)
    (tmp_path / "w.pt").write_bytes(b"")  # eval's weights: the data set is read first
    extra = ["--weights", "w.pt"] if command == "eval" else ["--out", "d.pt"]
    result = cli("detect", command, "shapes", *extra)
    one_line(result, 2, expected.format(id=image_id, split=split))
    assert not (tmp_path / "d.pt").exists()


# --- the library: a file that became a FIFO after the checks before it ----------------------


def test_a_voc_jpeg_replaced_by_a_fifo_is_refused_when_read(tmp_path: Path) -> None:
    """VocDataset reads each JPEG when its batch comes: one replaced by a FIFO since the
    split was loaded is refused, not waited on. Before: "which is missing"."""
    from dlperf.detect import voc

    voc.make_shapes(tmp_path, images=4, size=64, seed=1)
    annotations = voc.load_split(tmp_path, "train")
    data = voc.VocDataset(tmp_path, annotations, voc.class_names(annotations))
    jpeg = tmp_path / "JPEGImages" / annotations[0].filename
    jpeg.unlink()
    os.mkfifo(jpeg)
    caught = guarded(lambda: data[0], jpeg)
    assert isinstance(caught, UserError), caught
    assert str(caught).startswith(f"{jpeg} {FIFO}"), caught


def test_check_model_refuses_a_fifo(tmp_path: Path) -> None:
    """deploy/export.py's check of an ONNX file. Before: "no model file"."""
    from dlperf.deploy.export import check_model

    fifo = tmp_path / "m.onnx"
    os.mkfifo(fifo)
    caught = guarded(lambda: check_model(fifo), fifo)
    assert isinstance(caught, UserError), caught
    assert str(caught).startswith(f"{fifo} {FIFO}"), caught


@pytest.mark.parametrize("missing", ["nodir/m.onnx", "m.onnx"])
def test_a_missing_file_is_still_missing(tmp_path: Path, missing: str) -> None:
    from dlperf.deploy.export import check_model

    with pytest.raises(UserError, match=r"^no model file"):
        check_model(tmp_path / missing)


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (lambda p: p.symlink_to("/dev/null"), "a character device"),
        (lambda p: os.mkfifo(p), "a FIFO"),
    ],
)
def test_other_kinds_are_named(
    cli: Cli, classifier: Path, tmp_path: Path, make: Callable[[Path], None], kind: str
) -> None:
    """A link to /dev/null is named for what it is too. Before: "no image file null.png"."""
    files(tmp_path)
    make(tmp_path / "null.png")
    result = cli("infer", str(classifier), "null.png")
    one_line(result, 2, f"null.png is not a regular file ({kind}) (give an image file)")


def test_a_directory_in_a_voc_set_is_named(tmp_path: Path) -> None:
    """Before: "no split file ..."; elsewhere a directory keeps its "no ... file" line."""
    from dlperf.detect import voc

    voc.make_shapes(tmp_path, images=4, size=64, seed=1)
    split = tmp_path / "ImageSets" / "Main" / "train.txt"
    split.unlink()
    split.mkdir()
    with pytest.raises(UserError, match=r"train.txt is not a regular file \(a directory\)"):
        voc.load_split(tmp_path, "train")
