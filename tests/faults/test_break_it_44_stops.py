"""Break-it round 44, fixer F9: a stop signal as a TensorBoard export is moved into place, and
as a store's connections are closed (T3 C1, C2).

C1. `runs export --to tensorboard` signalled (SIGTERM) while the exported runs were being
moved from OUT/.dlperf-exporting into OUT: every run's event files ended up whole and in
place, but the command exited 143 and printed nothing, as if stopped with nothing done. The
stop waited in the move's shielded block and was raised as it ended, before the command
settled its outcome. Now the export settles as the move ends, inside that block: exit 0 with
the whole table (docs/export.md), as a stop that lands as the table is printed.
C2. `runs delete` of 300 runs, SIGTERM as "deleted run ..." appeared: 6 times in 11,
SQLAlchemy printed "Exception closing connection" and a 9-line KeyboardInterrupt traceback.
The signal landed while the store's engine closed its pooled connections (the store dropped
as the command returned; the last close checkpoints the WAL, so the window is wide), outside
any shielded block: SQLAlchemy's pool caught the interrupt, logged it with its traceback (no
handler on its logger: logging's last resort prints to stderr) and raised it again. Now every
close of a store's engine is shielded (the stop waits for the close, then takes effect), and
an interrupt the pool logs anywhere else (a connection's reset as it is checked in) is not
printed: the interrupt itself still propagates.

Every signal is one the process sends itself at a named point (a patched move or close), so
no test races a timer.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import dlperf
from dlperf import stopping
from dlperf.store import RunStore, runstore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]


# --- C1: a stop signal as the export's runs are moved into place -----------------------------


@pytest.fixture
def two_runs(db: str) -> list[int]:
    """Two runs a loop recorded (no training: the export only reads their metrics)."""
    for name in ("alpha", "beta"):
        with dlperf.track(name, {"lr": 0.1}, store=db) as run:
            for step in range(1, 6):
                run.log(step, loss=1.0 / step)
    return [1, 2]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_as_the_tensorboard_runs_are_moved_in_ends_the_export_done(
    cli: Cli, two_runs: list[int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: int
) -> None:
    from dlperf import exporters

    swap, moved = exporters._swap_in, []

    def signalled(staged: Path, directory: Path) -> None:
        moved.append(directory.name)
        if len(moved) == 1:  # as the first run's events are moved in: the stop waits
            os.kill(os.getpid(), sig)
        swap(staged, directory)

    monkeypatch.setattr(exporters, "_swap_in", signalled)
    r = cli("runs", "export", "1", "2", "--to", "tensorboard", "--out", "tb")
    assert len(moved) == 2  # the move was not cut
    # before: 130/143, stdout and stderr empty, every run's events in place
    assert r.code == 0, (r.code, r.out, r.err)
    assert "exported to TensorBoard: tensorboard --logdir tb" in r.out
    for run_id in two_runs:
        assert f"run-{run_id}-" in r.out
        directory = next((tmp_path / "tb").glob(f"run-{run_id}-*"))
        assert len(list(directory.glob("events.out.tfevents.*"))) == 1
    assert not (tmp_path / "tb" / exporters.STAGING).exists()
    assert "Traceback" not in r.err


# --- C2: a stop signal as a store's connections are closed -----------------------------------


def _signal_in(store: RunStore, monkeypatch: pytest.MonkeyPatch, method: str) -> list[str]:
    """SIGTERM inside the store's dialect's `method` (do_close: the DBAPI connection's close;
    do_rollback: a connection's reset as it is checked in) the first time it runs, as a signal
    landing there does, then the real one. Returns the calls."""
    dialect = store.engine.dialect
    real = getattr(dialect, method)
    calls: list[str] = []

    def signalled(*args: Any, **kwargs: Any) -> Any:
        calls.append(method)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # its handler runs here, in this frame
        return real(*args, **kwargs)

    monkeypatch.setattr(dialect, method, signalled)
    return calls


@pytest.fixture
def written(db: str, monkeypatch: pytest.MonkeyPatch) -> RunStore:
    """A store with a run written (its WAL to checkpoint on the last close), with stopping's
    handlers taken."""
    store = RunStore.open(db)
    with dlperf.track("mine", {"lr": 0.1}, store=store) as run:
        run.log(1, loss=1.0)
    stopping.install()
    return store


def _as_a_command_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    """No handler on the root logger, as in a command: pytest's own (added as the test's
    body begins) caught SQLAlchemy's records, which a command's stderr got through logging's
    last resort."""
    monkeypatch.setattr(logging.root, "handlers", [])


CLOSES: dict[str, Callable[[RunStore], None]] = {
    # the store dropped as the command returns (C2's): its finaliser
    "dropped": lambda store: runstore._dispose(store.engine, os.getpid()),
    # the exit handler's, which checkpoints the WAL first
    "at exit": lambda store: runstore._close(store.engine),
    "released": lambda store: store.release(),
}


@pytest.mark.parametrize("close", list(CLOSES))
def test_a_stop_signal_as_a_store_is_closed_waits_for_the_close_and_prints_no_traceback(
    written: RunStore,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    close: str,
) -> None:
    with written.engine.connect() as conn:  # a pooled connection to close
        conn.exec_driver_sql("SELECT 1")
    calls = _signal_in(written, monkeypatch, "do_close")
    _as_a_command_logs(monkeypatch)
    with pytest.raises(KeyboardInterrupt):  # the stop still takes effect, after the close
        CLOSES[close](written)
    assert calls, "no connection was closed"
    assert stopping.exit_code(0) == 143
    assert written.engine.pool.checkedin() == 0  # closed, none left in the pool
    err = capfd.readouterr().err
    # before: "Exception closing connection <sqlite3.Connection ...>" and its traceback
    assert "Traceback" not in err and "Exception closing" not in err, err


def test_a_stop_signal_as_a_connection_is_reset_prints_no_traceback(
    written: RunStore, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A connection checked in (rolled back by the pool) as the signal lands: the pool logs
    the interrupt before raising it again ("Exception during reset or similar", with its
    traceback); the interrupt goes on, its record is not printed."""
    raw = written.engine.raw_connection()  # the pool's own reset, not a Connection's rollback
    calls = _signal_in(written, monkeypatch, "do_rollback")
    _as_a_command_logs(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        raw.close()
    assert calls
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception during reset" not in err, err
