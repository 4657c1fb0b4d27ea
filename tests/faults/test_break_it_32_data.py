"""Break-it round 32, the user's own data and its memory (fixer C).

C1. The torchvision loader cropped an .npz's non-square images (8x12) to a W x W square: it
    trained on 12x12 images and evaluated on 8x12, exit 0, and with crop_padding 1 failed with
    a traceback. It crops each image's own H x W now, as the tensor loader does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from dlperf.config import AugmentConfig, DataConfig
from dlperf.data import load_data, make_loader

CPU = torch.device("cpu")


def oblong(tmp_path: Path, n: int = 20) -> Path:
    """An .npz of `n` 3x8x12 images (wider than tall), two classes."""
    path = tmp_path / "oblong.npz"
    images = np.random.default_rng(0).integers(0, 256, (n, 3, 8, 12), dtype=np.uint8)
    np.savez(path, images=images, labels=np.arange(n) % 2)
    return path


# --- C1: the torchvision loader's crop of non-square images ------------------------------------


@pytest.mark.parametrize("loader", ["tensor", "torchvision"])
@pytest.mark.parametrize("padding", [1, 2])
def test_non_square_images_are_cropped_to_their_own_shape(
    tmp_path: Path, loader: str, padding: int
) -> None:
    """Before, torchvision: training batches (5, 3, 12, 12) at padding 2, and "ValueError:
    Required crop size (12, 12) is larger than input image size (10, 14)" at padding 1."""
    cfg = DataConfig(name="npz", root=str(oblong(tmp_path)), loader=loader, num_workers=0)
    data = load_data(cfg)
    augment = AugmentConfig(crop_padding=padding, flip=True)
    train = make_loader(data, data.train, cfg, 5, CPU, augment)
    evaluate = make_loader(data, data.test, cfg, 5, CPU)
    assert {tuple(x.shape[1:]) for x, _ in train} == {(3, 8, 12)}
    assert {tuple(x.shape[1:]) for x, _ in evaluate} == {(3, 8, 12)}
