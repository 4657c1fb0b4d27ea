"""`dlperf runs export`: real runs exported to a real MLflow SQLite tracking store and to
TensorBoard event files, each read back with the tool's own reader."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf import exporters
from dlperf.parsing import flatten
from dlperf.procs import this_process
from dlperf.store import RunStore
from dlperf.store.keys import on_global_steps
from tests.conftest import REPO, CliResult, TrainedRun

pytest.importorskip("mlflow", reason="the mlflow extra (pip install 'dlperf[mlflow]')")
pytest.importorskip("tensorboard", reason="the tensorboard extra")

pytestmark = [
    pytest.mark.timeout(120),
    # MLflow's SQL store, not dlperf, uses a loader strategy SQLAlchemy 2.1 deprecates.
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy:DeprecationWarning"),
]

Cli = Callable[..., CliResult]


@pytest.fixture(autouse=True)
def _no_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("DO_NOT_TRACK", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture
def run(tmp_path: Path, cli: Cli, trained_digits: TrainedRun) -> tuple[RunStore, int]:
    """A real finished run (checkpoint and metrics) in the store the `cli` fixture uses."""
    store, run_id, _ = trained_digits.copy_to(tmp_path)
    return store, run_id


def test_mlflow_export_reads_back(run: tuple[RunStore, int], tmp_path: Path, cli: Cli) -> None:
    from mlflow.tracking import MlflowClient

    store, run_id = run
    stored = store.get_run(run_id)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = cli("runs", "export", str(run_id), "--to", "mlflow", "--uri", uri, "--json")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    mlflow_id = doc["runs"][str(run_id)]["mlflow_run_id"]
    assert doc["to"] == "mlflow" and doc["uri"] == uri and doc["warnings"] == []

    client = MlflowClient(tracking_uri=uri)
    got = client.get_run(mlflow_id)
    assert got.info.run_name == stored.name
    assert got.info.status == "FINISHED"
    assert client.get_experiment(got.info.experiment_id).name == "dlperf"
    # Params: the flattened config, non-strings as JSON, unset keys left out (not "null").
    flat = flatten(stored.config)
    assert flat["model.weights"] is None and "model.weights" not in got.data.params
    assert got.data.params == {k: exporters.as_text(v) for k, v in flat.items() if v is not None}
    assert got.data.params["model.name"] == "smallcnn"
    assert got.data.params["train.lr"] == "0.05"
    # Tags: the flattened system info and the run's identity.
    assert got.data.tags["system.host"] == stored.system["host"]
    assert got.data.tags["system.cores"] == str(stored.system["cores"])
    assert got.data.tags["dlperf.run_id"] == str(run_id)
    assert got.data.tags["dlperf.status"] == "finished"
    assert got.data.tags["dlperf.store_id"] == store.id
    commit = stored.system["git_commit"]
    assert got.data.tags.get("mlflow.source.git.commit") == commit
    # Start and end times to the millisecond the store keeps (to the second in get_run).
    started, ended = exporters._times(store, run_id)
    assert got.info.start_time == round(started * 1000)
    assert got.info.end_time == round(ended * 1000)
    # Metrics: every stored point with its value and wall time, all on the global step: the
    # one-epoch run's validation at its last training step, and an `epoch` series.
    stored_series = exporters.metric_series(store, run_id)
    series = on_global_steps(stored_series, stored.summary["steps_per_epoch"])
    assert "train/loss" in series and "val/acc1" in series
    last_step = stored_series["train/loss"][-1][0]
    assert [s for s, _, _ in stored_series["val/acc1"]] == [1]
    assert [s for s, _, _ in series["val/acc1"]] == [last_step]
    assert [(s, v) for s, v, _ in series["epoch"]] == [(last_step, 1.0)]
    for key, points in series.items():
        history = sorted(client.get_metric_history(mlflow_id, key), key=lambda m: m.step)
        assert [(m.step, m.value) for m in history] == [(s, v) for s, v, _ in points], key
        assert [m.timestamp for m in history] == [round(w * 1000) for _, _, w in points]
        if key != "epoch":
            assert [v for _, v in store.metrics(run_id, key)] == [m.value for m in history]
    accuracy = client.get_metric_history(mlflow_id, "summary/test_accuracy")
    assert [m.value for m in accuracy] == [stored.summary["test_accuracy"]]
    # Artifacts: the checkpoint under its kind, and the whole run as JSON.
    checkpoint = Path(store.artifacts(run_id)[0]["path"])
    assert [a.path for a in client.list_artifacts(mlflow_id, "checkpoint")] == [
        f"checkpoint/{checkpoint.name}"
    ]
    local = Path(client.download_artifacts(mlflow_id, "dlperf/run.json", str(tmp_path / "dl")))
    whole = json.loads(local.read_text())
    assert whole["config"] == stored.config and whole["summary"]["test_accuracy"] > 0.5


def test_mlflow_long_values_are_cut_and_kept_whole(
    store: RunStore, mlflow_uri: str, cli: Cli
) -> None:
    """A value over MLflow's param limit is cut with a warning; run.json keeps it whole."""
    from mlflow.tracking import MlflowClient

    param_chars, _ = exporters._limits()
    long = "x" * (param_chars + 100)
    run_id = store.create_run("long", "run", {"note": long, "train": {"lr": 0.1}}, None, None)
    store.log_metrics(run_id, [("train/loss", 1, 2.0), ("train/loss", 2, math.nan)])
    uri = mlflow_uri
    result = cli("runs", "export", str(run_id), "--to", "mlflow", "--uri", uri, "--json")
    assert result.code == 0, result.err
    assert f"run {run_id}: param note cut to MLflow's {param_chars} characters" in result.err
    client = MlflowClient(tracking_uri=uri)
    got = client.get_run(json.loads(result.out)["runs"][str(run_id)]["mlflow_run_id"])
    assert got.data.params["note"] == long[: param_chars - 3] + "..."
    assert got.info.status == "RUNNING"  # the stored run never ended, and may yet
    history = client.get_metric_history(got.info.run_id, "train/loss")
    assert sorted(m.step for m in history) == [1, 2]
    assert any(math.isnan(m.value) for m in history)


def test_a_lost_run_ends_killed_in_mlflow(store: RunStore, mlflow_uri: str, cli: Cli) -> None:
    """A run whose process died without marking it (SIGKILL) reads as `lost`: MLflow gets
    KILLED with the last metric's time as its end, not a run forever RUNNING."""
    from mlflow.tracking import MlflowClient

    gone = {**this_process(), "start": -1}  # this pid, another start time: not this process
    run_id = store.create_run("doomed", "run", {}, None, {"host": "h"})
    store.update_run(run_id, system={"host": "h", "process": gone})
    store.log_metrics(run_id, [("train/loss", 1, 2.0)])
    assert store.get_run(run_id).status == "lost"
    uri = mlflow_uri
    result = cli("runs", "export", str(run_id), "--to", "mlflow", "--uri", uri, "--json")
    assert result.code == 0, result.err
    got = MlflowClient(tracking_uri=uri).get_run(
        json.loads(result.out)["runs"][str(run_id)]["mlflow_run_id"]
    )
    assert got.info.status == "KILLED" and got.data.tags["dlperf.status"] == "lost"
    wall = exporters.metric_series(store, run_id)["train/loss"][0][2]
    assert got.info.end_time == round(wall * 1000)


def test_tensorboard_export_reads_back(run: tuple[RunStore, int], tmp_path: Path, cli: Cli) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    store, run_id = run
    out = tmp_path / "tb"
    for _ in range(2):  # a second export replaces the first, it does not append to it
        result = cli("runs", "export", str(run_id), "--to", "tensorboard", "--out", str(out))
        assert result.code == 0, result.err
    directory = out / f"run-{run_id}-smallcnn"
    assert f"run-{run_id}-smallcnn" in result.out
    assert len(list(directory.glob("events.out.tfevents.*"))) == 1

    events = EventAccumulator(str(directory), size_guidance={"scalars": 0})
    events.Reload()
    keys = store.metric_keys(run_id)
    assert sorted(events.Tags()["scalars"]) == sorted([*keys, "epoch"])
    spe = store.get_run(run_id).summary["steps_per_epoch"]
    series = on_global_steps(exporters.metric_series(store, run_id), spe)
    assert [e.step for e in events.Scalars("val/acc1")] == [e.step for e in events.Scalars("epoch")]
    assert events.Scalars("val/acc1")[0].step == events.Scalars("train/loss")[-1].step
    for key in [*keys, "epoch"]:
        scalars = events.Scalars(key)
        stored = series[key]
        assert [e.step for e in scalars] == [s for s, _, _ in stored]
        assert [e.value for e in scalars] == pytest.approx([v for _, v, _ in stored], rel=1e-6)
        assert [e.wall_time for e in scalars] == pytest.approx([w for _, _, w in stored])


def test_a_tensorboard_directory_keeps_the_marks_of_a_names_letters(store: RunStore) -> None:
    # \w keeps letters of every script but not their marks: हिन्दी was run-1-ह_न_द, the
    # vowel signs gone, and Arabic's short vowels each an underscore.
    names = ["हिन्दी", "العَرَبِيَّة", "a b\tc"]
    runs = [store.get_run(store.create_run(name, "run", {})) for name in names]
    assert [exporters.event_dir_name(run)[len(f"run-{run.id}-") :] for run in runs] == [
        "हिन्दी",
        "العَرَبِيَّة",
        "a_b_c",
    ]


def test_json_maps_runs_to_where_they_went(store: RunStore, mlflow_uri: str, cli: Cli) -> None:
    ids = [store.create_run(n, "run", {"seed": i}, None, {"host": "h"}) for i, n in enumerate("ab")]
    for run_id in ids:
        store.log_metrics(run_id, [("val/acc1", 1, 0.5)])
    result = cli("runs", "export", *map(str, ids), "--to", "tensorboard", "--out", "tb", "--json")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert doc["runs"] == {
        str(ids[0]): {"dir": str(Path("tb") / f"run-{ids[0]}-a"), "metrics": 1, "points": 1},
        str(ids[1]): {"dir": str(Path("tb") / f"run-{ids[1]}-b"), "metrics": 1, "points": 1},
    }
    uri = mlflow_uri
    result = cli("runs", "export", *map(str, ids), "--to", "mlflow", "--uri", uri, "--json")
    assert result.code == 0, result.err
    runs = json.loads(result.out)["runs"]
    assert list(runs) == [str(i) for i in ids]
    assert len({r["mlflow_run_id"] for r in runs.values()}) == 2


@pytest.mark.parametrize(
    ("extra", "args", "blocked"),
    [
        ("mlflow", ["--to", "mlflow", "--uri", "sqlite:///m.db"], ("mlflow", "mlflow.tracking")),
        (
            "tensorboard",
            ["--to", "tensorboard", "--out", "tb"],
            ("tensorboard", "torch.utils.tensorboard"),
        ),
    ],
)
def test_missing_extra_is_one_line(
    extra: str,
    args: list[str],
    blocked: tuple[str, ...],
    store: RunStore,
    cli: Cli,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_id = store.create_run("a", "run", {}, None, None)
    for name in blocked:  # as if not installed: `import name` now raises ImportError
        monkeypatch.setitem(sys.modules, name, None)
    result = cli("runs", "export", str(run_id), *args)
    assert result.code == 2
    assert result.out == ""
    name = {"mlflow": "MLflow", "tensorboard": "TensorBoard"}[extra]
    assert result.err == (
        f"error: exporting to {name} needs {extra}, which is not installed: "
        f"pip install 'dlperf[{extra}]'\n"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["7", "--to", "tensorboard", "--out", "tb"],
            "no run 7 in the store (see `dlperf runs list`)",
        ),
        (["1", "--to", "wandb"], "--to must be one of mlflow, tensorboard, got 'wandb'"),
        (["1", "--to", "mlflow"], "--to mlflow needs --uri (e.g. --uri sqlite:///mlflow.db)"),
        (["1", "--to", "tensorboard"], "--to tensorboard needs --out DIR (e.g. --out tb)"),
        (
            ["1", "--to", "mlflow", "--uri", "sqlite:///m.db", "--out", "tb"],
            "--out is for --to tensorboard; MLflow takes --uri",
        ),
        (
            ["1", "--to", "tensorboard", "--out", "tb", "--uri", "sqlite:///m.db"],
            "--uri is for --to mlflow; TensorBoard takes --out DIR",
        ),
        (
            ["1", "--to", "mlflow", "--uri", "nosuch://x"],
            "MLflow at nosuch://x: ",
        ),
    ],
)
def test_bad_input_is_one_line(args: list[str], message: str, store: RunStore, cli: Cli) -> None:
    store.create_run("a", "run", {}, None, None)
    result = cli("runs", "export", *args)
    assert result.code == 2, result.err
    assert result.out == ""
    assert result.err.startswith(f"error: {message}") and result.err.count("\n") == 1, result.err


def test_mlflow_tracking_uri_env_is_the_default(
    store: RunStore, mlflow_uri: str, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = store.create_run("a", "run", {"seed": 0}, None, None)
    uri = mlflow_uri
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    result = cli("runs", "export", str(run_id), "--to", "mlflow", "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["uri"] == uri
    # ...and it is no error with --to tensorboard, where it does not apply.
    result = cli("runs", "export", str(run_id), "--to", "tensorboard", "--out", "tb")
    assert result.code == 0, result.err


def test_help_ends_with_an_example(cli: Cli) -> None:
    result = cli("runs", "export", "--help")
    assert result.code == 0
    description = result.out.split("\nArguments:")[0].rstrip()
    assert description.endswith(
        "Example: dlperf runs export 1 2 --to mlflow --uri sqlite:///mlflow.db"
    )


def test_tensorboard_export_says_only_its_own_lines(
    run: tuple[RunStore, int], tmp_path: Path
) -> None:
    """TensorBoard imports TensorFlow where it is installed (CI), which logs its start-up to
    stderr; the export's stderr holds only dlperf's own lines."""
    import os
    import subprocess

    _, run_id = run
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    done = subprocess.run(
        [sys.executable, "-m", "dlperf", "runs", "export", str(run_id), "--to", "tensorboard",
         "--out", str(tmp_path / "tb")],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    noise = [line for line in done.stderr.splitlines() if not line.startswith("saved ")]
    assert noise == [], done.stderr


def test_a_name_with_control_characters_reaches_mlflow_escaped(
    store: RunStore, mlflow_uri: str, cli: Cli
) -> None:
    from mlflow.tracking import MlflowClient

    run_id = store.create_run("evil\x1b[31m\x7fnul", "run", {}, None, None)
    uri = mlflow_uri
    result = cli("runs", "export", str(run_id), "--to", "mlflow", "--uri", uri, "--json")
    assert result.code == 0, result.err
    got = MlflowClient(tracking_uri=uri).get_run(
        json.loads(result.out)["runs"][str(run_id)]["mlflow_run_id"]
    )
    assert got.info.run_name == r"evil\x1b[31m\x7fnul"


def test_a_lost_run_without_metrics_ends_when_it_started(
    store: RunStore, mlflow_uri: str, cli: Cli
) -> None:
    """It ended at the moment of export: a run of minutes that never happened."""
    from mlflow.tracking import MlflowClient

    gone = {**this_process(), "start": -1}
    run_id = store.create_run("doomed", "run", {}, None, {"host": "h"})
    store.update_run(run_id, system={"host": "h", "process": gone})
    assert store.get_run(run_id).status == "lost"
    uri = mlflow_uri
    result = cli("runs", "export", str(run_id), "--to", "mlflow", "--uri", uri, "--json")
    assert result.code == 0, result.err
    got = MlflowClient(tracking_uri=uri).get_run(
        json.loads(result.out)["runs"][str(run_id)]["mlflow_run_id"]
    )
    started, _ = exporters._times(store, run_id)
    assert got.info.status == "KILLED"
    assert got.info.start_time == got.info.end_time == round(started * 1000)


def test_a_killed_runs_epochs_land_on_the_global_step(
    tmp_path: Path, mlflow_uri: str, cli: Cli, trained_digits: TrainedRun
) -> None:
    """A run killed before it wrote its summary has no steps_per_epoch there: its per-epoch
    metrics went to steps 1..E, squashed left of the training loss. The steps per epoch come
    from its config and data instead (1294 digits in batches of 32: 40)."""
    from mlflow.tracking import MlflowClient

    store, run_id, _ = trained_digits.copy_to(tmp_path)  # its own store: the update stays here
    store.update_run(run_id, status="killed", summary={})
    stored = exporters.metric_series(store, run_id)
    last_step = stored["train/loss"][-1][0]
    assert last_step == 40 and [s for s, _, _ in stored["val/acc1"]] == [1]
    uri = mlflow_uri
    result = cli("runs", "export", str(run_id), "--to", "mlflow", "--uri", uri, "--json")
    assert result.code == 0, result.err
    client = MlflowClient(tracking_uri=uri)
    mlflow_id = json.loads(result.out)["runs"][str(run_id)]["mlflow_run_id"]
    assert client.get_run(mlflow_id).info.status == "KILLED"
    assert [m.step for m in client.get_metric_history(mlflow_id, "val/acc1")] == [last_step]
    assert [(m.step, m.value) for m in client.get_metric_history(mlflow_id, "epoch")] == [
        (last_step, 1.0)
    ]


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        (
            "http://127.0.0.1:1",
            "error: MLflow at http://127.0.0.1:1: cannot connect to 127.0.0.1:1",
        ),
        ("sqlite:////proc/mlflow.db", "error: MLflow at sqlite:////proc/mlflow.db: cannot open"),
    ],
    ids=["refused", "unwritable"],
)
def test_an_unusable_mlflow_fails_at_once_in_one_line(
    store: RunStore, db: str, uri: str, message: str
) -> None:
    """MLflow retried: 247 s of silence for a refused connection, 37 lines of retries over
    103 s for a SQLite file it cannot open. A real process, so that the retries' sleeps and
    logging are MLflow's own; the timeout only keeps a regression from hanging the suite."""
    run_id = store.create_run("a", "run", {}, None, None)
    done = subprocess.run(
        [sys.executable, "-m", "dlperf", "runs", "export", str(run_id), "--to", "mlflow",
         "--uri", uri],
        capture_output=True, text=True, timeout=90,
        env={**os.environ, "DLPERF_DB": db, "PYTHONPATH": str(REPO / "src")},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(message) and done.stderr.count("\n") == 1, done.stderr
