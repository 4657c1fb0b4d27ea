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
from tests.faults.test_break_it_23_data_a import describe
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
