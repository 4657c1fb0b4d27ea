"""SQLite stores in rollback-journal mode, read and written (break-it round 67, W2's causes 2,
4 and 5).

Before: a `sqlite3` shell holding only a READ transaction on a store in rollback-journal mode
blocked `runs tag` (its switch to WAL waits for every reader), and after the busy timeout the
line said "a program holds a write transaction open on it", which nothing did. `runs list` on
a rollback-journal store of an older dlperf (schema version 2) upgraded it, as the first
command to open an older store does, and its upgrade switched the store to WAL too, though
readers never change a store's journal mode. `runs list` on a WAL store that cannot be written
(`chattr +i`) left an empty `-wal` and a 32 KiB `-shm` beside it for good.

Now: the line says a program holds a transaction open, reading or writing, and that in
rollback-journal mode a write waits for readers too. A reader's upgrade of an older store is
written in the store's own journal mode (a rollback-journal store stays one; the next command
that writes switches it to WAL). A reader of a store file that cannot be written, with no
`-wal` or `-shm` beside it, reads it as `?mode=ro` reads one on read-only media (immutable: no
lock, no side file), so nothing is left beside it.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from dlperf.store.migrations import SCHEMA_VERSION
from tests.conftest import CliResult
from tests.faults.test_break_it_66_readers import beside, journal_mode, set_rollback, two_runs

Cli = Callable[..., CliResult]


def test_a_write_blocked_by_a_read_transaction_does_not_call_it_a_write(
    cli: Cli, tmp_path: Path
) -> None:
    path = tmp_path / "s.db"
    two_runs(path)
    set_rollback(path)
    url = f"sqlite:///{path}?timeout=1"
    with closing(sqlite3.connect(path, isolation_level=None)) as reader:
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM runs").fetchone() == (2,)  # a read lock
        result = cli("--db", url, "runs", "tag", "1", "x=1")
        reader.execute("COMMIT")
    assert result.code == 1, result.err
    assert result.err.strip() == (
        f"error: run store {url} is locked by another process: waited 1 s for its write lock "
        "(a program (another dlperf command, a sqlite3 shell, a database browser) holds a "
        "transaction open on it, reading or writing (in rollback-journal mode, which this store "
        "is in, a write waits for its readers too): let it end, then try again; ?timeout=SECONDS "
        "on a sqlite:/// URL waits longer)"
    )  # was: "a program holds a write transaction open on it (...)"
    assert cli("--db", str(path), "runs", "tag", "1", "x=1").code == 0  # once it has ended


def test_a_reader_upgrading_an_older_rollback_store_keeps_its_journal_mode(
    cli: Cli, tmp_path: Path
) -> None:
    path = tmp_path / "v2.db"
    two_runs(path)
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(
            "DROP TABLE claims; ALTER TABLE runs DROP COLUMN owner; "
            "UPDATE meta SET value = '2' WHERE key = 'schema_version';"
        )
    set_rollback(path)
    result = cli("--db", str(path), "runs", "list", "--json")
    assert result.code == 0, result.err
    assert result.out.count('"status": "finished"') == 2
    with closing(sqlite3.connect(path)) as conn:
        version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    assert version == (str(SCHEMA_VERSION),)  # upgraded, as the first opener of a store does
    assert journal_mode(path) == "delete"  # was: wal
    assert beside(path) == []
    assert cli("--db", str(path), "runs", "tag", "1", "x=1").code == 0
    assert journal_mode(path) == "wal"  # a command that writes switches it, as before


def _immutable(path: Path, on: bool) -> bool:
    chattr = shutil.which("chattr")
    if chattr is None:
        return False
    done = subprocess.run([chattr, "+i" if on else "-i", str(path)], capture_output=True)
    return done.returncode == 0


def test_a_reader_of_a_store_that_cannot_be_written_leaves_nothing_beside_it(
    cli: Cli, tmp_path: Path
) -> None:
    path = tmp_path / "i.db"
    two_runs(path)
    assert journal_mode(path) == "wal" and beside(path) == []
    if not _immutable(path, True):
        pytest.skip("chattr +i needs root and a file system that takes it")
    try:
        result = cli("--db", str(path), "runs", "list", "--json")
        assert result.code == 0, result.err
        assert result.out.count('"status": "finished"') == 2
        assert beside(path) == []  # was: i.db-shm (32 KiB) and i.db-wal (0 bytes), for good
    finally:
        _immutable(path, False)
