"""Teacher-student semi-supervised training on pseudo-labels (`dlperf distill`;
docs/distill.md)."""

from dlperf.distill.runner import DistillResult, run_distill
from dlperf.distill.select import Selection, precision, select

__all__ = ["DistillResult", "Selection", "precision", "run_distill", "select"]
