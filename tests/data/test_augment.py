"""Properties of the batched augmentations (Cutout area, flip rate, crop bounds, M*B)."""

from __future__ import annotations

import torch

from dlperf.config import AugmentConfig
from dlperf.data.augment import augment_batch, cutout, random_crop, random_flip


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_cutout_zeroes_a_clipped_square() -> None:
    x = torch.ones(2000, 1, 32, 32)
    out = cutout(x, 8, gen())
    zeros = (out == 0).sum(dim=(1, 2, 3))
    assert int(zeros.max()) == 64  # a full 8x8 square when the centre is far from borders
    assert int(zeros.min()) >= 16  # at a corner, at least the quarter inside the image
    # Every zeroed region is one axis-aligned rectangle of side <= 8.
    for img in out[:50, 0]:
        rows, cols = torch.nonzero(img == 0, as_tuple=True)
        h, w = int(rows.max() - rows.min() + 1), int(cols.max() - cols.min() + 1)
        assert h <= 8 and w <= 8 and h * w == len(rows)
    # Paper: the centre is uniform over the image, so about (32-8+1)^2/32^2 of squares are whole.
    whole = (zeros == 64).float().mean().item()
    assert 0.5 < whole < 0.7


def test_flip_rate_and_content() -> None:
    x = torch.arange(4000 * 4, dtype=torch.float32).view(4000, 1, 1, 4)
    out = random_flip(x, gen())
    flipped = (out != x).any(dim=(1, 2, 3))
    assert torch.equal(out[flipped], x[flipped].flip(-1))
    assert torch.equal(out[~flipped], x[~flipped])
    assert 0.45 < flipped.float().mean().item() < 0.55


def test_crop_stays_within_the_padded_image() -> None:
    side, pad = 6, 2
    x = (torch.arange(side * side) + 1).view(1, 1, side, side).repeat(500, 3, 1, 1).float()
    out = random_crop(x, pad, gen())
    assert out.shape == x.shape
    offsets = set()
    padded = torch.nn.functional.pad(x[0, 0], (pad,) * 4)
    for img in out[:, 0]:
        # Each output equals one window of the zero-padded image, at an offset in [0, 2p].
        matches = [
            (dy, dx)
            for dy in range(2 * pad + 1)
            for dx in range(2 * pad + 1)
            if torch.equal(img, padded[dy : dy + side, dx : dx + side])
        ]
        assert matches
        offsets.add(matches[0])
    assert len(offsets) == (2 * pad + 1) ** 2  # every offset occurs
    assert torch.equal(out[:, 0], out[:, 2])  # channels cropped together


def test_batch_augmentation_gives_m_differently_augmented_copies() -> None:
    x = torch.randint(0, 256, (16, 3, 8, 8), dtype=torch.uint8)
    y = torch.arange(16)
    cfg = AugmentConfig(crop_padding=2, flip=True, batch_aug_m=4)
    mean, std = torch.zeros(3, 1, 1), torch.ones(3, 1, 1)
    out, labels = augment_batch(x, y, cfg, mean, std, gen())
    assert out.shape == (64, 3, 8, 8) and labels.tolist() == list(range(16)) * 4
    copies = out.view(4, 16, 3, 8, 8)
    distinct = sum(not torch.equal(copies[0, i], copies[1, i]) for i in range(16))
    assert distinct > 8


def test_normalisation_without_augmentation() -> None:
    x = torch.full((2, 1, 2, 2), 255, dtype=torch.uint8)
    out, _ = augment_batch(
        x,
        torch.zeros(2),
        AugmentConfig(),
        torch.tensor(0.5).view(1, 1, 1),
        torch.tensor(0.25).view(1, 1, 1),
        gen(),
    )
    assert torch.allclose(out, torch.full_like(out, 2.0))


def test_same_seed_same_augmentation() -> None:
    x = torch.randint(0, 256, (32, 3, 16, 16), dtype=torch.uint8)
    cfg = AugmentConfig(crop_padding=4, flip=True, cutout=8)
    m, s = torch.zeros(3, 1, 1), torch.ones(3, 1, 1)
    a, _ = augment_batch(x, torch.zeros(32), cfg, m, s, gen(7))
    b, _ = augment_batch(x, torch.zeros(32), cfg, m, s, gen(7))
    assert torch.equal(a, b)
