"""What dlperf.experiment.run hands its callers: `RunResult`, whose `to_dict()` is the
`dlperf run --json` document, and the `StoreSink` the loop writes a run's metrics through."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.experiment.sink import StoreSink
from dlperf.records import ContractError, RunResult, RunSummary
from dlperf.store import RunStore

SUMMARY = RunSummary(test_accuracy=0.9, epochs=2, phases={"data": 0.1}, device="cpu")


def test_a_finished_result_is_the_run_id_and_status_then_the_summary() -> None:
    result = RunResult(3, "finished", SUMMARY)
    document = result.to_dict()
    assert list(document)[:3] == ["run_id", "status", "test_accuracy"]
    assert document == {"run_id": 3, "status": "finished", **SUMMARY.to_dict()}
    assert "transfer" not in document and "error" not in document  # a run from scratch
    assert result["test_accuracy"] == 0.9 and result["run_id"] == 3
    assert RunResult.from_dict(document) == result


def test_a_failed_result_is_the_run_id_status_and_error() -> None:
    result = RunResult(4, "failed", error="loss became nan at step 2 (epoch 1)")
    document = result.to_dict()
    assert document == {"run_id": 4, "status": "failed", "error": result.error}
    assert not result.finished and RunResult.from_dict(document) == result
    with pytest.raises(KeyError):
        result["test_accuracy"]


def test_a_summary_with_its_weights_keeps_transfer() -> None:
    started = RunSummary(transfer={"weights": "run 1", "mode": "fine-tune"})
    assert started.to_dict()["transfer"] == {"weights": "run 1", "mode": "fine-tune"}
    assert RunResult(1, "finished", started)["transfer"]["weights"] == "run 1"


@pytest.mark.parametrize("document", [{"status": "finished"}, {"run_id": 1}, [1, "finished"]])
def test_a_result_without_its_run_or_status_is_refused(document: object) -> None:
    with pytest.raises(ContractError, match="RunResult"):
        RunResult.from_dict(document)


def test_the_store_sink_writes_as_it_is_given(tmp_path: Path) -> None:
    store = RunStore.open(f"sqlite:///{tmp_path / 'dlperf.db'}")
    run_id = store.create_run("r", "run", {}, None, {})
    sink = StoreSink(store, run_id)
    sink.log_metrics([("train/loss", 1, 2.5, 100.0), ("val/acc1", 1, 0.5)])
    sink.add_artifact("trace", tmp_path / "trace.json.gz")
    assert store.metrics(run_id, "train/loss") == [(1, 2.5)]
    assert store.metrics(run_id, "val/acc1") == [(1, 0.5)]
    assert store.artifacts(run_id) == [{"kind": "trace", "path": str(tmp_path / "trace.json.gz")}]
