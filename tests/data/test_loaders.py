"""dlperf.data.loaders: both batch iterators cover a split once per epoch, reproduce an epoch
from (seed, epoch) alone, agree with each other on what a batch holds, and lay batch
augmentation's copies out copy-major."""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain
from typing import Any

import pytest
import torch

from dlperf.config import AugmentConfig
from dlperf.data.loaders import (
    TensorLoader,
    TorchvisionLoader,
    _Cutout,
    channel_stats,
    epoch_generator,
)
from dlperf.data.sources import ImageData, Split

CPU = torch.device("cpu")
N, SIDE = 10, 6


def split(n: int = N) -> Split:
    """n 3-channel images, image i filled with pixel values 10*i + channel, labelled i."""
    images = torch.stack(
        [torch.stack([torch.full((SIDE, SIDE), 10 * i + c) for c in range(3)]) for i in range(n)]
    )
    return Split(torch.arange(n), images.to(torch.uint8))


MEAN, STD = (0.1, 0.2, 0.3), (0.5, 0.25, 0.125)


def tensor_loader(augment: AugmentConfig | None = None, **kw: Any) -> TensorLoader:
    return TensorLoader(
        split(),
        4,
        CPU,
        torch.tensor(MEAN).view(3, 1, 1),
        torch.tensor(STD).view(3, 1, 1),
        augment,
        **kw,
    )


def torchvision_loader(augment: AugmentConfig | None = None, **kw: Any) -> TorchvisionLoader:
    return TorchvisionLoader(split(), 4, MEAN, STD, augment, num_workers=0, pin_memory=False, **kw)


Loader = TensorLoader | TorchvisionLoader
Make = Callable[..., Loader]


def labels(loader: Loader) -> list[list[int]]:
    return [y.tolist() for _, y in loader]


def order(loader: Loader) -> list[int]:
    return list(chain.from_iterable(labels(loader)))


@pytest.mark.parametrize("make", [tensor_loader, torchvision_loader])
def test_an_epoch_covers_the_split_once_with_a_short_last_batch_unless_dropped(make: Make) -> None:
    assert len(make()) == 3 and labels(make()) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    dropped = make(drop_last=True)
    assert len(dropped) == 2 and labels(dropped) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    shuffled = make(AugmentConfig(), seed=3)
    assert [len(b) for b in labels(shuffled)] == [4, 4, 2]
    assert sorted(order(shuffled)) == list(range(N))
    assert order(shuffled) != list(range(N))  # training batches are shuffled


@pytest.mark.parametrize("make", [tensor_loader, torchvision_loader])
def test_an_epoch_is_drawn_from_seed_and_epoch_alone(make: Make) -> None:
    """A resumed run draws its epoch again without saved generator state."""
    flip = AugmentConfig(flip=True, crop_padding=1)
    first = [(x.clone(), y) for x, y in make(flip, seed=1).set_epoch(4)]
    again = [(x.clone(), y) for x, y in make(flip, seed=1).set_epoch(4)]
    assert all(
        torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        for a, b in zip(first, again, strict=True)
    )
    orders = {tuple(order(make(flip, seed=s).set_epoch(e))) for s, e in [(1, 4), (1, 5), (2, 4)]}
    assert len(orders) == 3


def test_per_sample_augmentation_ignores_workers_and_leaves_the_run_s_generator() -> None:
    """The per-sample path's augmentation comes from (seed, epoch), not from torch's global
    generator: the same with or without worker processes, and the training process's own
    draws (dropout, a model's init) are where they would be without the loader."""
    every = AugmentConfig(flip=True, crop_padding=2, cutout=2)
    torch.manual_seed(7)
    here = [(x.clone(), y) for x, y in torchvision_loader(every, seed=5).set_epoch(2)]
    after = torch.rand(3)
    torch.manual_seed(7)
    assert torch.equal(torch.rand(3), after)
    workers = TorchvisionLoader(split(), 4, MEAN, STD, every, 2, False, seed=5).set_epoch(2)
    for (xh, yh), (xw, yw) in zip(here, workers, strict=True):
        assert torch.equal(yh, yw) and torch.equal(xh, xw)
    first = next(iter(torchvision_loader(every, seed=5).set_epoch(3)))[0]
    assert not torch.equal(first, here[0][0])  # another epoch, other crops


def test_the_two_paths_normalise_alike() -> None:
    """The in-memory and the per-sample paths feed the model the same numbers."""
    for (xt, yt), (xv, yv) in zip(tensor_loader(), torchvision_loader(), strict=True):
        assert torch.equal(yt, yv)
        torch.testing.assert_close(xt, xv)
    x, _ = next(iter(tensor_loader()))
    expected = (torch.tensor([0.0, 1.0, 2.0]) / 255 - torch.tensor(MEAN)) / torch.tensor(STD)
    torch.testing.assert_close(x[0, :, 0, 0], expected)  # image 0: pixel values 0, 1, 2


@pytest.mark.parametrize("make", [tensor_loader, torchvision_loader])
def test_batch_augmentation_lays_copies_out_copy_major(make: Make) -> None:
    batches = list(make(AugmentConfig(batch_aug_m=3)))
    x, y = batches[0]
    first = y[:4].tolist()
    assert y.tolist() == first * 3 and x.shape == (12, 3, SIDE, SIDE)
    # without crop, flip or Cutout the copies are the same images
    assert torch.equal(x[:4], x[4:8]) and torch.equal(x[:4], x[8:])
    assert [len(b[1]) for b in batches] == [12, 12, 6]


def test_the_tensor_loader_keeps_the_split_on_its_device() -> None:
    loader = tensor_loader()
    assert loader.set_epoch(2) is loader and loader.epoch == 2
    x, y = next(iter(loader))
    assert (x.dtype, y.dtype, x.device) == (torch.float32, torch.int64, CPU)


def test_cutout_zeroes_one_clipped_square_of_a_copy() -> None:
    torch.manual_seed(0)
    image = torch.ones(2, 8, 8)
    seen = set()
    for _ in range(200):
        out = _Cutout(4)(image)
        rows, cols = torch.nonzero(out[0] == 0, as_tuple=True)
        assert torch.equal(out[0] == 0, out[1] == 0)  # every channel alike
        h, w = int(rows.max() - rows.min() + 1), int(cols.max() - cols.min() + 1)
        assert h <= 4 and w <= 4 and h * w == len(rows)
        seen.add(len(rows))
    assert torch.equal(image, torch.ones(2, 8, 8))  # the input is left as it was
    assert 16 in seen and min(seen) < 16  # whole squares inside, clipped ones at the edges


def test_channel_stats_sample_the_training_split() -> None:
    train = split()
    data = ImageData("t", train, train, train, N, (3, SIDE, SIDE))
    mean, std = channel_stats(data)
    pixels = train.images.float() / 255  # type: ignore[union-attr]
    assert mean == pytest.approx(pixels.mean(dim=(0, 2, 3)).tolist())
    assert std == pytest.approx(pixels.std(dim=(0, 2, 3)).tolist())
    # a constant image would divide by zero: std is floored
    flat = Split(torch.zeros(2, dtype=torch.long), torch.full((2, 1, 2, 2), 7, dtype=torch.uint8))
    mean, std = channel_stats(ImageData("f", flat, flat, flat, 1, (1, 2, 2)))
    assert mean == pytest.approx((7 / 255,)) and std == (pytest.approx(1e-3),)
    # `sample` images spread over the split, first and last included
    two = channel_stats(data, sample=2)[0]
    assert two == pytest.approx([(0 + 90) / 2 / 255 + c / 255 for c in range(3)])


def test_epoch_generators_differ_by_seed_and_epoch() -> None:
    draw = [
        int(torch.randint(1 << 30, (), generator=epoch_generator(s, e)))
        for s, e in [(0, 0), (0, 1), (1, 0), (0, 0)]
    ]
    assert draw[0] == draw[3] and len(set(draw)) == 3
