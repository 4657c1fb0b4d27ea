"""The options fit, predict and regress share, and how a command reads them from its config,
in a module light enough (no NumPy, no pydantic) for the command line to import at start-up."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # dlperf.config loads pydantic: only when a command runs
    from dlperf.config import ConvergeConfig


@dataclass
class CurveOptions:
    """How fit, predict and regress read a curve and which of its points they fit."""

    x: str | None = None  # CSV column of the step; None: the row number, 1, 2, ...
    y: str | None = None  # CSV column of the metric
    metric: str = "loss"  # loss | accuracy | error
    key: str | None = None  # stored metric key; None: the metric's default
    upto: float | None = None  # fit this fraction of the points
    upto_step: float | None = None  # or the points up to this step


def load(
    config: Path | None, set_: list[str], flags: dict[str, Any]
) -> tuple[CurveOptions, ConvergeConfig]:
    """[converge] of `config` < `set_` < the flags given (not None): the curve options and
    the whole section (the target and form predict and regress read)."""
    from dlperf.config import ConvergeJob, load_job

    section = load_job(ConvergeJob, config, set_, converge=flags).converge
    opts = CurveOptions(**{f.name: getattr(section, f.name) for f in fields(CurveOptions)})
    return opts, section
