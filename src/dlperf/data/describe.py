"""What a data set holds, before anything trains on it: classes, images per class, split sizes,
image shape, per-channel statistics, and sample images (`dlperf data describe`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from dlperf.config import DataConfig
from dlperf.data import ImageData, load_data
from dlperf.data.sources import Split


def _read(path: str, shape: tuple[int, int, int]) -> torch.Tensor:
    """One image file as uint8 C,H,W of `shape`, as the streaming loader sizes it."""
    from PIL import Image

    with Image.open(path) as image:
        image = image.convert("L" if shape[0] == 1 else "RGB").resize((shape[2], shape[1]))
        return (
            torch.from_numpy(np.asarray(image).copy())
            .reshape(shape[1], shape[2], -1)
            .permute(2, 0, 1)
        )


def _samples(data: ImageData, split: Split, per_class: int) -> list[torch.Tensor]:
    """Up to `per_class` uint8 images C,H,W of each class, in split order."""
    picked: list[torch.Tensor] = []
    for label in range(data.num_classes):
        index = torch.nonzero(split.labels == label).flatten()[:per_class]
        if split.images is not None:
            picked.append(split.images[index])
        else:  # a streamed set: read only the files shown
            picked.append(torch.stack([_read(split.files[i], data.shape) for i in index]))
    return picked


def describe(cfg: DataConfig, out_dir: Path, per_class: int = 8) -> dict[str, Any]:
    """The data set `cfg` names, described; the class bar chart and the sample grid are
    written to `out_dir` and their paths returned under `plots`."""
    from dlperf.report.data import plot_counts, plot_samples

    out_dir.mkdir(parents=True, exist_ok=True)  # an unusable place fails before the reading
    data = load_data(cfg)
    classes = data.classes or [str(i) for i in range(data.num_classes)]
    counts = torch.bincount(data.train.labels, minlength=data.num_classes).tolist()
    plots = {
        "counts": str(plot_counts(out_dir / f"{data.name}-counts.png", data.name, classes, counts)),
        "samples": str(
            plot_samples(
                out_dir / f"{data.name}-samples.png",
                data.name,
                classes,
                _samples(data, data.train, per_class),
            )
        ),
    }
    return {
        "name": data.name,
        "classes": classes,
        "counts": dict(zip(classes, counts, strict=True)),
        "splits": {"train": len(data.train), "val": len(data.val), "test": len(data.test)},
        "image_shape": list(data.shape),
        "mean": list(data.mean),
        "std": list(data.std),
        "in_memory": data.in_memory,
        "plots": plots,
    }
