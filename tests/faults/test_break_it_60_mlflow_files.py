"""Found while checking round 59's Left item (MLflow under PYTHONWARNINGS=error): every run that
trained in epochs failed to export to MLflow's file store (a directory: MLflow 2's default,
MLflow 3's with MLFLOW_ALLOW_FILE_STORE=true): "[Errno 21] Is a directory: .../metrics/epoch",
exit 2, its MLflow run left FAILED. The file store keeps each metric in a file named by its
key, folders split at '/', and the export adds an `epoch` series beside the run's own epoch/*
keys. Now that series is left out there, with a warning; a clash among a run's own keys
('loss' beside 'loss/val') is refused before anything is written.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf import exporters
from dlperf.store import RunStore
from tests.conftest import CliResult, TrainedRun
from tests.faults.test_store_faults import one_line

pytest.importorskip("mlflow", reason="the mlflow extra (pip install 'dlperf[mlflow]')")

pytestmark = [
    pytest.mark.timeout(120),
    # MLflow's SQL store, not dlperf, uses a loader strategy SQLAlchemy 2.1 deprecates.
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy:DeprecationWarning"),
]

Cli = Callable[..., CliResult]


@pytest.fixture(autouse=True)
def _file_store_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 refuses directories
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def test_a_run_in_epochs_exports_to_a_file_store(
    cli: Cli, tmp_path: Path, trained_digits: TrainedRun
) -> None:
    from mlflow.tracking import MlflowClient

    store, run_id, _ = trained_digits.copy_to(tmp_path)  # in the store `cli` uses
    per_epoch = store.get_run(run_id).summary["steps_per_epoch"]
    uri = str(tmp_path / "mlruns")
    done = cli("runs", "export", str(run_id), "--to", "mlflow", "--uri", uri, "--json")
    assert done.code == 0, done.err
    doc = json.loads(done.out)
    assert any("epoch series is left out" in w for w in doc["warnings"]), doc["warnings"]
    client = MlflowClient(tracking_uri=uri)
    got = client.get_run(doc["runs"][str(run_id)]["mlflow_run_id"])
    assert got.info.status == "FINISHED"
    assert "epoch" not in got.data.metrics and "epoch/lr" in got.data.metrics
    stored = [v for _, v, _ in exporters.metric_series(store, run_id)["val/acc1"]]
    history = client.get_metric_history(got.info.run_id, "val/acc1")
    assert [(m.step, m.value) for m in history] == [
        ((e + 1) * per_epoch, v) for e, v in enumerate(stored)
    ]  # each epoch's at its last step, as in a database


def test_a_database_keeps_the_epoch_series(
    cli: Cli, tmp_path: Path, mlflow_uri: str, trained_digits: TrainedRun
) -> None:
    """Only the file store leaves it out."""
    from mlflow.tracking import MlflowClient

    store, run_id, _ = trained_digits.copy_to(tmp_path)
    done = cli("runs", "export", str(run_id), "--to", "mlflow", "--uri", mlflow_uri, "--json")
    assert done.code == 0, done.err
    assert not any("epoch series" in w for w in json.loads(done.out)["warnings"])
    mlflow_id = json.loads(done.out)["runs"][str(run_id)]["mlflow_run_id"]
    history = MlflowClient(tracking_uri=mlflow_uri).get_metric_history(mlflow_id, "epoch")
    epochs = len(exporters.metric_series(store, run_id)["val/acc1"])
    assert [m.value for m in history] == [float(e) for e in range(1, epochs + 1)]


def test_a_runs_own_clashing_keys_are_refused_before_anything_is_written(
    cli: Cli, store: RunStore, tmp_path: Path
) -> None:
    run_id = store.create_run("tracked", "track", {})
    store.log_metrics(run_id, [("loss", 1, 1.0), ("loss/val", 1, 2.0)])
    store.finish_run(run_id, summary={})
    uri = tmp_path / "mlruns"
    done = cli("runs", "export", str(run_id), "--to", "mlflow", "--uri", str(uri))
    one_line(done, 2, "metrics 'loss' and 'loss/val' cannot both be kept in MLflow's file store")
    assert "sqlite:///mlflow.db" in done.err
    assert not any(p.is_file() and "loss" in p.parts for p in uri.rglob("*"))
