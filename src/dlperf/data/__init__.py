"""Data sets and batch loaders.

`load_data(cfg, reporter)` reads a registered data set once into uint8 tensors (or a file list
to stream), resized to `data.image_size` when set, with deterministic splits and per-channel
statistics (of the resized images), telling `reporter` of the long work (an image folder's
listing and decoding); `make_loader` turns a split into batches for training or evaluation.
"""

from __future__ import annotations

import torch

from dlperf.config import AugmentConfig, DataConfig
from dlperf.data.loaders import TensorLoader, TorchvisionLoader, channel_stats, crowded_workers
from dlperf.data.sources import (
    DATASETS,
    ImageData,
    Split,
    holdout,
    imagefolder,
    no_training_images,
    resize,
    unread_keys,
    untrained_classes,
)
from dlperf.errors import UserError
from dlperf.parsing import did_you_mean, quoted
from dlperf.progress import Reporter

Loader = TensorLoader | TorchvisionLoader

__all__ = ["DATASETS", "ImageData", "Loader", "Split", "load_data", "make_loader"]


def load_data(cfg: DataConfig, reporter: Reporter | None = None) -> ImageData:
    reader = DATASETS.get(cfg.name)
    if reader is None:
        hint = did_you_mean(cfg.name, DATASETS, f"choose one of {', '.join(DATASETS)}", quote=True)
        raise UserError(f"unknown dataset {quoted(cfg.name)}", hint)
    # The one reader whose work is long enough to report: an image folder's files, listed and
    # decoded one by one (minutes for 10^5); the others read a few arrays.
    data = imagefolder(cfg, reporter) if reader is imagefolder else reader(cfg)
    data.notes += unread_keys(cfg)
    if _starts_workers(cfg, data) and (crowded := crowded_workers(cfg.num_workers)):
        data.notes.append(crowded)  # said where the data's notes are, once a run
    drawn = data.train
    if cfg.holdout:
        data.train, data.unlabeled = holdout(data.train, cfg.holdout, cfg.split_seed + 2)
    held = data.train
    if cfg.limit is not None:
        data.train = data.train.subset(torch.arange(min(cfg.limit, len(data.train))))
    if len(data.train) == 0:
        raise no_training_images(data, cfg)
    # A class the model would never see, yet the accuracy counts: kept for
    # `too_few_classes`, which training refuses and `data describe` warns of. Not raised
    # here: a distillation's unlabelled pool is read here too, and uses no label.
    data.untrained = untrained_classes(data, cfg, drawn, held)
    if cfg.image_size is not None and data.in_memory:
        data = resize(data, cfg.image_size, cfg.max_memory_gb)
    channels = data.shape[0]
    for key in ("mean", "std"):
        given = getattr(cfg, key)
        if given is not None and len(given) != channels:
            raise UserError(
                f"data.{key} has {len(given)} values; {cfg.name} has {channels} channels"
            )
    if cfg.mean is None or cfg.std is None:
        mean, std = channel_stats(data)
    data.mean = tuple(cfg.mean) if cfg.mean is not None else mean
    data.std = tuple(cfg.std) if cfg.std is not None else std
    return data


def _starts_workers(cfg: DataConfig, data: ImageData) -> bool:
    """Whether `make_loader` gives `data`'s splits DataLoader workers."""
    return (cfg.loader == "torchvision" or not data.in_memory) and cfg.num_workers > 0


def make_loader(
    data: ImageData,
    split: Split,
    cfg: DataConfig,
    batch_size: int,
    device: torch.device,
    augment: AugmentConfig | None = None,
    seed: int = 0,
) -> Loader:
    """Training batches when `augment` is given (shuffled, augmented, incomplete last batch
    dropped), evaluation batches otherwise."""
    train = augment is not None
    if cfg.loader == "tensor" and data.in_memory:  # no workers (`_starts_workers`)
        mean, std = (torch.tensor(stats).view(-1, 1, 1) for stats in (data.mean, data.std))
        return TensorLoader(split, batch_size, device, mean, std, augment, train, seed)
    return TorchvisionLoader(
        split,
        batch_size,
        data.mean,
        data.std,
        augment,
        cfg.num_workers,
        pin_memory=device.type == "cuda",
        side=data.shape[-1],
        drop_last=train,
        seed=seed,
    )
