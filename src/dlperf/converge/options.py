"""The options fit, predict and regress share, in a module light enough (no NumPy) for the
command line to import at start-up."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CurveOptions:
    """How fit, predict and regress read a curve and which of its points they fit."""

    x: str | None = None  # CSV column of the step; None: the row number, 1, 2, ...
    y: str | None = None  # CSV column of the metric
    metric: str = "loss"  # loss | accuracy | error
    key: str | None = None  # stored metric key; None: the metric's default
    upto: float | None = None  # fit this fraction of the points
    upto_step: float | None = None  # or the points up to this step
