"""Break-it round 27, P2 (the user's own data), causes C1, C2, C3 and C6.

C1. train/a and val/a (or their files) linked to one folder (or file) outside the set: the
    test split held training images, and the run reported a test accuracy without a word.
C2. A class folder that is a link to nothing (a drive not mounted) was dropped without a word
    when every split's was dead, or blamed as "class c is in val/ but not in train/".
C3. "... leads into the folder of class b" named a path seen through the link (train/a/b,
    which is the real train/b), so removing it as told removed class b's images.
C6. An .npz of 0 images was "dataset 'npz' has no training images after the split", naming
    neither the file nor a fix.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]
RNG = np.random.default_rng(27)


def images(folder: Path, n: int) -> Path:
    """`n` 8x8 PNGs in `folder`."""
    folder.mkdir(parents=True)
    for i in range(n):
        Image.fromarray(RNG.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    return folder


def folder(root: Path, splits: dict[str, dict[str, int]]) -> Path:
    """root/<split>/<class> with the given number of 8x8 PNGs each."""
    for split, classes in splits.items():
        for name, n in classes.items():
            images(root / split / name, n)
    return root


def describe(cli: Cli, root: Path) -> CliResult:
    args = ("data", "describe", "imagefolder", "--set", f"data.root={root}")
    return cli(*args, "--set", "data.image_size=8", "--json")


# --- C1: train and test images linked to one place outside the set ------------------------------


@pytest.mark.parametrize("linked", ["folder", "files"])
def test_splits_linked_to_one_place_outside_the_set_are_refused(
    cli: Cli, tmp_path: Path, linked: str
) -> None:
    """Before: exit 0, the val split's class-a images among those trained on, and a test
    accuracy measured on them."""
    shared = images(tmp_path / "shared" / "a", 10)
    root = folder(tmp_path / "set", {"train": {"b": 4}, "val": {"b": 2}})
    if linked == "folder":
        (root / "train" / "a").symlink_to(shared)
        (root / "val" / "a").symlink_to(shared)
        pair = f"{root / 'train' / 'a'} and {root / 'val' / 'a'} are links to one folder ({shared})"
        held = "10 of the 12 images of the val split"
    else:
        for split, n in (("train", 10), ("val", 3)):
            (root / split / "a").mkdir()
            for i in range(n):
                (root / split / "a" / f"{i}.png").symlink_to(shared / f"{i}.png")
        train, val = root / "train" / "a" / "0.png", root / "val" / "a" / "0.png"
        pair = f"{train} and {val} are links to one file ({shared / '0.png'})"
        held = "3 of the 5 images of the val split"
    r = describe(cli, root)
    one_line(r, 2, pair, held, "keep each image in one split")


# --- C2: a class folder that is a link to nothing ---------------------------------------------


@pytest.mark.parametrize("dead", [("train",), ("val",), ("train", "val")])
def test_a_class_folder_linked_to_nothing_is_refused_naming_the_link(
    cli: Cli, tmp_path: Path, dead: tuple[str, ...]
) -> None:
    """Before: train/c dead and val/c real was "class folder c is in val/ but not in train/";
    both dead, exit 0 and 2 classes (c dropped)."""
    root = folder(tmp_path / "set", {"train": {"a": 4, "b": 4}, "val": {"a": 2, "b": 2}})
    nowhere = tmp_path / "unmounted" / "c"
    for split in ("train", "val"):
        if split in dead:
            (root / split / "c").symlink_to(nowhere)
        else:
            images(root / split / "c", 2)
    r = describe(cli, root)
    link = root / dead[0] / "c"
    one_line(r, 2, f"{link} is a link to nothing ({nowhere})")
    assert "not in" not in r.err


# --- C3: the link a "leads into" line names is the link -----------------------------------------


@pytest.mark.parametrize(
    ("link", "to", "train", "said"),
    [
        ("train/a", ".", {"b": 4, "c": 4}, "leads into the folder of class b"),  # the tester's if22
        ("train/up", "..", {"b": 4, "c": 4}, "leads into the folder of class b"),  # case 7
        ("train/up", "..", {}, "leads into the val split"),  # the split's site: train/up/val named
    ],
    ids=["class-dot", "class-up", "split-up"],
)
def test_a_leads_into_line_names_the_link_itself(
    cli: Cli, tmp_path: Path, link: str, to: str, train: dict[str, int], said: str
) -> None:
    """Before: train/a/b (the real train/b seen through train/a -> .) was named, and
    `rm -r` of it deletes class b's images; train/up/val likewise deletes the val split."""
    root = folder(tmp_path / "set", {"train": train, "val": {"b": 2, "c": 2}})
    (root / "train").mkdir(exist_ok=True)
    (root / link).symlink_to(to)
    r = describe(cli, root)
    one_line(r, 2, f"error: {root / link} {said}")


# --- C6: an .npz of 0 images --------------------------------------------------------------------


def test_an_npz_of_no_image_is_refused_naming_the_file(cli: Cli, tmp_path: Path) -> None:
    """Before: "dataset 'npz' has no training images after the split"."""
    path = tmp_path / "n3.npz"
    np.savez(path, images=np.zeros((0, 1, 8, 8), np.uint8), labels=np.zeros(0, np.int64))
    r = cli("data", "describe", "npz", "--set", f"data.root={path}", "--json")
    one_line(r, 2, f"{path} holds 0 images", "save at least one")
    assert os.path.isfile(path)
