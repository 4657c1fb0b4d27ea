"""Issue 41, eleventh break-it round, a run's end and exports: a stop signal that lands once
`dlperf run` has stored its run finished (B2), two MLflow exports into one new SQL tracking
store at once (B3), and values an export's format cannot hold (B4); each seen failing before
its fix."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import dlperf
from dlperf import exporters
from dlperf.store import RunStore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]
DEADLINE_S = 600  # generous: the machine is shared and busy

# 64 training images in batches of 32: a one-epoch run of two steps.
EXP = """
[model]
name = "smallcnn"
[data]
name = "digits"
limit = 64
[train]
epochs = 1
batch_size = 32
lr = 0.05
[run]
threads = 1
warmup_steps = 1
out_dir = "{out}"
"""


@pytest.fixture
def exp(tmp_path: Path) -> Path:
    path = tmp_path / "exp.toml"
    path.write_text(EXP.format(out=tmp_path / "runs"))
    return path


# --- B2: a stop signal once the run is stored finished ----------------------------------------


def _signal_after(monkeypatch: pytest.MonkeyPatch, place: str, sig: signal.Signals) -> None:
    """The process sends itself `sig` right after the run is marked finished (`mark`: inside
    the store's shielded mark), or as `dlperf run` starts to print the result (`print`):
    exact moments, however busy the machine."""
    if place == "mark":
        finish = RunStore.finish_run

        def finished(self: RunStore, run_id: int, status: str, **kw: Any) -> None:
            finish(self, run_id, status, **kw)
            if status == "finished":
                os.kill(os.getpid(), sig)

        monkeypatch.setattr(RunStore, "finish_run", finished)
    else:
        import dlperf.cli.run as run_cli

        show = run_cli._print_result

        def printed(result: Any) -> None:
            os.kill(os.getpid(), sig)
            show(result)

        monkeypatch.setattr(run_cli, "_print_result", printed)


@pytest.mark.parametrize(
    ("place", "sig"), [("mark", signal.SIGINT), ("print", signal.SIGINT), ("mark", signal.SIGTERM)]
)
def test_a_stop_signal_once_the_run_is_stored_finished_ends_it_as_finished(
    cli: Cli, db: str, exp: Path, monkeypatch: pytest.MonkeyPatch, place: str, sig: signal.Signals
) -> None:
    _signal_after(monkeypatch, place, sig)
    r = cli("run", str(exp))
    # before: exit 130 (143), no result printed, and after the mark "run 1 stopped; continue
    # it from its last checkpoint: dlperf run --resume 1", which answers "already finished"
    assert r.code == 0, (r.code, r.err)
    assert "test accuracy" in r.out and "Traceback" not in r.err
    assert "--resume" not in r.err and "stopped" not in r.err
    store = RunStore.open(db)
    try:
        run = store.get_run(1)
        assert run.status == "finished" and run.summary["test_accuracy"] is not None
    finally:
        store.engine.dispose()


def test_a_stop_signal_at_the_finished_mark_keeps_the_json_document(
    cli: Cli, exp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _signal_after(monkeypatch, "mark", signal.SIGINT)
    r = cli("run", str(exp), "--json")
    assert r.code == 0, (r.code, r.err)
    doc = json.loads(r.out)  # before: nothing on stdout
    assert doc["run_id"] == 1 and doc["status"] == "finished"
    assert doc["test_accuracy"] is not None


def test_a_stop_signal_before_the_mark_still_stops_the_run_with_the_hint(
    cli: Cli, db: str, exp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other side: a signal as the test set is evaluated (the epoch's checkpoint saved, the
    run not yet marked) kills the run, exit 130, and says how to resume it."""
    from dlperf.engine import train

    evaluate, calls = train.evaluate, []

    def signalled(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:  # the validation set's, then the test set's
            os.kill(os.getpid(), signal.SIGINT)
        return evaluate(*args, **kw)

    monkeypatch.setattr(train, "evaluate", signalled)
    r = cli("run", str(exp))
    assert r.code == 130, (r.code, r.err)
    assert r.err.strip().splitlines()[-1] == (
        "run 1 stopped; continue it from its last checkpoint: dlperf run --resume 1"
    )
    store = RunStore.open(db)
    try:
        assert store.get_run(1).status == "killed"
    finally:
        store.engine.dispose()


def test_a_stop_signal_as_a_resumed_run_is_marked_finished_ends_it_as_finished(
    cli: Cli, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for `--resume`: the run is this process's once it took it over."""
    path = tmp_path / "two.toml"
    path.write_text(EXP.format(out=tmp_path / "runs").replace("epochs = 1", "epochs = 2"))
    from dlperf.engine import checkpoint

    save = checkpoint.save

    def stopped(slot: Any, state: dict[str, Any]) -> None:
        save(slot, state)
        os.kill(os.getpid(), signal.SIGINT)  # raised once epoch 1's line is said

    with monkeypatch.context() as patched:
        patched.setattr(checkpoint, "save", stopped)
        r = cli("run", str(path))
    assert r.code == 130 and "dlperf run --resume 1" in r.err, (r.code, r.err)
    _signal_after(monkeypatch, "mark", signal.SIGINT)
    r = cli("run", "--resume", "1")
    # before: exit 130 and "run 1 stopped; continue it from its last checkpoint"
    assert r.code == 0, (r.code, r.err)
    assert "epoch 2/2" in r.err and "test accuracy" in r.out and "--resume" not in r.err


# --- B3: two MLflow exports into one new SQL tracking store at once ---------------------------


def _tracked(db: str, *values: float) -> None:
    """Run 1: a tracked loop logging `values` as train/loss at steps 1, 2, ..."""
    with dlperf.track("mine", {"lr": 0.1}, store=db) as run:
        for step, value in enumerate(values, 1):
            run.log(step, loss=value)


@pytest.mark.faults  # two MLflow imports and set-ups at once: over 20 s on a busy machine
def test_two_mlflow_exports_into_one_new_sqlite_store_at_once_both_succeed(
    db: str, tmp_path: Path
) -> None:
    pytest.importorskip("mlflow", reason="the mlflow extra (pip install 'dlperf[mlflow]')")
    from mlflow.tracking import MlflowClient

    _tracked(db, 1.0, 0.5)
    uri = f"sqlite:///{tmp_path / 'ml_race.db'}"
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
    env.pop("MLFLOW_TRACKING_URI", None)
    args = [sys.executable, "-m", "dlperf", "--db", db, "runs", "export", "1", "--to", "mlflow"]
    procs = [
        subprocess.Popen(
            [*args, "--uri", uri, "--json"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    said = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=DEADLINE_S)
            said.append((proc.returncode, out, err))
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    # before: one of them exit 2, "error: MLflow at sqlite:///...: (sqlite3.OperationalError)
    # duplicate column name: step" (or "table alembic_version already exists")
    for code, _, err in said:
        assert code == 0, err
    mlflow_ids = {json.loads(out)["runs"]["1"]["mlflow_run_id"] for _, out, _ in said}
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("dlperf")
    found = client.search_runs([experiment.experiment_id])
    assert {r.info.run_id for r in found} == mlflow_ids and len(mlflow_ids) == 2
    for r in found:
        history = client.get_metric_history(r.info.run_id, "train/loss")
        assert [(m.step, m.value) for m in history] == [(1, 1.0), (2, 0.5)]


# --- B4: values an export's format cannot hold ------------------------------------------------

EXTREME = (math.inf, -math.inf, 1e308, 5e-324, math.nan, 1.0)


def test_the_values_each_format_cannot_hold_are_counted_by_key() -> None:
    points = [("train/loss", v) for v in EXTREME] + [("val/loss", -1e300), ("val/acc1", 0.5)]
    mlflow = exporters.unheld(points, exporters.mlflow_held)
    assert mlflow.keys == {"train/loss": 2}
    assert mlflow.becomes == {
        "inf becomes 1.7976931348623157e+308": 1,
        "-inf becomes -1.7976931348623157e+308": 1,
    }
    tensorboard = exporters.unheld(points, exporters.float32_held)
    assert tensorboard.keys == {"train/loss": 2, "val/loss": 1}
    assert tensorboard.becomes == {
        "beyond its range becomes inf": 1,
        "beyond its range becomes -inf": 1,
        "too small becomes 0.0": 1,
    }
    # What float32 keeps is no change of kind: rounding, its own extremes, nan, zero, infinity
    kept = [3.4028234663852886e38, 1.401298464324817e-45, 0.1, -0.0, math.inf, math.nan]
    assert not exporters.unheld([("k", v) for v in kept], exporters.float32_held).keys
    assert exporters.float32_held(1e308) == math.inf and exporters.float32_held(5e-324) == 0.0
    assert exporters.mlflow_held(-math.inf) == -1.7976931348623157e308
    assert exporters.unheld([], exporters.mlflow_held).line("MLflow") is None
    assert mlflow.line("MLflow", [1]) == (
        "MLflow cannot hold 2 values of run 1's train/loss (2): inf becomes "
        "1.7976931348623157e+308 (1), -inf becomes -1.7976931348623157e+308 (1)"
    )


@pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy:DeprecationWarning")
def test_an_mlflow_export_says_which_values_it_changed(cli: Cli, db: str, mlflow_uri: str) -> None:
    pytest.importorskip("mlflow", reason="the mlflow extra (pip install 'dlperf[mlflow]')")
    from mlflow.tracking import MlflowClient

    _tracked(db, *EXTREME)
    uri = mlflow_uri  # a copy of a made store (conftest): the values said are the point
    r = cli("runs", "export", "1", "--to", "mlflow", "--uri", uri, "--json")
    assert r.code == 0, r.err
    # before: nothing said, and inf read back as 1.7976931348623157e+308
    line = (
        "MLflow cannot hold 2 values of run 1's train/loss (2): inf becomes "
        "1.7976931348623157e+308 (1), -inf becomes -1.7976931348623157e+308 (1)"
    )
    assert r.err.strip().splitlines() == [f"warning: {line}"]
    doc = json.loads(r.out)
    assert doc["warnings"] == [line]
    client = MlflowClient(tracking_uri=uri)
    history = client.get_metric_history(doc["runs"]["1"]["mlflow_run_id"], "train/loss")
    assert [m.value for m in history][:2] == [1.7976931348623157e308, -1.7976931348623157e308]


def test_a_tensorboard_export_says_which_values_it_changed(
    cli: Cli, db: str, tmp_path: Path
) -> None:
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _tracked(db, *EXTREME)
    r = cli("runs", "export", "1", "--to", "tensorboard", "--out", str(tmp_path / "tb"))
    assert r.code == 0, r.err
    # before: nothing said, and 1e308 read back as inf, 5e-324 as 0.0
    assert r.err.strip().splitlines() == [
        "warning: TensorBoard (32-bit floats) cannot hold 2 values of run 1's train/loss "
        "(2): beyond its range becomes inf (1), too small becomes 0.0 (1)"
    ]
    [directory] = (tmp_path / "tb").iterdir()
    events = EventAccumulator(str(directory))
    events.Reload()
    values = [e.value for e in events.Scalars("train/loss")]
    assert values[2:4] == [math.inf, 0.0]
