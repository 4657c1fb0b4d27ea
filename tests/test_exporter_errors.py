"""An MLflow tracking URI that is a directory (a plain path or file:) is said for what it is,
in one line: a path that cannot be written is named with the reason, before MLflow is even
imported, rather than blamed on MLflow 3's "maintenance mode" of its file store; a usable
directory, which MLflow 3 refuses as a store, gets the URI to use instead. Real exports of a
stored run through the CLI; skipped where the mlflow extra is not installed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult

pytest.importorskip(
    "mlflow", reason="the mlflow extra (pip install 'dlperf[mlflow]') is not installed"
)


def export(cli: Callable[..., CliResult], store: RunStore, uri: str) -> CliResult:
    run_id = store.create_run("a", "run", {"train": {"lr": 0.1}}, None, None)
    store.finish_run(run_id, "finished", summary={"test_accuracy": 0.5})
    return cli("runs", "export", str(run_id), "--to", "mlflow", "--uri", uri)


def one_line(result: CliResult) -> str:
    assert result.code == 2 and result.out == "", result.err
    assert result.err.startswith("error: ") and result.err.count("\n") == 1, result.err
    assert "maintenance mode" not in result.err
    return result.err


@pytest.mark.parametrize("scheme", ["", "file://"])
def test_a_directory_that_cannot_be_made_is_named(
    scheme: str,
    cli: Callable[..., CliResult],
    store: RunStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # not the file store's refusal
    (tmp_path / "afile").write_text("not a directory")
    target = tmp_path / "afile" / "mlruns"
    err = one_line(export(cli, store, f"{scheme}{target}"))
    assert f"cannot write MLflow's runs to {target}" in err and "Not a directory" in err
    assert "--uri sqlite:///mlflow.db" in err


def test_a_directory_under_proc_is_named(cli: Callable[..., CliResult], store: RunStore) -> None:
    err = one_line(export(cli, store, "/proc/mlruns"))  # even root cannot make it
    assert "cannot write MLflow's runs to /proc/mlruns" in err


def test_a_usable_directory_gets_the_uri_to_use_and_is_left_as_it_was(
    cli: Callable[..., CliResult], store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    err = one_line(export(cli, store, "mlruns"))
    assert "MLflow at mlruns: a directory" in err
    assert "--uri sqlite:///mlflow.db" in err and "MLFLOW_ALLOW_FILE_STORE=true" in err
    assert not (tmp_path / "mlruns").exists()  # the check made nothing
