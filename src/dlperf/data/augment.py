"""Augmentation of a whole batch at once, on the training device (after airbench).

Random draws come from a CPU generator (a few numbers per image), so a run's
augmentation is the same on CPU and GPU and is reproduced exactly on resume. They reach the
device through `host_to_device`, which does not make the host wait for the device.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from dlperf.config import AugmentConfig
from dlperf.errors import UserError


def check_augment(
    cfg: AugmentConfig,
    shape: Sequence[int],
    images: int,
    name: str,
    fewer: str = "train.batch_size",
) -> None:
    """Refuse, before anything trains or is recorded, an augmentation of batches of `images`
    images of `name`'s C,H,W `shape` that blanks every image (a Cutout square covering it
    wherever it falls), lets crops be only padding, or whose M copies of a batch cannot fit
    in memory (`fewer`: what else makes the batch smaller). See AugmentConfig.refused."""
    refused = cfg.refused(shape, images, name, fewer)
    if refused:
        raise UserError(*refused)


def host_to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`t`, drawn on the host, on `device`. To CUDA from pinned memory without waiting: a
    blocking copy synchronises the stream, so the host would wait for every step queued
    before it (pinned blocks are not reused before their copy ends: torch's host allocator
    records it)."""
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def _uniform_int(n: int, high: int, g: torch.Generator, device: torch.device) -> torch.Tensor:
    return host_to_device(torch.randint(0, high, (n,), generator=g), device)


def random_crop(x: torch.Tensor, padding: int, g: torch.Generator) -> torch.Tensor:
    """Zero-pad every side by `padding`, then crop the original size at a random offset.

    Separable: gather the rows, then the columns (measured 2.5x faster on CPU than airbench's
    masked copies per offset, and 4x faster than indexing every pixel at once).
    """
    n, c, h, w = x.shape
    padded = torch.nn.functional.pad(x, (padding,) * 4)
    dy = _uniform_int(n, 2 * padding + 1, g, x.device)
    dx = _uniform_int(n, 2 * padding + 1, g, x.device)
    rows = (dy[:, None] + torch.arange(h, device=x.device))[:, None, :, None]
    padded = padded.gather(2, rows.expand(n, c, h, w + 2 * padding))
    cols = (dx[:, None] + torch.arange(w, device=x.device))[:, None, None, :]
    return padded.gather(3, cols.expand(n, c, h, w))


def random_flip(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Flip each image left-right with probability 1/2."""
    flip = host_to_device(torch.rand(x.shape[0], generator=g) < 0.5, x.device)
    return torch.where(flip[:, None, None, None], x.flip(-1), x)


def cutout(x: torch.Tensor, side: int, g: torch.Generator) -> torch.Tensor:
    """Zero a side x side square centred at a uniformly random pixel (DeVries & Taylor 2017);
    the square is clipped where it crosses the border, as in the paper."""
    n, _, h, w = x.shape
    cy = _uniform_int(n, h, g, x.device)[:, None, None]
    cx = _uniform_int(n, w, g, x.device)[:, None, None]
    y = torch.arange(h, device=x.device)[None, :, None]
    xs = torch.arange(w, device=x.device)[None, None, :]
    top, left = cy - side // 2, cx - side // 2
    inside = (y >= top) & (y < top + side) & (xs >= left) & (xs < left + side)
    return x.masked_fill(inside[:, None], 0)


def normalize(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """uint8 (or [0,255] float) images to zero-mean unit-variance floats."""
    return (x.float() / 255 - mean) / std


def augment_batch(
    x: torch.Tensor,
    y: torch.Tensor,
    cfg: AugmentConfig,
    mean: torch.Tensor,
    std: torch.Tensor,
    g: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Training transform of a uint8 batch: M copies (batch augmentation, Hoffer et al. 2019),
    each independently cropped, flipped and cut out; then normalised. Returns M*B images."""
    if cfg.batch_aug_m > 1:
        x = x.repeat(cfg.batch_aug_m, 1, 1, 1)
        y = y.repeat(cfg.batch_aug_m)
    if cfg.crop_padding:
        x = random_crop(x, cfg.crop_padding, g)
    if cfg.flip:
        x = random_flip(x, g)
    x = normalize(x, mean, std)
    # Cutout after normalisation zeroes the mean-centred value, i.e. paints the data mean,
    # as the reference implementation does.
    if cfg.cutout:
        x = cutout(x, cfg.cutout, g)
    return x, y
