"""The store's side of the training loop: the `MetricSink` that writes a run's metrics as
the loop logs them (a crash loses at most the steps not yet flushed), and the one way a
run ends whose loss diverged or whose model returned the wrong shape."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dlperf.engine.loop import Diverged, Row
from dlperf.engine.step import WrongOutput
from dlperf.records import FAILED, RunResult
from dlperf.store import Recording, RunStore


@dataclass
class StoreSink:
    """The training loop's metric sink for run `run_id` of `store`."""

    store: RunStore
    run_id: int

    def log_metrics(self, rows: list[Row]) -> None:
        self.store.log_metrics(self.run_id, rows)

    def add_artifact(self, kind: str, path: Path) -> None:
        self.store.add_artifact(self.run_id, kind, path)


def failed_softly(record: Recording, error: Diverged | WrongOutput) -> RunResult:
    """Mark `record` failed with the loop's or the step's message, without raising: the
    command goes on (a sweep's next point, a study's other run) and says so in its result."""
    record.fail(str(error))
    return RunResult(record.id, FAILED, error=str(error))
