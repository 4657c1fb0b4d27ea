"""Figures of a data set: images per class, and a grid of sample images per class."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: never needs a display
import matplotlib.pyplot as plt
import torch


def plot_counts(path: Path, name: str, classes: list[str], counts: list[int]) -> Path:
    fig, ax = plt.subplots(figsize=(max(5.0, 0.35 * len(classes)), 3.5))
    ax.bar(range(len(classes)), counts)
    ax.set_xticks(range(len(classes)), classes, rotation=90 if len(classes) > 12 else 0)
    ax.set_xlabel("class")
    ax.set_ylabel("training images")
    ax.set_title(f"{name}: training images per class")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_samples(path: Path, name: str, classes: list[str], samples: list[torch.Tensor]) -> Path:
    """One row per class of its sample images (uint8 C,H,W), grey or RGB as stored."""
    columns = max((len(s) for s in samples), default=1) or 1
    fig, axes = plt.subplots(
        len(classes), columns, figsize=(columns * 0.9, len(classes) * 0.9), squeeze=False
    )
    for row, (label, images) in enumerate(zip(classes, samples, strict=True)):
        for col in range(columns):
            ax = axes[row][col]
            ax.axis("off")
            if col < len(images):
                image = images[col].permute(1, 2, 0).numpy()
                ax.imshow(image.squeeze(-1) if image.shape[-1] == 1 else image, cmap="gray")
        axes[row][0].set_title(label, loc="left", fontsize=8)
    fig.suptitle(f"{name}: training images by class")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
