"""Break-it round 25, P2 (the user's own data), causes C4, C5, C6 and C11.

C4. imagefolder: the validation split could take every training image of a class (its only
    one): the run trained without the class, test accuracy counted its images, and
    `data describe` showed it with 0 images, without a word.
C5. A hard link from a val image into a train class folder was read as a training image
    (a symbolic link there was refused): files were told apart by their real path only.
C6. A data.val_fraction that left no training image was "no training images after the
    split", naming neither the key nor a value that would do.
C11. An .npz class named '' showed as a blank cell in the per-class table.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from dlperf.data.sources import Split, holdout
from dlperf.parsing import name_text
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]
RNG = np.random.default_rng(25)


def folder(root: Path, train: dict[str, int], val: int = 1) -> Path:
    """root/train/<class> with `train[class]` 8x8 PNGs each and root/val/<class> with `val`."""
    for split, counts in (("train", train), ("val", dict.fromkeys(train, val))):
        for name, n in counts.items():
            (root / split / name).mkdir(parents=True)
            for i in range(n):
                pixels = RNG.integers(0, 256, (8, 8, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / name / f"{i}.png")
    return root


def describe(cli: Cli, root: Path, *sets: str) -> CliResult:
    more = tuple(s for pair in (("--set", x) for x in sets) for s in pair)
    args = ("data", "describe", "imagefolder", "--set", f"data.root={root}")
    return cli(*args, "--set", "data.image_size=8", *more, "--json")


# --- C4: a class whose training images all go to validation ---------------------------------


def test_a_class_the_split_leaves_no_training_image_is_refused(cli: Cli, tmp_path: Path) -> None:
    """Before: exit 0, 'a': 0 in the counts and no warning; `run` trained without class a."""
    root = folder(tmp_path / "set", {"a": 1, "b": 3})
    labels = torch.tensor([0, 1, 1, 1])  # the files in listing order: a's one image first
    seed = next(
        s for s in range(100) if 0 in holdout(Split(labels), 0.5, s)[1].labels.tolist()
    )  # a split_seed at which validation (2 of the 4) takes a's only image
    r = describe(cli, root, "data.val_fraction=0.5", f"data.split_seed={seed}")
    one_line(r, 2, "class a", "no training image", "data.split_seed", "data.val_fraction")
    # the seed it names keeps class a in training
    other = re.search(r"data\.split_seed = (\d+)", r.err)
    assert other is not None, r.err
    r = describe(cli, root, "data.val_fraction=0.5", f"data.split_seed={other[1]}")
    assert r.code == 0, r.err
    assert '"a": 1' in r.out


# --- C5: a hard link into another split or class ---------------------------------------------


@pytest.mark.parametrize("into", ["val", "class"])
def test_a_hard_link_is_refused_as_a_symbolic_link_is(cli: Cli, tmp_path: Path, into: str) -> None:
    """Before: train/b/hard.png, the same file as val/b/0.png (or as train/a/0.png), was read
    as one more training image of b, without a word."""
    root = folder(tmp_path / "set", {"a": 4, "b": 4})
    source = root / ("val/b/0.png" if into == "val" else "train/a/0.png")
    link = root / "train" / "b" / "hard.png"
    os.link(source, link)
    r = describe(cli, root, "data.val_fraction=0")
    said = "the val split" if into == "val" else "class a"
    one_line(r, 2, str(link), "hard link", str(source), said)


# --- C6: a fraction that leaves no training image ----------------------------------------------


@pytest.mark.parametrize("name", ["imagefolder", "npz"])
def test_no_training_image_names_the_fraction_and_a_value_that_leaves_some(
    cli: Cli, tmp_path: Path, name: str
) -> None:
    """Before: "dataset 'imagefolder' has no training images after the split", no key and no
    fix. imagefolder says it as it lists the folder, npz (split in load_data) after."""
    if name == "imagefolder":
        root = folder(tmp_path / "set", {"a": 4, "b": 4})
        more: tuple[str, ...] = ("--set", "data.image_size=8")
    else:
        root = tmp_path / "set.npz"
        images = RNG.integers(0, 256, (12, 1, 8, 8), dtype=np.uint8)
        np.savez(root, images=images, labels=np.arange(12) % 2)
        more = ("--set", "data.test_fraction=0.2")

    def run(fraction: str) -> CliResult:
        args = ("--set", f"data.root={root}", "--set", f"data.val_fraction={fraction}")
        return cli("data", "describe", name, *args, *more, "--json")

    r = run("0.999")
    one_line(r, 2, "data.val_fraction 0.999", "no training image")
    value = re.search(r"data\.val_fraction = (0\.\d+)", r.err)
    assert value is not None, r.err
    r = run(value[1])  # the value it names keeps both classes in training
    assert r.code == 0, r.err
    assert '"0": 0' not in r.out and '"a": 0' not in r.out and '"b": 0' not in r.out


# --- C11: an empty class name ------------------------------------------------------------------


def test_an_empty_class_name_shows_quoted(cli: Cli, tmp_path: Path) -> None:
    """Before: the per-class table's row of class '' had a blank class cell."""
    assert name_text("") == "''"
    path = tmp_path / "set.npz"
    images = RNG.integers(0, 256, (30, 1, 8, 8), dtype=np.uint8)
    np.savez(path, images=images, labels=np.arange(30) % 3, classes=np.array(["a", "", "b"]))
    r = cli("data", "describe", "npz", "--set", f"data.root={path}", "--out", str(tmp_path / "o"))
    assert r.code == 0, r.err
    rows = [line.split("│")[0].strip() for line in r.out.splitlines() if "│" in line]
    assert "''" in rows, r.out
    assert "" not in rows, r.out
