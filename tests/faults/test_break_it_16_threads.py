"""Break-it round 16: `dlperf.run` from two threads of one process. A run seeds torch's
process-wide generator and sets its process-wide thread count, so two runs at once drew
their weights and dropout masks from one interleaved stream: three runs of one config (one
config hash, seed 0) stored three different accuracies, with no warning. Runs of a process
now take turns, and each gives what it gives alone."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import dlperf
from dlperf.records import RunResult

EXPERIMENT: dict[str, Any] = {
    "model": {"name": "smallcnn"},  # its dropout draws from torch's generator every step
    "data": {"name": "digits", "limit": 128},
    "train": {"epochs": 1, "lr": 0.05},
    "run": {"threads": 1, "checkpoint": False},
}


def _outcome(store: dlperf.Store, result: RunResult) -> tuple[Any, ...]:
    """What a run of the experiment trained to: its status, test accuracy and losses."""
    assert result.summary is not None, result.error
    losses = store.metrics(result.run_id, "train/loss")
    return result.status, result.summary.test_accuracy, result.summary.test_loss, losses


def test_two_runs_from_two_threads_give_what_one_run_alone_gives(tmp_path: Path) -> None:
    store = dlperf.Store(tmp_path / "runs.db")
    alone = _outcome(store, dlperf.run(EXPERIMENT, store=store))
    start = threading.Barrier(2)
    results: list[RunResult] = []
    errors: list[str] = []

    def train() -> None:
        start.wait(timeout=60)  # both begin together
        try:
            results.append(dlperf.run(EXPERIMENT, store=store))
        except Exception as e:  # what the thread met, kept for the assertion
            errors.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=train) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert [_outcome(store, r) for r in results] == [alone, alone]
    assert alone[0] == "finished"
