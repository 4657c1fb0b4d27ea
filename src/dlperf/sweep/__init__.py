"""Recipe sweeps: a base experiment, grid and zip axes over any config key, repeats, every
point a run of one `sweep` study (`dlperf sweep`; docs/sweep.md).

Names load on first use: `python -m dlperf.sweep.worker` imports this package before the
worker takes the stop signals, and the runner's imports (the config, the store) take seconds,
in which a SIGTERM ended the worker by its default action.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["Point", "Sweep", "SweepResult", "load_sweep", "run_sweep"]

if TYPE_CHECKING:
    from dlperf.sweep.runner import SweepResult, run_sweep
    from dlperf.sweep.spec import Point, Sweep, load_sweep

_HOMES = {
    "Point": "spec",
    "Sweep": "spec",
    "load_sweep": "spec",
    "SweepResult": "runner",
    "run_sweep": "runner",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'dlperf.sweep' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"dlperf.sweep.{home}"), name)
