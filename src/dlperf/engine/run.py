"""Transitional (issue 42): the names other packages still import from here. A run is built
in dlperf.engine.build and recorded by dlperf.experiment.run; once every caller imports them
from there, this module goes, and with it the one engine import of the layer above."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dlperf.engine.build import as_run, build_model, load_run_data, start_weights

if TYPE_CHECKING:
    from dlperf.config import Experiment
    from dlperf.progress import Reporter

__all__ = ["as_run", "build_model", "load_run_data", "run_experiment", "start_weights"]


def run_experiment(
    exp: Experiment,
    store: Any,  # a dlperf.store.RunStore, which the engine does not name
    reporter: Reporter | None = None,
    study_id: int | None = None,
    keep_weights: bool = False,
) -> dict[str, Any]:
    """dlperf.experiment.run.run_experiment's result as the dict its old callers read."""
    from dlperf.experiment.run import run_experiment as recorded

    return recorded(exp, store, reporter, study_id, keep_weights).to_dict()
