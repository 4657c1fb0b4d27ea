"""Break-it round 59, fixer G8: the exporters under a C locale and under PYTHONWARNINGS=error.

C3. `runs export --to tensorboard` of a run with a non-ASCII name (café-ünïcode-日本-İı) under
    a C locale with UTF-8 mode off ended in two chained UnicodeEncodeError tracebacks, exit 1:
    the run's directory name could not be a file name there (SummaryWriter's makedirs), and the
    cleanup's rmdir of it raised again. Now refused in one line before anything is written,
    with the locale hint `--set run.name` and `runs tag` give (PYTHONUTF8=1 or
    LC_ALL=C.UTF-8), exit 2, nothing left in --out.
C8. `runs export --to mlflow` under PYTHONWARNINGS=error ended in a 79-line traceback:
    SQLAlchemy's SADeprecationWarning as MLflow's tracking store set itself up, made an
    error. Now the third-party deprecation warnings inside MLflow's part of the export are
    left unsaid, as Python's default filters leave them: it exports, exit 0; outside that
    scope the user's filters stand.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlperf import exporters
from dlperf.store import RunStore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]
NAME = "café-ünïcode-日本-İı"
# A C locale with UTF-8 mode off: Python's file system encoding is ASCII.
C_LOCALE = {"LC_ALL": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"}


def _run(url: str, name: str) -> None:
    """Run 1, `name`, with two loss points, in the store at `url`."""
    store = RunStore.open(url)
    run_id = store.create_run(name, "run", {"lr": 0.1})
    store.log_metrics(run_id, [("train/loss", s, 1.0 / s) for s in (1, 2)])
    store.finish_run(run_id, "finished")
    store.engine.dispose()


# --- C3: a run's name the locale cannot write as a file name ------------------------------


def test_a_tensorboard_export_of_a_name_the_c_locale_cannot_hold_is_one_line(
    db: str, tmp_path: Path
) -> None:
    """Before: UnicodeEncodeError in SummaryWriter's makedirs, then another in the cleanup's
    rmdir ("During handling of the above exception"), exit 1. A real process: the file system
    encoding is set as Python starts."""
    _run(db, NAME)
    env = {**os.environ, **C_LOCALE, "DLPERF_DB": db}
    command = [sys.executable, "-X", "utf8=0", "-m", "dlperf"]
    done = subprocess.run(
        [*command, "runs", "export", "1", "--to", "tensorboard", "--out", "tb"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    said = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(said) == 1, done.stderr
    assert "cannot write run 1's events" in said[0]
    assert "run-1-caf\\xe9" in said[0]  # the name as the locale can show it
    assert "nothing was exported" in said[0]
    assert "PYTHONUTF8=1 or LC_ALL=C.UTF-8" in said[0]
    assert not (tmp_path / "tb").exists()  # the --out it would have made is not left


def test_the_cleanup_of_a_failed_tensorboard_export_raises_nothing_more(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the cleanup suppressed OSError only: a directory name the file system could
    not encode raised again as it was removed, chained to the first failure."""
    _run(db, "Alpha")
    real_rmdir = Path.rmdir

    def unencodable(self: Path) -> None:
        if self.name.startswith("run-1"):
            raise UnicodeEncodeError("ascii", self.name, 0, 1, "ordinal not in range(128)")
        real_rmdir(self)

    def failing(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the writer failed")

    monkeypatch.setattr(Path, "rmdir", unencodable)
    monkeypatch.setattr(exporters, "_summary_writer", lambda: failing)
    with pytest.raises(RuntimeError, match="the writer failed") as raised:
        exporters.export_tensorboard(RunStore.open(db), [1], tmp_path / "tb")
    assert raised.value.__context__ is None  # nothing raised again on the way out
    assert not (tmp_path / "tb").exists()


# --- C8: MLflow's own deprecation warnings under PYTHONWARNINGS=error ----------------------


def test_an_mlflow_export_under_warnings_as_errors_exports(
    cli: Cli, db: str, mlflow_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: sqlalchemy.exc.SADeprecationWarning ("The ``noload`` loader strategy is
    deprecated") raised from MLflow's store as it was set up, exit 1 with a 79-line traceback.
    The warning is raised here as MLflow's import raised it once a process (the test's MLflow
    is imported already)."""
    from sqlalchemy.exc import SADeprecationWarning

    _run(db, "Alpha")
    client_class, entities = exporters._mlflow()

    class Warns(client_class):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            warnings.warn(
                "The ``noload`` loader strategy is deprecated", SADeprecationWarning, stacklevel=2
            )
            warnings.warn("a library's pending change", PendingDeprecationWarning, stacklevel=2)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(exporters, "_mlflow", lambda: (Warns, entities))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # PYTHONWARNINGS=error
        result = cli("runs", "export", "1", "--to", "mlflow", "--uri", mlflow_uri)
        assert result.code == 0, result.err
        assert "Traceback" not in result.err
        assert "noload" not in result.err
        # Only MLflow's part of the export: the user's filters stand outside it.
        with pytest.raises(DeprecationWarning):
            warnings.warn("after the export", DeprecationWarning, stacklevel=2)
