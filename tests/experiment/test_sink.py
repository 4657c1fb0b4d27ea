"""dlperf.experiment.sink: the store's metric sink for a run, and a run failed softly with
the loop's or the step's message; with a fake store and a fake recording."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlperf.engine.loop import Diverged
from dlperf.engine.step import WrongOutput
from dlperf.experiment.sink import StoreSink, failed_softly
from dlperf.records import FAILED


class FakeStore:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def log_metrics(self, run_id: int, rows: list[Any]) -> None:
        self.calls.append(("metrics", run_id, rows))

    def add_artifact(self, run_id: int, kind: str, path: Path) -> None:
        self.calls.append(("artifact", run_id, kind, path))


class FakeRecording:
    id = 7

    def __init__(self) -> None:
        self.failed: list[str] = []

    def fail(self, error: str) -> None:
        self.failed.append(error)


def test_the_sink_writes_to_its_run() -> None:
    store = FakeStore()
    sink = StoreSink(store, 3)  # type: ignore[arg-type]
    rows = [("train/loss", 1, 0.5), ("lr", 1, 0.1)]
    sink.log_metrics(rows)
    sink.add_artifact("checkpoint", Path("c.pt"))
    assert store.calls == [("metrics", 3, rows), ("artifact", 3, "checkpoint", Path("c.pt"))]


def test_a_diverged_run_is_marked_failed_with_the_loops_line() -> None:
    record = FakeRecording()
    error = Diverged(step=5, epoch=1, value=float("nan"), lr=0.5)
    result = failed_softly(record, error)  # type: ignore[arg-type]
    assert record.failed == [str(error)] and "0.5" in str(error)
    assert (result.run_id, result.status, result.error) == (7, FAILED, str(error))
    assert result.summary is None
    assert result.to_dict()["status"] == "failed"


def test_a_wrong_output_is_marked_failed_the_same_way() -> None:
    record = FakeRecording()
    result = failed_softly(record, WrongOutput("the model returned 3 columns"))  # type: ignore[arg-type]
    assert record.failed == ["the model returned 3 columns"]
    assert result.error == "the model returned 3 columns"
