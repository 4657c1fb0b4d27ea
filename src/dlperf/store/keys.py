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


def on_global_steps(
    series: dict[str, list[tuple[int, float, float]]], steps_per_epoch: float | None
) -> dict[str, list[tuple[int, float, float]]]:
    """Every series of a run on the global-step axis, with an `epoch` series added: (the
    epoch's last global step, the epoch, the wall time its per-epoch metrics were logged),
    once per epoch. As stored when the run does not know its steps per epoch (a scaling
    point, a calibration, a loop recorded with dlperf.track)."""
    if not steps_per_epoch:
        return dict(series)
    moved = {
        key: [(round(s * steps_per_epoch) if per_epoch(key) else s, v, w) for s, v, w in points]
        for key, points in series.items()
    }
    seen: dict[int, float] = {}
    for key, points in series.items():
        if per_epoch(key):
            for epoch, _, wall in points:
                seen.setdefault(epoch, wall)
    if seen and "epoch" not in moved:
        moved["epoch"] = [(round(e * steps_per_epoch), float(e), seen[e]) for e in sorted(seen)]
    return moved
