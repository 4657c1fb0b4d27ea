"""dlperf.report.data: a data set's figures (class counts, sample grid), with the figure
caught at savefig so that what it draws can be read back."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from matplotlib.figure import Figure

from dlperf.report import data


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Figure]:
    """The figures saved, none rendered (each file written empty, in tmp_path)."""
    monkeypatch.chdir(tmp_path)
    saved: list[Figure] = []
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: saved.append(fig))
    return saved


def test_counts_draw_a_bar_per_class(drawn: list[Figure], tmp_path: Path) -> None:
    path = tmp_path / "c.png"
    assert data.plot_counts(path, "digits", ["0", "1", "2"], [5, 0, 7]) == path
    ax = drawn[0].axes[0]
    assert [p.get_height() for p in ax.patches] == [5, 0, 7]
    assert ax.get_title() == "digits: training images per class"


def test_of_many_classes_only_those_with_images_get_a_bar(drawn: list[Figure]) -> None:
    classes = [f"c{i}" for i in range(150)]
    counts = [1 if i % 3 == 0 else 0 for i in range(150)]  # 50 with images
    data.plot_counts(Path("x.png"), "big", classes, counts)
    ax = drawn[0].axes[0]
    assert len(ax.patches) == 50
    assert ax.get_title() == "big: 150 classes, 50 with images; those shown"


def test_of_more_than_most_bars_with_images_the_most_counted_are_shown(
    drawn: list[Figure],
) -> None:
    counts = [i + 1 for i in range(data.MOST_BARS + 20)]  # class i has i + 1 images
    data.plot_counts(Path("x.png"), "big", [str(i) for i in range(len(counts))], counts)
    ax = drawn[0].axes[0]
    heights = [p.get_height() for p in ax.patches]
    assert heights == list(range(21, data.MOST_BARS + 21))  # the 100 largest, in class order
    assert ax.get_title().endswith(f"; the {data.MOST_BARS} with the most shown")


@pytest.mark.parametrize(("channels", "said"), [(1, ""), (3, ""), (4, ""), (2, "channel 1 of 2")])
def test_shown_channels(channels: int, said: str) -> None:
    assert data.shown_channels(channels).startswith(said)
    if said:
        assert data.shown_channels(channels) == "channel 1 of 2 shown, in grey"


def test_samples_grid_has_a_row_per_class_and_the_copies_beside_each_image(
    drawn: list[Figure],
) -> None:
    images = [torch.full((2, 1, 4, 4), 100, dtype=torch.uint8) for _ in range(2)]  # 2 per class
    augmented = [torch.zeros((3, 2, 1, 4, 4), dtype=torch.uint8) for _ in range(2)]  # M=3
    data.plot_samples(Path("s.png"), "digits", ["0", "1"], images, augmented, "cutout=4")
    fig = drawn[0]
    assert len(fig.axes) == 2 * 2 * (1 + 3)
    assert sum(len(ax.images) for ax in fig.axes) == 16  # every cell drawn
    assert fig.axes[0].get_title(loc="left") == "0"
    assert [fig.axes[k].get_title() for k in (1, 2, 3)] == ["aug 1", "aug 2", "aug 3"]
    title = fig.get_suptitle()
    assert title == "digits: each training image, then its 3 augmented copies\ncutout=4"
    first = fig.axes[0].images[0]
    assert first.get_clim() == (0, 255)  # a fixed scale: Cutout's patch is not rescaled


def test_samples_of_other_channel_counts_show_the_first_in_grey(drawn: list[Figure]) -> None:
    data.plot_samples(Path("s.png"), "npz", ["a"], [torch.zeros((1, 2, 4, 4), dtype=torch.uint8)])
    fig = drawn[0]
    assert fig.get_suptitle() == "npz: training images by class\nchannel 1 of 2 shown, in grey"
    assert fig.axes[0].images[0].get_array().shape == (4, 4)
