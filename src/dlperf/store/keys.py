"""The step axis of a stored metric.

Per-step keys (train/loss, train/lr, ...) are stored at the global step; per-epoch keys
(epoch/*, val/*, phase/*) at the epoch number 1..E. A run's summary `steps_per_epoch` joins
the two: epoch e ends at global step e * steps_per_epoch. Whatever shows a run's metrics on
one axis (an export, a data frame) puts them all on the global step this way.
"""

from __future__ import annotations

PER_EPOCH = ("epoch/", "val/", "phase/")  # prefixes of keys stored at step = epoch


def per_epoch(key: str) -> bool:
    return key.startswith(PER_EPOCH)


def global_step(key: str, step: int, steps_per_epoch: float | None) -> int:
    """`step` of `key` on the global-step axis; as stored when the run does not know its
    steps per epoch (a scaling point, a calibration)."""
    if not per_epoch(key) or not steps_per_epoch:
        return step
    return round(step * steps_per_epoch)


def epoch_points(
    series: dict[str, list[tuple[int, float, float]]], steps_per_epoch: float | None
) -> list[tuple[int, float, float]]:
    """An `epoch` series for a run exported on the global step: (the epoch's last global step,
    the epoch, the wall time its per-epoch metrics were logged), once per epoch."""
    if not steps_per_epoch:
        return []
    seen: dict[int, float] = {}
    for key, points in series.items():
        if per_epoch(key):
            for epoch, _, wall in points:
                seen.setdefault(epoch, wall)
    return [(round(e * steps_per_epoch), float(e), seen[e]) for e in sorted(seen)]


def on_global_steps(
    series: dict[str, list[tuple[int, float, float]]], steps_per_epoch: float | None
) -> dict[str, list[tuple[int, float, float]]]:
    """Every series of a run on the global-step axis, with the `epoch` series added."""
    moved = {
        key: [(global_step(key, s, steps_per_epoch), v, w) for s, v, w in points]
        for key, points in series.items()
    }
    epochs = epoch_points(series, steps_per_epoch)
    if epochs and "epoch" not in moved:
        moved["epoch"] = epochs
    return moved
