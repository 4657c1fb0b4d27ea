"""Break-it round 29, the user's data sets (fixer A).

C1. A gzipped MNIST idx file named without .gz (as browsers leave it) was "not an idx file
    (magic 0x1f8b0808) (replace it with a whole copy of the file)".
C2. CIFAR pickles with bytes keys (b'data', b'label_names'), as the CIFAR site's own
    unpickle(encoding='bytes') hands them over, were "names no classes under 'label_names'".
C3. A distill pool `--unlabeled imagefolder:root=pool` without image_size was told
    "data.image_size is required ... (e.g. image_size = 64)", the experiment's key.
C4. An image folder whose train/ holds no class folder was torchvision's "Couldn't find any
    class folder in X." with no fix.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from tests.conftest import CliResult, write_distill_exp
from tests.faults.test_break_it_21_data import (
    NAMES,
    TRAIN_IMAGES,
    batch,
    describe,
    write_cifar,
    write_mnist,
)
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


# --- C1: a gzipped idx file without .gz ----------------------------------------------------------


def test_a_gzipped_idx_file_without_gz_is_read_as_the_gz_it_is(cli: Cli, tmp_path: Path) -> None:
    """Before: "is not an idx file (magic 0x1f8b0808) (replace it with a whole copy of the
    file)", exit 2; a copy of the same download failed the same way."""
    raw = write_mnist(tmp_path / "m")
    plain = describe(cli, "mnist", tmp_path / "m")
    assert plain.code == 0, plain.err
    images = raw / TRAIN_IMAGES
    images.write_bytes(gzip.compress(images.read_bytes()))
    packed = describe(cli, "mnist", tmp_path / "m")
    assert packed.code == 0, packed.err
    assert json.loads(packed.out) == json.loads(plain.out)
    assert images.read_bytes()[:2] == b"\x1f\x8b"  # the user's file is left as it is
    images.write_bytes(images.read_bytes()[:-20])  # cut short: named, and said to be gzip
    one_line(
        describe(cli, "mnist", tmp_path / "m"),
        2,
        f"{images} is gzip-compressed and does not unpack (",
    )


# --- C2: CIFAR pickles with bytes keys ---------------------------------------------------------


def _bytes_keys(entry: dict[str, Any]) -> dict[bytes, Any]:
    return {key.encode(): value for key, value in entry.items()}


def test_cifar_pickles_with_bytes_keys_are_read_as_their_text(cli: Cli, tmp_path: Path) -> None:
    """Before: "batches.meta names no classes under 'label_names' ('label_names') (replace it
    with a whole copy of the file)", and with a text-keyed meta "data_batch_1 has no 'data'
    array"."""
    names = ["data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5"]
    over = {name: _bytes_keys(batch()) for name in [*names, "test_batch"]}
    meta = {b"label_names": [name.encode() for name in NAMES]}
    write_cifar(tmp_path / "c", over, meta)
    r = describe(cli, "cifar10", tmp_path / "c")
    assert r.code == 0, r.err
    described = json.loads(r.out)
    assert described["classes"] == NAMES and described["splits"]["test"] == 20


def test_a_cifar_meta_without_its_key_says_what_it_holds(cli: Cli, tmp_path: Path) -> None:
    """Before: "names no classes under 'label_names' ('label_names')": the KeyError's repr."""
    folder = write_cifar(tmp_path / "c", meta={"names": NAMES, "num_cases_per_batch": 20})
    one_line(
        describe(cli, "cifar10", tmp_path / "c"),
        2,
        f"{folder / 'batches.meta'} names no classes under 'label_names': it holds "
        "'names' and 'num_cases_per_batch'",
    )


# --- C3 and C4: image folders ------------------------------------------------------------------


def image_folder(root: Path, classes: tuple[str, ...] = ("a", "b")) -> Path:
    """root/train/<class> and root/val/<class>, two 8x8 PNGs each."""
    rng = np.random.default_rng(29)
    for split in ("train", "val"):
        for name in classes:
            (root / split / name).mkdir(parents=True)
            for i in range(2):
                pixels = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / name / f"{i}.png")
    return root


def test_a_pool_image_folder_without_image_size_names_the_pools_key(
    cli: Cli, db: str, tmp_path: Path
) -> None:
    """Before: "data.image_size is required for imagefolder (e.g. image_size = 64)", of an
    experiment that sets nothing of the kind (the pool's image size was missing)."""
    exp = write_distill_exp(tmp_path)  # the experiment's images at 6x6, as data.image_size says
    exp.write_text(exp.read_text().replace('name = "digits"', 'name = "digits"\nimage_size = 6'))
    spec = f"imagefolder:root={image_folder(tmp_path / 'pool')}"
    r = cli("distill", str(exp), "--unlabeled", spec)
    one_line(
        r,
        2,
        f"error: --unlabeled {spec}: imagefolder needs the pool's image size "
        f"(set --unlabeled {spec},image_size=6, the teacher's)",
    )


@pytest.mark.parametrize("split", ["train", "val"])
def test_a_split_folder_with_no_class_folder_says_where_to_put_the_images(
    cli: Cli, tmp_path: Path, split: str
) -> None:
    """Before: "Couldn't find any class folder in emptyif/train." and no fix."""
    root = image_folder(tmp_path / "if")
    for folder in (root / split).iterdir():
        for image in folder.iterdir():
            image.unlink()
        folder.rmdir()
    sets = ("--set", f"data.root={root}", "--set", "data.image_size=8")
    one_line(
        cli("data", "describe", "imagefolder", *sets),
        2,
        f"error: {root / split} holds no class folder "
        f"(put the images in one folder per class, {root / split}/<class>/)",
    )
