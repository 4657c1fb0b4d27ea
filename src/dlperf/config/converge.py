"""`[converge]`: how `dlperf converge fit | predict | regress` read and fit a curve."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from dlperf.config.base import Positive, Section
from dlperf.config.experiment import Job


class ConvergeConfig(Section):
    """`dlperf converge fit | predict | regress`: how a curve is read, which of its points are
    fitted, and what is predicted from them."""

    x: str | None = None
    """CSV column of the step; None: the row number, 1, 2, ..."""
    y: str | None = None
    """CSV column of the metric (needed for CSV curves)."""
    metric: Literal["loss", "accuracy", "error"] = "loss"
    """loss | accuracy | error (accuracy is fitted as 1 - accuracy)."""
    key: str | None = None
    """Stored metric key of a run; None: val/loss, val/acc1 (error: 1 - val/acc1)."""
    upto: Annotated[float, Field(gt=0, le=1)] | None = None
    """Fit the first fraction of the points, e.g. 0.3 (or give upto_step)."""
    upto_step: Positive | None = None
    """Fit the points up to this step."""
    target: float | None = None
    """predict: the value to reach, in the metric's units (an accuracy or error in [0, 1]);
    regress: with --predict, the step reaching it."""
    form: Literal["ensemble", "optimus", "power"] = "ensemble"
    """predict: ensemble (a distribution over 5 curve families) | optimus | power."""


class ConvergeJob(Job):
    converge: ConvergeConfig
