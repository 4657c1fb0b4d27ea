"""The twenty-second break-it round (P2, the user's own data): causes 1 to 4, 8, 13 and 17b.

1. A `.npy` file given as an npz root (or renamed .npz) was a TypeError traceback: np.load
   returns an array, not an archive, for it.
2. Images with a dimension of 0 (npz (10,1,0,0) or (10,0,8,8), MNIST idx N x 0 x 0) were read,
   and later blamed on Cutout (which was off) or on the model.
3. An idx header whose sizes overflow int64 (2^22 x 2^21 x 2^21) passed the size check
   (np.prod wraps to 0) and was a ValueError traceback in reshape.
4. Class names that repeat merged in the per-class counts: a CIFAR batches.meta naming every
   class "cat" counted one class; two image folders whose names differ in bytes that are not
   UTF-8 both became "x\\ufffd"; CIFAR names pickled as bytes were shown as "b'c0'".
8. Channels-last npz images (N,H,W,3) trained silently with a model that takes 16 channels
   (resnet20), and `data describe` described 16 channels of 16x3 images.
13. Class folders equal but for Unicode normalisation (NFC in train/, NFD in val/) were said
   to be each in one split but not the other, under the same shown name.
17b. `synthetic` with data.size 1 was told to use a larger data.limit or a smaller
   data.holdout, neither of them set.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from tests.conftest import CliResult
from tests.faults.test_break_it_21_data import (
    TEST_IMAGES,
    TRAIN_IMAGES,
    idx_bytes,
    write_mnist,
)
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]
RNG = np.random.default_rng(22)
BATCH_1 = "train.batch_size=1"


# --- files in the real on-disk formats ------------------------------------------------------


def write_cifar(root: Path, names: list[Any]) -> Path:
    """root/cifar-10-batches-py of 20 images a batch, batches.meta naming `names`."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        entry = {
            "data": RNG.integers(0, 256, (20, 3072), dtype=np.uint8),
            "labels": (np.arange(20) % 10).tolist(),
        }
        (folder / name).write_bytes(pickle.dumps(entry))
    (folder / "batches.meta").write_bytes(pickle.dumps({"label_names": names}))
    return folder


def write_folder(root: Path, train: list[str], val: list[str], per_class: int = 3) -> None:
    """root/train/<class> and root/val/<class> of 8x8 PNGs (names as str, from os.fsdecode)."""
    for split, classes in (("train", train), ("val", val)):
        for c, name in enumerate(classes):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(per_class + c):  # each class its own count
                Image.new("RGB", (8, 8), (40 * c, 10 * i, 0)).save(folder / f"{i}.png")


def describe(cli: Cli, name: str, root: Path, *sets: str) -> CliResult:
    sets = tuple(s for pair in (("--set", x) for x in sets) for s in pair)
    return cli("data", "describe", name, "--set", f"data.root={root}", *sets, "--json")


def run_npz(cli: Cli, exp: Path, root: Path, *sets: str) -> CliResult:
    more = tuple(s for pair in (("--set", x) for x in sets) for s in pair)
    npz = ("--set", "data.name=npz", "--set", f"data.root={root}")
    return cli("run", str(exp), *npz, "--set", "train.epochs=1", *more)


# --- cause 1: a .npy file as an npz root ----------------------------------------------------


@pytest.mark.parametrize("suffix", [".npy", ".npz"], ids=["npy", "renamed"])
@pytest.mark.parametrize("command", ["describe", "run", "distill"])
def test_a_npy_file_given_as_an_npz_root_is_one_line(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path, suffix: str, command: str
) -> None:
    """Before: "TypeError: 'numpy.ndarray' object does not support the context manager
    protocol", a traceback, exit 1."""
    np.save(tmp_path / "imgs.npy", np.zeros((20, 1, 8, 8), np.uint8))
    path = tmp_path / f"imgs{suffix}"
    (tmp_path / "imgs.npy").rename(path)
    if command == "describe":
        r = describe(cli, "npz", path)
    elif command == "run":
        r = run_npz(cli, tiny_exp(), path)
    else:
        r = cli("distill", str(tiny_exp()), "--unlabeled", f"npz:root={path}")
    one_line(r, 2, str(path), "not an .npz archive (a single .npy array)", "numpy.savez")


# --- cause 2: a dimension of 0 --------------------------------------------------------------


@pytest.mark.parametrize("shape", [(10, 1, 0, 0), (10, 0, 8, 8), (10, 1, 8, 0)])
def test_npz_images_with_a_dimension_of_0_are_refused_naming_the_file(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path, shape: tuple[int, ...]
) -> None:
    """Before: described as images 1x0x0; `run` ended in 'augment.cutout 0: a square of side
    -1 or more masks every pixel' (Cutout off), or 'the model rejects npz images'."""
    path = tmp_path / "zero.npz"
    np.savez(path, images=np.zeros(shape, np.uint8), labels=np.arange(10) % 2)
    said = "x".join(map(str, shape[1:]))
    one_line(describe(cli, "npz", path), 2, str(path), said, "at least 1")
    r = run_npz(cli, tiny_exp(), path, "train.batch_size=2")
    one_line(r, 2, str(path), said, "at least 1")
    assert "cutout" not in r.err and "degrees of freedom" not in r.err


def test_mnist_images_of_0x0_are_refused_naming_the_file(cli: Cli, tmp_path: Path) -> None:
    zero = {
        TRAIN_IMAGES: idx_bytes(np.zeros((60, 0, 0))),
        TEST_IMAGES: idx_bytes(np.zeros((20, 0, 0))),
    }
    raw = write_mnist(tmp_path / "m", **zero)
    one_line(describe(cli, "mnist", tmp_path / "m"), 2, str(raw / TRAIN_IMAGES), "0 x 0")


# --- cause 3: an idx header whose sizes overflow int64 --------------------------------------


def test_an_idx_header_whose_size_overflows_int64_is_one_line(cli: Cli, tmp_path: Path) -> None:
    """Before: np.prod wrapped to 0, a header-only file passed, and reshape raised
    'ValueError: cannot reshape array of size 0 into shape (4194304,2097152,2097152)'."""
    head = struct.pack(">IIII", 0x0803, 2**22, 2**21, 2**21)
    raw = write_mnist(tmp_path / "m", **{TEST_IMAGES: head})
    r = describe(cli, "mnist", tmp_path / "m")
    one_line(r, 2, str(raw / TEST_IMAGES), "0 bytes of data for 4194304 x 2097152 x 2097152")


# --- cause 4: class names that repeat -------------------------------------------------------


def test_a_cifar_meta_naming_a_class_twice_is_refused(cli: Cli, tmp_path: Path) -> None:
    """Before: '10 classes', and counts {"cat": 20} of 100 training images."""
    folder = write_cifar(tmp_path / "c", ["cat"] * 9 + ["dog"])
    r = describe(cli, "cifar10", tmp_path / "c")
    one_line(r, 2, str(folder / "batches.meta"), "more than once: cat")
    assert "dog" not in r.err.splitlines()[-1]


def test_cifar_class_names_pickled_as_bytes_are_decoded(cli: Cli, tmp_path: Path) -> None:
    """Before: shown as "b'c0'" (npz decodes bytes names)."""
    write_cifar(tmp_path / "c", [f"c{i}".encode() for i in range(9)] + ["caf\u00e9".encode()])
    r = describe(cli, "cifar10", tmp_path / "c")
    assert r.code == 0, r.err
    assert json.loads(r.out)["classes"] == [f"c{i}" for i in range(9)] + ["caf\u00e9"]


def test_cifar_bytes_names_equal_once_decoded_are_refused(cli: Cli, tmp_path: Path) -> None:
    folder = write_cifar(tmp_path / "c", [f"c{i}" for i in range(9)] + [b"c0"])
    one_line(describe(cli, "cifar10", tmp_path / "c"), 2, str(folder / "batches.meta"), ": c0")


def test_folder_names_differing_in_bytes_not_utf8_stay_distinct(cli: Cli, tmp_path: Path) -> None:
    """Before: both became "x\\ufffd", and the counts one class of 5 of 11 images."""
    names = [os.fsdecode(b"x\xff"), os.fsdecode(b"x\xfe"), "y"]
    write_folder(tmp_path / "if", names, names)
    r = describe(cli, "imagefolder", tmp_path / "if", "data.image_size=8")
    assert r.code == 0, r.err
    described = json.loads(r.out)
    classes = described["classes"]
    assert len(set(classes)) == 3, classes
    assert list(described["counts"]) == classes
    assert sum(described["counts"].values()) == described["splits"]["train"]
    # each says its own bytes
    assert {c for c in classes if c != "y"} == {"x\\xfe", "x\\xff"}


def test_a_lone_folder_name_not_utf8_still_shows_u_fffd(cli: Cli, tmp_path: Path) -> None:
    """As rounds 4 and 5 promise: only names that would merge are shown escaped."""
    names = [os.fsdecode(b"x\xff"), "y"]
    write_folder(tmp_path / "if", names, names)
    r = describe(cli, "imagefolder", tmp_path / "if", "data.image_size=8")
    assert r.code == 0, r.err
    assert json.loads(r.out)["classes"] == ["x\ufffd", "y"]


def test_npz_bytes_names_differing_in_bytes_not_utf8_stay_distinct(
    cli: Cli, tmp_path: Path
) -> None:
    path = tmp_path / "b.npz"
    images = RNG.integers(0, 256, (60, 1, 8, 8), dtype=np.uint8)
    np.savez(path, images=images, labels=np.arange(60) % 3, classes=[b"c\xff", b"c\xfe", b"d"])
    r = describe(cli, "npz", path)
    assert r.code == 0, r.err
    assert json.loads(r.out)["classes"] == ["c\\xff", "c\\xfe", "d"]


# --- cause 8: channels-last npz images ------------------------------------------------------


def test_channels_last_npz_images_are_refused_by_the_reader(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    """Before: resnet20 (16 input channels) trained on "16 channels of 16x3 images"; only
    a model that rejected them had the reader's layout said."""
    path = tmp_path / "nhwc.npz"
    images = RNG.integers(0, 256, (60, 16, 16, 3), dtype=np.uint8)
    np.savez(path, images=images, labels=np.arange(60) % 2)
    said = ("(16, 16, 3) look channels-last (N, H, W, C)", "np.transpose(images, (0, 3, 1, 2))")
    one_line(describe(cli, "npz", path), 2, str(path), *said)
    r = run_npz(cli, tiny_exp(), path, "model.name=resnet20", "train.batch_size=8")
    one_line(r, 2, str(path), *said)
    r = cli("distill", str(tiny_exp()), "--unlabeled", f"npz:root={path}")
    one_line(r, 2, str(path), *said)


# --- cause 13: folders equal but for Unicode normalisation ----------------------------------


def test_class_folders_differing_only_in_unicode_normalisation_are_said_so(
    cli: Cli, tmp_path: Path
) -> None:
    """Before: 'class folder café is in train/ but not in val/, and class folder café is in
    val/ but not in train/' (a copy made on macOS)."""
    nfc, nfd = (unicodedata.normalize(form, "caf\u00e9") for form in ("NFC", "NFD"))
    write_folder(tmp_path / "if", ["a", nfc], ["a", nfd])
    r = describe(cli, "imagefolder", tmp_path / "if", "data.image_size=8")
    one_line(r, 2, "Unicode normalisation", "NFC", "NFD", "train/", "val/")
    assert "but not in" not in r.err


def test_other_differences_are_said_beside_a_normalisation_one(cli: Cli, tmp_path: Path) -> None:
    nfc, nfd = (unicodedata.normalize(form, "caf\u00e9") for form in ("NFC", "NFD"))
    write_folder(tmp_path / "if", ["a", "b", nfc], ["a", nfd])
    r = describe(cli, "imagefolder", tmp_path / "if", "data.image_size=8")
    one_line(r, 2, "Unicode normalisation", "class folder b is in train/ but not in val/")


# --- cause 17b: the fix for a one-class synthetic training split ----------------------------


def test_a_one_image_synthetic_set_is_told_a_larger_data_size(
    cli: Cli, tiny_exp: Callable[..., Path]
) -> None:
    sets = ("--set", "data.name=synthetic", "--set", "data.shape=[1,8,8]", "--set", BATCH_1)
    r = cli("run", str(tiny_exp(epochs=1)), *sets, "--set", "data.size=1")
    one_line(r, 2, "class", "a larger data.size")
    assert "data.limit" not in r.err and "data.holdout" not in r.err
    r = cli("data", "describe", "synthetic", "--set", "data.size=1", "--json")
    assert r.code == 0, r.err
    (warning,) = json.loads(r.out)["warnings"]
    assert "a larger data.size" in warning and "data.limit" not in warning


def test_a_synthetic_set_cut_by_data_limit_is_told_data_limit(
    cli: Cli, tiny_exp: Callable[..., Path]
) -> None:
    sets = ("--set", "data.name=synthetic", "--set", "data.shape=[1,8,8]", "--set", BATCH_1)
    r = cli("run", str(tiny_exp(epochs=1)), *sets, "--set", "data.limit=1")
    one_line(r, 2, "class", "a larger data.limit")
    assert "data.holdout" not in r.err
