"""Figures of a data set: images per class, and a grid of sample images per class (with
their augmented copies beside them when augmentation is on)."""

from __future__ import annotations

from pathlib import Path

import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure  # no pyplot: files only, no global state

from dlperf.formatting import clip
from dlperf.parsing import name_text
from dlperf.paths import save_figure
from dlperf.report import tight_layout

MOST_BARS = 100  # classes a bar chart can show one bar each
# A class name longer than this is shortened in figures (the text output keeps it whole): a
# 200-character name left no room for the bars or images.
LABEL_CHARS = 24


def plot_counts(path: Path, name: str, classes: list[str], counts: list[int]) -> Path:
    """A bar per class; of more classes than MOST_BARS, a bar per class that has images (of
    those, the MOST_BARS with the most), as the title says: never an artist per empty class,
    which for a set of 100,000 classes kept matplotlib busy for minutes."""
    title = f"{name}: training images per class"
    shown = list(range(len(classes)))
    if len(classes) > MOST_BARS:
        shown = [i for i, n in enumerate(counts) if n > 0]
        title = f"{name}: {len(classes)} classes, {len(shown)} with images"
        if len(shown) > MOST_BARS:
            shown = sorted(sorted(shown, key=lambda i: -counts[i])[:MOST_BARS])
            title += f"; the {MOST_BARS} with the most shown"
        else:
            title += "; those shown"
    labels = [clip(name_text(classes[i]), LABEL_CHARS) for i in shown]  # 'a ' apart from a
    heights = [counts[i] for i in shown]
    fig = Figure(figsize=(max(5.0, 0.35 * len(labels)), 3.5))
    ax = fig.subplots()
    ax.bar(range(len(labels)), heights)
    ax.set_xticks(range(len(labels)), labels, rotation=90 if len(labels) > 12 else 0)
    ax.set_xlabel("class")
    ax.set_ylabel("training images")
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    tight_layout(fig)
    return save_figure(fig, path)


def plot_samples(
    path: Path,
    name: str,
    classes: list[str],
    samples: list[torch.Tensor],
    augmented: list[torch.Tensor] | None = None,
    augment: str = "",
) -> Path:
    """One row per class of its sample images (uint8 C,H,W), grey, RGB or RGBA as stored (of
    another channel count, the first channel in grey, as the title says); with
    `augmented` (per class M,n,C,H,W), each image followed by its M augmented copies."""
    copies = len(augmented[0]) if augmented else 0
    per_class = max((len(s) for s in samples), default=1) or 1
    columns = per_class * (1 + copies)
    # At least 4 inches wide: the title would not fit a grid of two or three columns.
    fig = Figure(figsize=(max(4.0, columns * 0.9), len(classes) * 0.9 + 0.4))
    axes = fig.subplots(len(classes), columns, squeeze=False)
    for row, label in enumerate(classes):
        for ax in axes[row]:
            ax.axis("off")
        for i, image in enumerate(samples[row]):
            shown = [image, *(augmented[row][:, i] if augmented else [])]
            for k, pixels in enumerate(shown):
                _show(axes[row][i * (1 + copies) + k], pixels)
        axes[row][0].set_title(clip(name_text(label), LABEL_CHARS), loc="left", fontsize=8)
    for col in range(columns if copies else 0):
        k = col % (1 + copies)
        if k:  # the first row names the copies; the originals' column shows the class
            axes[0][col].set_title("aug" if copies == 1 else f"aug {k}", fontsize=7)
    if augmented:
        what = "augmented copy" if copies == 1 else f"{copies} augmented copies"
        title = f"{name}: each training image, then its {what}\n{augment}"
    else:
        title = f"{name}: training images by class"
    channels = next((len(s[0]) for s in samples if len(s)), 1)
    if shown_channels(channels):
        title = f"{title}\n{shown_channels(channels)}"
    fig.suptitle(title, fontsize=9)
    tight_layout(fig)
    return save_figure(fig, path, dpi=100)


def shown_channels(channels: int) -> str:
    """What a figure says of images of `channels` channels: nothing for those an image shows
    as they are (1 grey, 3 RGB, 4 RGBA), else that the first channel is shown in grey."""
    return "" if channels in (1, 3, 4) else f"channel 1 of {channels} shown, in grey"


def _show(ax: Axes, image: torch.Tensor) -> None:
    # matplotlib draws 1 (grey), 3 or 4 channels; of any other count, the first, in grey
    drawn = image[:1] if shown_channels(len(image)) else image
    pixels = drawn.permute(1, 2, 0).numpy()
    # A fixed 0..255 scale: autoscaling each image apart would show Cutout's patch as a
    # change of contrast in the copy.
    ax.imshow(
        pixels.squeeze(-1) if pixels.shape[-1] == 1 else pixels, cmap="gray", vmin=0, vmax=255
    )
