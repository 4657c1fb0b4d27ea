"""The asynchronous-SGD study's figure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: never needs a display
import matplotlib.pyplot as plt


def plot_staleness(path: Path, result: dict[str, Any]) -> None:
    """Validation accuracy per epoch, sync against async, beside the staleness histogram."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
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
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
