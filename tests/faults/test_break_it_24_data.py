"""Break-it round 24, P2 (the user's own data), causes C1, C2, C6, C8 and C10.

C1. An MNIST or CIFAR test file of 0 images trained to the end with test accuracy null and
    no word; a train idx file of 0 images was blamed on "the split".
C2. A .gz that unpacked to a bad idx file left the unpacked file in place, and replacing the
    .gz changed nothing: every later run read the stale unpacked file.
C6. A split folder that is itself a link (train -> val, test -> train) was refused, but the
    line blamed train/a, a plain folder.
C8. An .npz holding an object array (class names from pandas) was "not a readable .npz
    file", naming no array, with a fix that would not help.
C10. data.root pointing at MNIST/raw, MNIST/ or cifar-10-batches-py/ itself was told to set
    data.download = true, which would fetch a second copy below the files.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import CliResult
from tests.faults.test_break_it_21_data import (
    TEST_IMAGES,
    TEST_LABELS,
    TRAIN_IMAGES,
    TRAIN_LABELS,
    batch,
    idx_bytes,
    write_cifar,
    write_mnist,
)
from tests.faults.test_break_it_23_data_a import describe, write_folder
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]
RNG = np.random.default_rng(24)
DOWNLOAD = "data.download"


# --- C1: a file of 0 images -------------------------------------------------------------------


@pytest.mark.parametrize("which", ["mnist-test", "mnist-train", "cifar10-test"])
def test_a_file_of_0_images_is_refused_naming_it(cli: Cli, tmp_path: Path, which: str) -> None:
    """Before: the empty test split was taken (test accuracy null); an empty train file was
    'no training images after the split'."""
    root = tmp_path / "set"
    if which == "cifar10-test":
        empty = write_cifar(root, over={"test_batch": batch(0)}) / "test_batch"
    else:
        images, labels = (
            (TEST_IMAGES, TEST_LABELS)
            if which == "mnist-test"
            else (
                TRAIN_IMAGES,
                TRAIN_LABELS,
            )
        )
        none = {images: idx_bytes(np.zeros((0, 28, 28))), labels: idx_bytes(np.zeros(0))}
        empty = write_mnist(root, **none) / images
    r = describe(cli, which.split("-")[0], root)
    one_line(r, 2, f"{empty} holds 0 images", "replace it")
    assert "after the split" not in r.err


# --- C2: a .gz that unpacks to a bad idx file ---------------------------------------------------


def gz_only(root: Path) -> Path:
    """root/MNIST/raw holding the four files as .gz only, as downloaded."""
    raw = write_mnist(root)
    for name in (TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS):
        (raw / f"{name}.gz").write_bytes(gzip.compress((raw / name).read_bytes()))
        (raw / name).unlink()
    return raw


def test_a_gz_unpacking_to_a_bad_idx_leaves_nothing_and_its_fix_loads(
    cli: Cli, tmp_path: Path
) -> None:
    """The repro: a labels .gz with a second gzip member (70 label bytes for a header of 60)
    was unpacked into place; its whole copy then changed nothing."""
    raw = gz_only(tmp_path / "m")
    gz = raw / f"{TRAIN_LABELS}.gz"
    good = gz.read_bytes()
    gz.write_bytes(good + gzip.compress(b"\x05" * 10))
    r = describe(cli, "mnist", tmp_path / "m")
    one_line(r, 2, str(gz), "70 bytes of data for 60")
    assert not (raw / TRAIN_LABELS).exists()
    assert not [p for p in raw.iterdir() if ".part" in p.name]
    gz.write_bytes(good)  # the user replaces their own file
    r = describe(cli, "mnist", tmp_path / "m")
    assert r.code == 0, r.err


def test_a_gz_newer_than_its_unpacked_file_is_unpacked_again(cli: Cli, tmp_path: Path) -> None:
    """A labels .gz of another count (a whole idx file, refused only beside the images) is
    unpacked and refused; the user's whole copy, written after, is unpacked over it."""
    raw = gz_only(tmp_path / "m")
    gz = raw / f"{TRAIN_LABELS}.gz"
    good = gz.read_bytes()
    gz.write_bytes(gzip.compress(idx_bytes(np.arange(70) % 10)))
    r = describe(cli, "mnist", tmp_path / "m")
    one_line(r, 2, "70 labels for 60 images")
    gz.write_bytes(good)
    stamp = (raw / TRAIN_LABELS).stat().st_mtime + 2  # copied after the unpacking
    os.utime(gz, (stamp, stamp))
    r = describe(cli, "mnist", tmp_path / "m")
    assert r.code == 0, r.err
    assert json.loads(r.out)["splits"] == {"train": 54, "val": 6, "test": 20}


# --- C6: a split folder that is itself a link ----------------------------------------------------


@pytest.mark.parametrize(("link", "to"), [("train", "val"), ("test", "train")])
def test_a_split_folder_that_is_a_link_is_named(
    cli: Cli, tmp_path: Path, link: str, to: str
) -> None:
    root = write_folder(tmp_path / "if")
    if (root / link).exists():
        shutil.rmtree(root / link)
    (root / link).symlink_to(to)
    r = describe(cli, "imagefolder", root, "data.image_size=8")
    one_line(r, 2, f"{root / link} is a link to {root / to}", "keep each image in one split")
    assert f"{link}/a" not in r.err


# --- C8: an object array in an .npz ---------------------------------------------------------------


def test_an_npz_object_array_is_named_with_a_fix_that_helps(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "z.npz"
    images = RNG.integers(0, 256, (20, 1, 8, 8), dtype=np.uint8)
    classes = np.array(["cat", "dog"], dtype=object)  # as pandas hands them over
    np.savez(path, images=images, labels=np.arange(20) % 2, classes=classes)
    r = describe(cli, "npz", path)
    one_line(r, 2, str(path), "'classes' is an object (pickled) array")
    assert "numpy.array(names, dtype=str)" in r.err
    assert "numpy.savez(path, images=..., labels=...)" not in r.err


# --- C10: data.root at the folder of the files ----------------------------------------------------


@pytest.mark.parametrize("given", ["MNIST/raw", "MNIST", "cifar-10-batches-py", "flat"])
def test_a_root_at_the_folder_of_the_files_says_which_root_to_set(
    cli: Cli, tmp_path: Path, given: str
) -> None:
    root = tmp_path / "set"
    name = "cifar10" if given.startswith("cifar") else "mnist"
    folder = write_cifar(root) if name == "cifar10" else write_mnist(root)
    if given == "flat":  # the idx files straight in a folder of the user's
        flat = folder.rename(tmp_path / "flat")
        r = describe(cli, name, flat)
        one_line(r, 2, f"its files are in {flat}: move them into {flat / 'MNIST' / 'raw'}")
    else:
        r = describe(cli, name, root / given)
        one_line(r, 2, f"its files are in {folder}: set data.root = '{root}'")
    assert DOWNLOAD not in r.err
