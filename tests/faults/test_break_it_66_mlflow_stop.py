"""An MLflow export stopped mid-write (round 65's Left list, tester Y3's C2).

Before: Ctrl-C (or SIGTERM) while `runs export --to mlflow` wrote a run's metrics left that
MLflow run FAILED, holding what was written, and the command said nothing of it: exit 130,
no line; the user found a half run in MLflow later, beside the whole one a second export
made. Now the part-written run is marked KILLED (MLflow's status for a run a user stopped),
and the stop names it, the run it holds part of, the runs exported whole before it, and what
to do.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

pytest.importorskip("mlflow", reason="the mlflow extra")


def test_a_stopped_mlflow_export_names_the_run_it_left_part_written(
    store: RunStore, mlflow_uri: str, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    ids = [store.create_run(f"r{i}", "run", {"seed": i}, None, {"host": "h"}) for i in range(2)]
    for run_id in ids:
        store.log_metrics(run_id, [("train/loss", step, 1.0 / step) for step in range(1, 4)])
        store.finish_run(run_id, "finished")
    logged = MlflowClient.log_batch
    written: list[str] = []  # the MLflow runs written to, in order

    def stopped_midway(self: Any, run_id: str, **parts: Any) -> None:
        # The stop signal lands as the second run's metrics are written, its params written
        written.extend([run_id][: run_id not in written])
        if parts.get("metrics") and len(written) == 2:
            raise KeyboardInterrupt
        logged(self, run_id, **parts)

    monkeypatch.setattr(MlflowClient, "log_batch", stopped_midway)
    result = cli("runs", "export", *map(str, ids), "--to", "mlflow", "--uri", mlflow_uri)
    assert result.code == 130, result.err
    monkeypatch.setattr(MlflowClient, "log_batch", logged)

    client = MlflowClient(tracking_uri=mlflow_uri)
    [experiment] = [e for e in client.search_experiments() if e.name == "dlperf"]
    mlflow_runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert sorted(mlflow_runs) == ["r0", "r1"]
    assert mlflow_runs["r0"].info.status == "FINISHED"
    half = mlflow_runs["r1"]
    assert half.info.status == "KILLED"
    assert half.data.params and not half.data.metrics  # part written: its params alone
    assert result.err.strip().splitlines()[-1] == (
        f"stopped exporting run {ids[1]}: MLflow run {half.info.run_id} holds the part written "
        f"before the stop, marked KILLED; runs exported whole before it: {ids[0]} (export run "
        f"{ids[1]} again for a whole one, and delete the part: mlflow runs delete --run-id "
        f"{half.info.run_id})"
    )


def test_a_second_ctrl_c_as_the_part_is_marked_still_names_it(
    store: RunStore, mlflow_uri: str, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Round 67 (tester W3's cause 1): a second SIGINT landing as the part-written run was
    being marked KILLED cut the mark (the run left RUNNING) and raised an interrupt without
    the first's note: exit 130 and no line. The mark now holds one more signal, and the
    second's interrupt, which holds the first, still names the run."""
    from mlflow.tracking import MlflowClient

    run_id = store.create_run("r0", "run", {"seed": 0}, None, {"host": "h"})
    store.log_metrics(run_id, [("train/loss", 1, 1.0)])
    store.finish_run(run_id, "finished")
    logged, marked = MlflowClient.log_batch, MlflowClient.set_terminated

    def stopped_midway(self: Any, mlflow_run: str, **parts: Any) -> None:
        if parts.get("metrics"):  # a real first Ctrl-C as the metrics are written
            os.kill(os.getpid(), signal.SIGINT)
        logged(self, mlflow_run, **parts)

    def stopped_again(self: Any, mlflow_run: str, **how: Any) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # the second, as the part is marked
        marked(self, mlflow_run, **how)

    monkeypatch.setattr(MlflowClient, "log_batch", stopped_midway)
    monkeypatch.setattr(MlflowClient, "set_terminated", stopped_again)
    result = cli("runs", "export", str(run_id), "--to", "mlflow", "--uri", mlflow_uri)
    assert result.code == 130, result.err
    monkeypatch.setattr(MlflowClient, "log_batch", logged)
    monkeypatch.setattr(MlflowClient, "set_terminated", marked)

    client = MlflowClient(tracking_uri=mlflow_uri)
    [experiment] = [e for e in client.search_experiments() if e.name == "dlperf"]
    [half] = client.search_runs([experiment.experiment_id])
    assert half.info.status == "KILLED"
    assert f"stopped exporting run {run_id}: MLflow run {half.info.run_id} holds" in result.err
