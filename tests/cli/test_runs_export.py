"""dlperf.cli.runs_export: `dlperf runs export`'s option checks, and what it prints of an
export (the exporters themselves replaced by fakes: tests/test_exporters.py runs them)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dlperf import exporters
from dlperf.cli import app
from dlperf.store import RunStore
from tests.cli.test_app import one_line_error
from tests.conftest import CliResult


def test_help_ends_with_an_example() -> None:
    done = CliRunner().invoke(app, ["runs", "export", "--help"])
    assert done.exit_code == 0
    assert "Example: dlperf runs export 1 2 --to mlflow" in " ".join(done.output.split())


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--to", "csv"], "--to must be one of mlflow, tensorboard, got 'csv'"),
        (["--to", "mlflow"], "--to mlflow needs --uri (e.g. --uri sqlite:///mlflow.db)"),
        (["--to", "mlflow", "--uri", "x", "--out", "tb"], "--out is for --to tensorboard"),
        (["--to", "tensorboard"], "--to tensorboard needs --out DIR"),
        (["--to", "tensorboard", "--out", "tb", "--uri", "u"], "--uri is for --to mlflow"),
        # round 42, T1 C1: MLflow's experiment name was dropped without a word, exit 0
        (["--to", "tensorboard", "--out", "tb", "--experiment", "e"], "--experiment is for"),
    ],
)
def test_option_checks_are_one_line_and_exit_2(
    cli: Callable[..., CliResult], args: list[str], text: str
) -> None:
    one_line_error(cli("runs", "export", "1", *args), text)


def test_mlflow_tracking_uri_in_the_environment_does_not_count_as_uri_for_tensorboard(
    cli: Callable[..., CliResult], store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = store.create_run("r", "train", {})
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///m.db")
    seen: list[Any] = []

    def fake(store: RunStore, run_ids: list[int], out: Path) -> dict[str, Any]:
        seen.append((run_ids, out))
        runs = {str(run_ids[0]): {"dir": str(out / "run-1-r"), "metrics": 2, "points": 7}}
        return {"warnings": ["one warning"], "runs": runs}

    monkeypatch.setattr(exporters, "export_tensorboard", fake)
    result = cli("runs", "export", str(run_id), "--to", "tensorboard", "--out", "tb")
    assert result.code == 0, result.err
    assert seen == [([run_id], Path("tb"))]
    assert result.err.strip() == "warning: one warning"
    lines = result.out.splitlines()
    assert lines[0] == "exported to TensorBoard: tensorboard --logdir tb"
    assert lines[-1].split() == [str(run_id), "│", "tb/run-1-r", "│", "2", "│", "7"]


def test_mlflow_json_is_the_exporters_result(
    cli: Callable[..., CliResult], store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = store.create_run("r", "train", {})
    result_of = {"warnings": [], "uri": "sqlite:///m.db", "experiment_id": "1", "runs": {}}
    calls: list[Any] = []

    def fake(store: RunStore, run_ids: list[int], uri: str, experiment: str) -> dict[str, Any]:
        calls.append((run_ids, uri, experiment))
        return result_of

    monkeypatch.setattr(exporters, "export_mlflow", fake)
    result = cli(
        "runs", "export", str(run_id), "--to", "mlflow", "--uri", "sqlite:///m.db", "--json"
    )
    assert result.code == 0, result.err
    assert calls == [([run_id], "sqlite:///m.db", "dlperf")]
    assert json.loads(result.out) == result_of
