"""The asynchronous-SGD study's figure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure  # no pyplot: files only, no global state
from matplotlib.ticker import MaxNLocator


def draw_staleness(result: dict[str, Any]) -> Figure:
    """Validation accuracy per epoch, sync against async, beside the staleness histogram."""
    fig = Figure(figsize=(9, 3.5))
    left, right = fig.subplots(1, 2)
    for mode in ("sync", "async"):
        acc = result[mode]["val_acc1"]
        left.plot(range(1, len(acc) + 1), acc, "o-", label=mode)
    left.set_xlabel("epoch")
    left.set_ylabel("validation accuracy")
    left.legend()
    left.grid(alpha=0.3)
    hist = result["async"]["staleness_histogram"]
    right.bar([int(k) for k in hist], list(hist.values()))
    right.set_xlabel("staleness (updates)")
    right.set_ylabel("gradients")
    for axis in (left.xaxis, right.xaxis, right.yaxis):  # epochs, updates and counts are whole
        axis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    return fig


def plot_staleness(path: Path, result: dict[str, Any]) -> None:
    """draw_staleness's figure, saved to `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    draw_staleness(result).savefig(path, dpi=120)
