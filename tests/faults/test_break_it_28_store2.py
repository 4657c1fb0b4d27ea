"""Break-it round 28, fix task C2: the run store, second part (P3 and P4 reports).

P4-5. The working directory deleted while a run recorded into the default ./dlperf.db: a vague
      "No such file or directory" and an atexit traceback (the store's relative path resolved
      against the deleted directory). One line, exit 1, nothing at exit.
P3-4. A read of a PostgreSQL store whose table another session held (LOCK TABLE ... ACCESS
      EXCLUSIVE, VACUUM FULL) waited as long as it was held. It waits the busy timeout and
      says the writers' line, exit 1.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

import dlperf
from dlperf.errors import StoreGone
from dlperf.store import integrity, runstore
from tests.conftest import CliResult, fresh_store_url

Cli = Callable[..., CliResult]


def one_line(result: CliResult, code: int, *parts: str) -> str:
    """Exit `code` and one error line, the only line on stderr, holding each of `parts`."""
    assert result.code == code, (result.out, result.err)
    assert result.err.startswith("error: ") and result.err.count("\n") == 1, result.err
    for part in parts:
        assert part in result.err, result.err
    return result.err.strip()


@pytest.fixture
def pg_store(tmp_path: Path) -> Iterator[str]:
    """A new PostgreSQL store's URL (a schema of its own); skips without a server."""
    yield from fresh_store_url("postgresql", tmp_path, "fx28c2")


# P4-5


def test_the_working_directory_deleted_mid_run_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: FileNotFoundError from integrity.store_file at the next write and at exit."""
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    monkeypatch.delenv("DLPERF_DB", raising=False)
    with pytest.raises(StoreGone) as raised, dlperf.track("x", config={}) as r:
        r.log(1, loss=1.0)
        engine = r._store.engine
        shutil.rmtree(os.getcwd())
        r.log(2, loss=0.5)
    assert raised.value.exit_code == 1
    assert str(raised.value.message) == (
        f"run store {gone}/dlperf.db was deleted or replaced with the working directory that "
        "held it while run 1 was recording; nothing was saved"
    )
    assert integrity.store_file(engine) == gone / "dlperf.db"
    runstore._close(engine)  # what the atexit hook does: no FileNotFoundError


# P3-4


def test_a_read_of_a_postgresql_table_held_locked_waits_the_busy_timeout(
    pg_store: str, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: `runs list` waited as long as the lock was held, printing nothing."""
    with dlperf.track("x", config={}, store=pg_store) as r:
        r.log(1, loss=1.0)
    monkeypatch.setattr(runstore, "BUSY_TIMEOUT_S", 1)
    holder = create_engine(pg_store)
    try:
        with holder.connect() as conn:
            conn.execute(text("LOCK TABLE runs IN ACCESS EXCLUSIVE MODE"))
            start = time.monotonic()
            done = cli("--db", pg_store, "runs", "list")
            took = time.monotonic() - start
            conn.rollback()
    finally:
        holder.dispose()
    one_line(done, 1, "is locked by another process: waited 1 s for a lock", "let it end")
    assert took < 20, took
    assert cli("--db", pg_store, "runs", "list").code == 0
