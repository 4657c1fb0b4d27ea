"""Break-it round 26, P2 (the user's own data files).

1. CIFAR's python batches and meta files were read with pickle.load: a data_batch_3 whose
   pickle calls os.system ran the command, then was "a int, not a batch's dict".
2. An .npz whose labels were float, (N, 1), one-hot or of the wrong length, or whose images
   were float (0..255 or 0..1) or N,H,W, was "labels must hold one integer per image" or
   "wants an array 'images' of uint8 N,C,H,W": neither what the file held nor the fix.
3. data.root (or a distill pool) "ok.npz/" was "not a readable .npz file (Not a directory)
   ... write it again with numpy.savez": the file is fine, the path has a slash too many.
4. A valid 4-D MNIST idx file (N x 1 x 28 x 28) was "not an idx file (magic 0x00000804)".
5. Images directly in train/ or val/, beside the class folders, were left out unsaid.
6. Class folders "café" as NFC and as NFD in one split were two classes shown alike.
7. A data.test_fraction that rounds to 0 test images (2 images at 0.2, digits at 0.0002)
   trained to the end and reported the test accuracy as "-", unsaid.
8. Synthetic data.num_classes up to 2**31 - 1: `data describe` ran for hours without a word.
"""

from __future__ import annotations

import os
import pickle
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from dlperf.config import DataConfig
from dlperf.data import load_data
from dlperf.data.sources import read_npz
from dlperf.errors import UserError
from tests.conftest import CliResult
from tests.faults.test_break_it_21_data import (
    NAMES,
    TRAIN_IMAGES,
    batch,
    idx_bytes,
    write_cifar,
    write_mnist,
)
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]
RNG = np.random.default_rng(26)


# --- 1: a CIFAR file's pickle runs nothing ------------------------------------------------


class _Payload:
    """Unpickled by pickle.load, it runs `touch marker`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("where", ["data_batch_3", "batches.meta"])
def test_a_cifar_pickle_that_runs_a_command_is_refused_unrun(
    cli: Cli, tmp_path: Path, where: str
) -> None:
    """Before: the command ran (the marker file was made), then "holds a int"."""
    marker = tmp_path / "PWNED"
    evil = _Payload(marker)
    if where == "batches.meta":
        folder = write_cifar(tmp_path / "c", meta={"label_names": evil})
    else:
        folder = write_cifar(tmp_path / "c", over={where: evil})
    r = cli("data", "describe", "cifar10", "--set", f"data.root={tmp_path / 'c'}", "--json")
    kind = "meta file" if where == "batches.meta" else "batch"
    one_line(r, 2, str(folder / where), f"is not a CIFAR {kind}", "system", "without running")
    assert not marker.exists(), "the pickle's command ran"


def test_a_download_unpickles_no_batch_of_the_users(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: with batches.meta missing and data.download = true, torchvision's CIFAR10,
    made to download, pickle.load-ed the user's test_batch (its command ran). The download
    here (no network) fetches nothing: what is there is read, as dlperf reads it."""
    import torchvision.datasets.cifar
    import torchvision.datasets.utils

    def fetch(*args: Any, **kwargs: Any) -> None:
        pass

    monkeypatch.setattr(torchvision.datasets.utils, "download_and_extract_archive", fetch)
    monkeypatch.setattr(torchvision.datasets.cifar, "download_and_extract_archive", fetch)
    marker = tmp_path / "PWNED"
    folder = write_cifar(tmp_path / "c", over={"test_batch": _Payload(marker)})
    (folder / "batches.meta").unlink()
    root = f"data.root={tmp_path / 'c'}"
    r = cli("data", "describe", "cifar10", "--set", root, "--set", "data.download=true")
    one_line(r, 2, "batches.meta missing")
    assert not marker.exists(), "the pickle's command ran"


def _python2_spelling(data: bytes) -> bytes:
    """A protocol-2 pickle as CIFAR's own files (Python 2, numpy 1) name numpy's globals."""
    return data.replace(b"numpy._core.", b"numpy.core.")


@pytest.mark.parametrize("protocol", [2, 5])
def test_cifar_pickles_of_every_protocol_and_numpy_spelling_are_read(
    tmp_path: Path, protocol: int
) -> None:
    """What the restricted unpickler lets through: the official files' numpy.core globals at
    protocol 2 (bytes there are _codecs.encode), and numpy._core's _frombuffer at 5."""
    folder = write_cifar(tmp_path / "c")
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        entry = {**batch(), "batch_label": b"training batch", "filenames": [b"a.png"] * 20}
        entry["labels"] = np.array(entry["labels"], np.int64)  # numpy scalars and arrays alike
        data = pickle.dumps(entry, protocol=protocol)
        (folder / name).write_bytes(_python2_spelling(data) if protocol == 2 else data)
    meta = pickle.dumps({"label_names": NAMES, "num_cases_per_batch": np.int64(20)}, protocol)
    (folder / "batches.meta").write_bytes(meta)
    data = load_data(DataConfig(name="cifar10", root=str(tmp_path / "c")))
    assert (len(data.train) + len(data.val), len(data.test), data.classes) == (100, 20, NAMES)


# --- 2: what an .npz holds, and its fix ---------------------------------------------------


def _npz(path: Path, images: Any = None, labels: Any = None) -> Path:
    images = RNG.integers(0, 256, (6, 1, 4, 4), dtype=np.uint8) if images is None else images
    labels = np.arange(6) % 2 if labels is None else labels
    np.savez(path, images=images, labels=labels)
    return path


NPZ_CASES = {
    "labels_float": (None, (np.arange(6) % 2).astype(np.float32), "float32 of shape (6,)",
                     "labels=labels.astype(numpy.int64)"),
    "labels_n1": (None, (np.arange(6) % 2)[:, None], "int64 of shape (6, 1)", "labels[:, 0]"),
    "labels_onehot": (None, np.eye(2)[np.arange(6) % 2], "one-hot rows of 2 classes",
                      "labels.argmax(axis=1)"),
    "labels_short": (None, np.arange(5) % 2, "5 labels for 6 images", "labels of shape (6,)"),
    "images_255": (np.full((6, 1, 4, 4), 200.0, np.float32), None,
                   "float32 of shape (6, 1, 4, 4), values 200..200",
                   "images=images.round().astype(numpy.uint8)"),
    "images_01": (np.full((6, 1, 4, 4), 0.5, np.float32), None, "values 0.5..0.5",
                  "images=(images * 255).round().astype(numpy.uint8)"),
    "images_nhw": (np.zeros((6, 4, 4), np.uint8), None, "uint8 of shape (6, 4, 4)",
                   "images=images[:, None]"),
}  # fmt: skip


@pytest.mark.parametrize(("images", "labels", "said", "fix"), NPZ_CASES.values(), ids=NPZ_CASES)
def test_an_npz_of_the_wrong_arrays_names_what_it_holds_and_the_fix(
    tmp_path: Path, images: Any, labels: Any, said: str, fix: str
) -> None:
    path = _npz(tmp_path / "x.npz", images, labels)
    with pytest.raises(UserError) as caught:
        read_npz(path)
    assert said in caught.value.message and fix in (caught.value.hint or ""), caught.value
    assert "\n" not in str(caught.value)


# --- 3: "ok.npz/" -------------------------------------------------------------------------


def test_an_npz_path_with_a_trailing_slash_is_said_so(cli: Cli, tmp_path: Path) -> None:
    """Before: "not a readable .npz file ... write it again with numpy.savez"."""
    path = _npz(tmp_path / "ok.npz")
    r = cli("data", "describe", "npz", "--set", f"data.root={path}/", "--json")
    one_line(r, 2, f"{path}/ names the file {path} with a trailing slash", f"without it: {path}")
    assert "numpy.savez" not in r.err


# --- 4: a 4-D idx file --------------------------------------------------------------------


def test_a_4d_mnist_idx_file_is_said_to_be_4d(tmp_path: Path) -> None:
    """Before: "is not an idx file (magic 0x00000804)" and "replace it with a whole copy"."""
    images = RNG.integers(0, 256, (60, 1, 28, 28))
    write_mnist(tmp_path / "m", **{TRAIN_IMAGES: idx_bytes(images)})
    with pytest.raises(UserError) as caught:
        load_data(DataConfig(name="mnist", root=str(tmp_path / "m")))
    assert "holds 4-D data (60 x 1 x 28 x 28), not 3-D" in caught.value.message, caught.value
    assert "images.reshape(60, 28, 28)" in (caught.value.hint or ""), caught.value


# --- 5 and 6: what an image folder's listing holds ----------------------------------------


def _folder(root: Path, classes: list[str], loose: str = "") -> Path:
    """root/train and root/val with an 8x8 PNG in each class folder, and in the split
    folder `loose` itself where given."""
    for split in ("train", "val"):
        for name in classes:
            (root / split / name).mkdir(parents=True)
            for i in range(2):
                pixels = RNG.integers(0, 256, (8, 8, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / name / f"{i}.png")
    if loose:
        Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(root / loose)
    return root


def test_images_directly_in_a_split_folder_are_refused_naming_them(tmp_path: Path) -> None:
    """Before: val/stray.png was left out of the test split, and the counts said nothing."""
    root = _folder(tmp_path / "if", ["a", "b"], loose="val/stray.PNG")
    with pytest.raises(UserError) as caught:
        load_data(DataConfig(name="imagefolder", root=str(root), image_size=8))
    said = f"{root / 'val'} holds 1 image file (stray.PNG) directly, beside its class folders"
    assert said in caught.value.message, caught.value
    assert "move them into the folders of their classes" in (caught.value.hint or "")


NFC, NFD = unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café")


@pytest.mark.parametrize("reader", ["imagefolder", "npz"])
def test_class_names_equal_but_for_normalisation_are_refused(tmp_path: Path, reader: str) -> None:
    """Before: two classes, each shown as café, without a word."""
    if reader == "imagefolder":
        root = _folder(tmp_path / "if", [NFC, NFD, "tea"])
        cfg = DataConfig(name="imagefolder", root=str(root), image_size=8)
    else:
        root = tmp_path / "c.npz"
        np.savez(root, images=np.zeros((6, 1, 4, 4), np.uint8), labels=np.arange(6) % 2,
                 classes=np.array([NFC, NFD]))  # fmt: skip
        cfg = DataConfig(name="npz", root=str(root))
    with pytest.raises(UserError) as caught:
        load_data(cfg)
    message = caught.value.message
    assert "differ only in Unicode normalisation" in message, message
    assert "'caf\\xe9'" in message and "'cafe\\u0301'" in message, message


# --- 7: a test fraction of no image -------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "fraction", "smallest"), [("npz", 0.2, "0.26"), ("digits", 0.0002, "0.00028")]
)
def test_a_test_fraction_of_no_image_is_refused_naming_one_that_gives_one(
    tmp_path: Path, name: str, fraction: float, smallest: str
) -> None:
    """Before: the run trained to the end, its test accuracy "-" (null), unsaid."""
    root = str(_npz(tmp_path / "two.npz", np.zeros((2, 1, 4, 4), np.uint8), np.arange(2)))
    cfg = DataConfig(name=name, root=root, test_fraction=fraction, val_fraction=0)
    with pytest.raises(UserError) as caught:
        load_data(cfg)
    assert f"data.test_fraction {fraction:g} of the" in caught.value.message, caught.value
    assert "rounds to no test image" in caught.value.message, caught.value
    assert f"set data.test_fraction = {smallest} or more" in (caught.value.hint or "")
    assert len(load_data(cfg.model_copy(update={"test_fraction": float(smallest)})).test) == 1
    assert len(load_data(cfg.model_copy(update={"test_fraction": 0.0})).test) == 0  # no test split


# --- 8: a synthetic set of more classes than dlperf reads ---------------------------------


def test_a_synthetic_set_of_more_classes_than_dlperf_reads_is_one_line(cli: Cli) -> None:
    """Before: `data describe synthetic` at data.num_classes 2**31 - 1 ran for hours, silent
    (10**7 classes: 75 s and 4.6 GB), where an .npz is capped at MAX_CLASSES."""
    sets = ("--set", "data.num_classes=2147483647", "--set", "data.size=8")
    r = cli("data", "describe", "synthetic", *sets, "--json")
    one_line(r, 2, "data.num_classes 2,147,483,647", "set data.num_classes = 1000000 or fewer")
