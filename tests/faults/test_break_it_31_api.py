"""Break-it round 31, fixer B: what the Python API does to the caller's objects and keys.

C3 (P1). `dlperf.analyze(model)` ran the caller's own forward hooks (and global module hooks)
on its meta copy: an activation the caller captured was replaced by a meta tensor, a counter
moved, and a hook reading values was blamed on the model's forward or its input.
C2 (P3). A tracked run's `final` kept -0.0 where its stored metric is 0.0.
C4 (P3). Metric, phase and config keys holding a control or format character (tab, newline,
CR, U+200F, U+200B) were stored, then shown escaped and could not be named again.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import dlperf
from tests.conftest import CliResult

Cli = Callable[..., CliResult]


# --- C2: -0.0 ---------------------------------------------------------------------------------


def test_c2_final_of_minus_zero_is_the_stored_zero(db: str) -> None:
    """Before: summary final {'m/d': -0.0} over metrics [(1, 0.0)]."""
    with dlperf.track("z", store=db) as run:
        run.log(1, **{"m/d": -0.0})
    store = dlperf.Store(db)
    final = store.run(run.id).summary["final"]["m/d"]
    ((_, stored),) = store.metrics(run.id, "m/d")
    assert str(final) == str(stored) == "0.0"
