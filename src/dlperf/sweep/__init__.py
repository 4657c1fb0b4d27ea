"""Recipe sweeps: a base experiment, grid and zip axes over any config key, repeats, every
point a run of one `sweep` study (`dlperf sweep`; docs/sweep.md)."""

from dlperf.sweep.runner import SweepResult, run_sweep
from dlperf.sweep.spec import Point, Sweep, load_sweep

__all__ = ["Point", "Sweep", "SweepResult", "load_sweep", "run_sweep"]
