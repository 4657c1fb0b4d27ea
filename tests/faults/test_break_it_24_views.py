"""Break-it round 24, fix task I: resume, sweep points, MLflow exports and a closed stderr.

F. `dlperf run --resume` of a dlperf.track run blamed its missing checkpoint, and of a scale
   point its config ("unknown key 'experiment'"): now one line says what the run is.
E. A sweep point whose store went away was stored `failed` with a line saying it "reads as
   lost now": now its line says it was marked failed, and how to resume it.
D. `runs export --to mlflow --uri` naming another dlperf store wrote MLflow's tables into it,
   then failed ("duplicate column name: step"): now refused before anything is written.
P4-C1. stderr's reader gone (`dlperf run ... 2>&1 | head -1`): rich's SystemExit(1) failed the
   run as "the model called sys.exit(1)", and /dev/null over stdout lost its results.
P4-C4. A stop that landed in a point's import, come out as a RecursionError, stored the point
   failed instead of stopping the sweep.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect

from dlperf import track
from dlperf.config import Experiment
from dlperf.errors import StoreGone
from dlperf.experiment.run import run_experiment
from dlperf.progress import NullReporter
from dlperf.store import RunStore
from dlperf.sweep.runner import run_point
from tests.conftest import REPO, TINY, CliResult, fresh_store_url

Cli = Callable[..., CliResult]


def _tiny(root: Path, model: str = "smallcnn") -> Experiment:
    """One epoch of 64 digits (2 steps), one thread, its files under `root`."""
    return Experiment.model_validate(
        {
            "model": {"name": model},
            "data": {"name": "digits", "limit": 64},
            "train": {"epochs": 1, "batch_size": 32, "lr": 0.05},
            "run": {"threads": 1, "warmup_steps": 1, "out_dir": str(root / "runs")},
        }
    )


# F


@pytest.mark.parametrize(
    ("kind", "said"),
    [
        ("track", "run 1 is a dlperf.track run (a training loop of your own): dlperf cannot "
                  "resume it (run your loop again)"),
        ("scale", "run 1 is a scale run, not a `dlperf run` one: only those resume from a "
                  "checkpoint (run it again with dlperf scale run)"),
    ],
)  # fmt: skip
def test_resume_of_a_run_dlperf_run_did_not_make_says_what_it_is(
    cli: Cli, store: RunStore, db: str, kind: str, said: str
) -> None:
    """Before: "has no checkpoint to resume from (it stopped before its first epoch ended;
    start it again)" for a tracked loop killed after 90 steps, and "unknown key 'experiment'"
    for a scale point."""
    if kind == "track":
        with pytest.raises(KeyboardInterrupt), track("loop", {"lr": 0.1}, store=db) as run:
            run.log(1, loss=1.0)
            raise KeyboardInterrupt  # killed: a run `--resume` would otherwise take
    else:
        run_id = store.create_run("p", "scale", {"experiment": {"model": {"name": "smallcnn"}}})
        store.finish_run(run_id, "killed", error="interrupted")
    result = cli("run", "--resume", "1")
    assert (result.code, result.err) == (2, f"error: {said}\n")


# E


def test_a_sweep_point_whose_store_went_away_says_it_was_marked_failed(tmp_path: Path) -> None:
    """Before: stored `failed` with "(run 1 reads as lost now; once the store is back,
    continue it with `dlperf run --resume 1`)"."""
    # Its file not kept (writes=False): the store is as a server's, gone and back again.
    store = RunStore.open(str(tmp_path / "s.db"), writes=False)
    study = store.create_study("sw", "sweep")

    def gone(*args: object) -> None:
        raise StoreGone("run store x went away (terminated)")

    store.log_metrics = gone  # type: ignore[method-assign]
    result = run_point(_tiny(tmp_path), store, study, 0, NullReporter())
    run = store.get_run(result.run_id)
    said = (
        "run store x went away (terminated) while run 1 was recording; marked failed once the "
        "store answered again (continue it from its last checkpoint: `dlperf run --resume 1`)"
    )
    assert (result.status, result.error) == ("failed", said)
    assert (run.status, run.error) == ("failed", said)


# D


@pytest.fixture(params=["sqlite", "postgresql"])
def other_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of a second dlperf store, with one run, beside the one exported from."""
    for url in fresh_store_url(request.param, tmp_path, "other"):
        store = RunStore.open(url)
        store.finish_run(store.create_run("o", "run", {}), "finished", summary={})
        store.engine.dispose()
        yield url


def _tables(url: str) -> set[str]:
    if url.startswith("sqlite:///"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
            return {t for (t,) in conn.execute("SELECT name FROM sqlite_master")}
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_an_mlflow_export_into_another_run_store_is_refused_before_writing(
    cli: Cli, store: RunStore, other_store: str
) -> None:
    """Before: MLflow's alembic_version, experiments and params made among its tables, then
    "(sqlite3.OperationalError) duplicate column name: step" (PostgreSQL: UndefinedColumn)."""
    pytest.importorskip("mlflow")
    store.finish_run(store.create_run("r", "run", {}), "finished", summary={})
    before = _tables(other_store)
    result = cli("runs", "export", "1", "--to", "mlflow", "--uri", other_store)
    assert result.code == 2, result.err
    assert result.err.endswith(
        ": --uri names a dlperf run store; MLflow would write its tables among dlperf's (give "
        "MLflow a database of its own, e.g. --uri sqlite:///mlflow.db)\n"
    ), result.err
    assert _tables(other_store) == before


# P4-C1


@pytest.mark.faults  # a process of its own (torch's import): about 18 s on a busy machine
def test_a_closed_stderr_leaves_the_run_finished_and_its_results_on_stdout(
    tmp_path: Path,
) -> None:
    """`dlperf run ... 2> >(head -0)`: the first progress line (epoch 1's, mid-training) met
    the closed pipe."""
    db = tmp_path / "c1.db"
    (tmp_path / "tiny.toml").write_text(
        TINY.format(epochs=1).replace('name = "digits"', 'name = "digits"\nlimit = 64')
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "dlperf", "--db", str(db), "run", "tiny.toml", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stderr.close()  # the reader gone before anything is written
    out = proc.stdout.read().decode()
    assert proc.wait(timeout=300) == 0, out
    assert json.loads(out)["status"] == "finished"
    run = RunStore.open(str(db)).get_run(1)
    assert (run.status, run.error) == ("finished", None)


def test_a_system_exit_not_from_the_model_is_not_blamed_on_it(tmp_path: Path) -> None:
    """A SystemExit mid-training raised outside the model's file (rich's, on a closed pipe) is
    not "the model called sys.exit(1)": it ends the run as the exception it is."""

    class Exits(NullReporter):
        def log(self, message: str) -> None:
            raise SystemExit(1)

    store = RunStore.open(str(tmp_path / "s.db"))
    with pytest.raises(SystemExit):
        run_experiment(_tiny(tmp_path), store, Exits())
    run = store.get_run(1)
    assert (run.status, run.error) == ("failed", "SystemExit: 1")


# P4-C4


def test_a_stop_in_a_sweep_points_import_stops_the_sweep(tmp_path: Path) -> None:
    """Before: the point stored `failed` with "RecursionError: maximum recursion depth
    exceeded", by record_failure (its started and ended times equal)."""
    (tmp_path / "stopped.py").write_text(
        "try:\n"
        "    raise KeyboardInterrupt  # the stop, landing inside an import\n"
        "except KeyboardInterrupt:\n"
        "    raise RecursionError('maximum recursion depth exceeded')\n"
    )
    store = RunStore.open(str(tmp_path / "s.db"))
    study = store.create_study("sw", "sweep")
    exp = _tiny(tmp_path, f"{tmp_path / 'stopped.py'}:build")
    with pytest.raises(KeyboardInterrupt):
        run_point(exp, store, study, 0, NullReporter())
    assert store.list_runs() == []
