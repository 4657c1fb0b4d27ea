"""dlperf.report.staleness: the async-SGD figure, sync against async accuracy per epoch
beside the staleness histogram, read back from the Figure; plot_staleness writes a PNG."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dlperf.report.staleness import draw_staleness, plot_staleness

CURVES = {"sync": [0.5, 0.7, 0.8], "async": [0.4, None, 0.75]}
HISTOGRAM = {"0": 10, "1": 25, "3": 5}


def test_accuracy_per_epoch_sync_then_async_from_epoch_1() -> None:
    left, _ = draw_staleness(CURVES, HISTOGRAM).axes
    sync, async_ = left.get_lines()
    assert [t.get_text() for t in left.get_legend().get_texts()] == ["sync", "async"]
    assert list(sync.get_xdata()) == [1, 2, 3]
    assert list(sync.get_ydata()) == [0.5, 0.7, 0.8]
    ydata = np.asarray(async_.get_ydata(), dtype=float)
    assert ydata[0] == 0.4 and np.isnan(ydata[1]) and ydata[2] == 0.75  # a gap, not a zero
    assert (left.get_xlabel(), left.get_ylabel()) == ("epoch", "validation accuracy")


def test_the_histogram_has_a_bar_at_each_staleness_as_a_number() -> None:
    _, right = draw_staleness(CURVES, HISTOGRAM).axes
    bars = right.patches
    assert [b.get_x() + b.get_width() / 2 for b in bars] == [0, 1, 3]  # "3" at 3, not at 2
    assert [b.get_height() for b in bars] == [10, 25, 5]
    assert (right.get_xlabel(), right.get_ylabel()) == ("staleness (updates)", "gradients")


def test_epochs_updates_and_counts_get_whole_ticks() -> None:
    fig = draw_staleness({"sync": [0.1, 0.2], "async": [0.1, 0.3]}, {"0": 1, "1": 2})
    fig.canvas.draw()
    left, right = fig.axes
    for axis in (left.xaxis, right.xaxis, right.yaxis):
        ticks = axis.get_majorticklocs()
        assert all(float(t).is_integer() for t in ticks), ticks


def test_plot_staleness_writes_a_png_making_its_folder(tmp_path: Path) -> None:
    path = tmp_path / "figs" / "staleness.png"
    plot_staleness(path, CURVES, HISTOGRAM)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
