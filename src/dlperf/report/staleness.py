"""The asynchronous-SGD study's figure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from matplotlib.figure import Figure  # no pyplot: files only, no global state
from matplotlib.ticker import MaxNLocator

from dlperf.paths import save_figure
from dlperf.report import tight_layout

Curves = Mapping[str, Sequence[float | None]]  # validation accuracy per epoch, by mode


def draw_staleness(curves: Curves, histogram: Mapping[str, int]) -> Figure:
    """Validation accuracy per epoch, sync against async, beside the async run's staleness
    histogram (gradients per staleness, the staleness as text, as a summary stores it)."""
    fig = Figure(figsize=(9, 3.5))
    left, right = fig.subplots(1, 2)
    for mode in ("sync", "async"):
        acc = curves[mode]
        left.plot(range(1, len(acc) + 1), acc, "o-", label=mode)
    left.set_xlabel("epoch")
    left.set_ylabel("validation accuracy")
    left.legend()
    left.grid(alpha=0.3)
    right.bar([int(k) for k in histogram], list(histogram.values()))
    right.set_xlabel("staleness (updates)")
    right.set_ylabel("gradients")
    for axis in (left.xaxis, right.xaxis, right.yaxis):  # epochs, updates and counts are whole
        axis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    tight_layout(fig)
    return fig


def plot_staleness(path: Path, curves: Curves, histogram: Mapping[str, int]) -> None:
    """draw_staleness's figure, saved to `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(draw_staleness(curves, histogram), path)
