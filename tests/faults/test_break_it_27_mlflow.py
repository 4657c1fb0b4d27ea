"""The twenty-seventh break-it round (P4 C): `runs export --to mlflow` under a file size limit.

An export into a SQLite tracking store that the process's file size limit (ulimit -f) stopped
said `error: MLflow at URI: (sqlite3.OperationalError) disk I/O error`, exit 2 (bad input),
naming neither the limit nor a fix. Met mid-export, MLflow's own logger printed its 44-line
SQLAlchemy traceback first. A new database whose tables the limit cut short was left behind,
and the next export into it failed with "table secrets already exists".

Now: one line naming ulimit -f, exit 1 (as `report` and the run store say it), with the runs
exported before it when met mid-export; a database the export made and could not finish is
removed. Each limit is set in the child (resource.setrlimit between fork and exec); Python
ignores SIGXFSZ, so the write past the limit fails with EFBIG. Skipped where the mlflow extra
is not installed.
"""

from __future__ import annotations

import resource
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from dlperf.store import RunStore
from tests.faults.test_break_it_13_limits import _limited
from tests.faults.test_store_faults import one_line

pytest.importorskip(
    "mlflow", reason="the mlflow extra (pip install 'dlperf[mlflow]') is not installed"
)

LIMIT = "a file size limit (ulimit -f) stopped the write"


def _store(path: Path, points: tuple[int, ...]) -> None:
    """Finished runs 1, 2, ... in the store at `path`, run i with points[i - 1] metric points."""
    store = RunStore.open(str(path))
    for i, n in enumerate(points, 1):
        run_id = store.create_run(f"r{i}", "run", {"train": {"lr": 0.1}})
        assert run_id == i
        store.log_metrics(run_id, [(f"train/k{s % 3}", s, s / 7) for s in range(n)])
        store.finish_run(run_id, "finished")
    store.engine.dispose()


def test_a_new_mlflow_database_cut_short_by_the_limit_is_named_and_removed(
    tmp_path: Path,
) -> None:
    """The limit met by MLflow's migrations of a new database, before any run is written."""
    _store(tmp_path / "dlperf.db", (3,))
    mlflow_db = tmp_path / "m" / "mlflow.db"
    mlflow_db.parent.mkdir()
    uri = f"sqlite:///{mlflow_db}"
    result = _limited(
        tmp_path, resource.RLIMIT_FSIZE, 64 * 1024, "runs", "export", "1", "--to", "mlflow",
        "--uri", uri,
    )  # fmt: skip
    one_line(result, 1, f"MLflow at {uri}: ", LIMIT, str(mlflow_db), "nothing was exported")
    assert result.err.count("\n") == 1, result.err
    # What it made of the database is gone: raising the limit and exporting again works.
    assert list(mlflow_db.parent.iterdir()) == []


@pytest.mark.faults  # MLflow's migrations here, then its import in the child: 20 s when busy
def test_an_export_stopped_by_the_limit_midway_names_it_and_the_runs_exported(
    tmp_path: Path,
) -> None:
    """The limit met by run 2's metrics, after run 1 was exported: MLflow's own logged
    traceback of the error is not printed, and run 2 is FAILED in MLflow, as the line says."""
    from mlflow.tracking import MlflowClient

    _store(tmp_path / "dlperf.db", (3, 5_000))
    mlflow_db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{mlflow_db}"
    with pytest.MonkeyPatch.context() as env:  # MLflow's tables made, so that its size is known
        env.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
        env.setenv("DO_NOT_TRACK", "true")
        MlflowClient(tracking_uri=uri).search_experiments()
    # Room for the experiment and run 1, not for run 2's 5,000 points (about a megabyte).
    cap = mlflow_db.stat().st_size + 256 * 1024
    result = _limited(
        tmp_path, resource.RLIMIT_FSIZE, cap, "runs", "export", "1", "2", "--to", "mlflow",
        "--uri", uri,
    )  # fmt: skip
    one_line(result, 1, f"MLflow at {uri}: ", LIMIT, "exporting run 2", "exported before it: 1")
    assert result.err.count("\n") == 1, result.err  # no "SQLAlchemy database error" log
    with closing(sqlite3.connect(mlflow_db)) as conn:
        runs = conn.execute("SELECT name, status FROM runs ORDER BY start_time").fetchall()
    assert runs == [("r1", "FINISHED"), ("r2", "FAILED")]
