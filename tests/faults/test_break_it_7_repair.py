"""`dlperf runs repair`'s source store in the seventh break-it round (issue 41), each defect
reproduced first: the source opened as an unquoted SQLite URI (`p%41.db` read the store
pA.db), its path checked its own way, and a store locked by another process told as damage."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_break_it_5_store import files_in
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

EVENT_S = 300  # how long a busy machine may take to get somewhere: a deadline, not a wait


def a_store(path: Path, name: str) -> None:
    """A store at `path` holding one finished run named `name`."""
    store = RunStore.open(str(path))
    try:
        store.finish_run(store.create_run(name, "exp", {}))
    finally:
        store.engine.dispose()


def names_in(cli: Cli, path: Path) -> list[str]:
    result = cli("--db", str(path), "runs", "list", "--json")
    assert result.code == 0, result.err
    return [run["name"] for run in json.loads(result.out)]


# --- 12: the source opened as a SQLite URI without quoting its path --------------------------


@pytest.mark.parametrize("source", ["p%41.db", "h#1.db", "q?.db"])
def test_repair_reads_exactly_the_store_named(cli: Cli, tmp_path: Path, source: str) -> None:
    """`--db 'p%41.db'` copied the other store pA.db (%41 read as an escape), exit 0;
    `h#1.db` and `q?.db` made empty files h and q (the rest read as the URI's fragment and
    query, `mode=ro` with it) and copied no runs, exit 0."""
    a_store(tmp_path / "pA.db", "decoy")
    a_store(tmp_path / source, "mine")
    before = files_in(tmp_path)
    result = cli("--db", source, "runs", "repair", "out.db")
    assert result.code == 0, result.err
    assert names_in(cli, tmp_path / "out.db") == ["mine"]
    assert files_in(tmp_path) == sorted([*before, "out.db"])  # no file h, q or p


# --- 8: the source path, checked as --db's is ------------------------------------------------


def test_repair_of_a_directory_says_it_is_one(cli: Cli, tmp_path: Path) -> None:
    """It said "run store /.../dir.db does not exist"; `runs list` says it is a directory."""
    (tmp_path / "dir.db").mkdir()
    one_line(
        cli("--db", "dir.db", "runs", "repair", "out.db"), 2, "run store dir.db is a directory"
    )
    assert not (tmp_path / "out.db").exists()


def test_repair_through_a_missing_directory_is_refused(cli: Cli, tmp_path: Path) -> None:
    """`--db nope/../s.db` with no nope/ read s.db and exited 0; `runs list` (and open(2))
    refuse it."""
    a_store(tmp_path / "s.db", "mine")
    result = cli("--db", "nope/../s.db", "runs", "repair", "out.db")
    one_line(result, 2, "run store directory nope does not exist")
    assert not (tmp_path / "out.db").exists()


def test_repair_of_an_empty_file_says_there_is_nothing_to_repair(cli: Cli, tmp_path: Path) -> None:
    """A 0-byte file (which `runs list` reads as a store without runs) was "wrote out.db:
    0 run(s) of store None", exit 0."""
    (tmp_path / "empty.db").touch()
    result = cli("--db", "empty.db", "runs", "repair", "out.db")
    one_line(result, 2, "empty.db holds no runs table", "nothing to repair")
    assert "None" not in result.out + result.err
    assert not (tmp_path / "out.db").exists()
    assert (tmp_path / "empty.db").stat().st_size == 0


def test_repair_of_a_store_whose_id_is_lost_prints_no_none(cli: Cli, tmp_path: Path) -> None:
    """A store whose id row is gone (its page damaged) was "1 run(s) of store None"."""
    a_store(tmp_path / "s.db", "mine")
    with closing(sqlite3.connect(tmp_path / "s.db")) as conn, conn:
        conn.execute("DELETE FROM meta WHERE key = 'store_id'")
    result = cli("--db", "s.db", "runs", "repair", "out.db")
    assert result.code == 0, result.err
    assert result.out.splitlines()[-1].endswith("1 run(s) (the store's id could not be read)")
    assert names_in(cli, tmp_path / "out.db") == ["mine"]


# --- 11: a store locked by another process is not damaged ------------------------------------


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    """s.db, a rollback-journal store of one run, held under an exclusive lock (a sqlite3
    shell in a write) by a connection the test may release from another thread."""
    path = tmp_path / "s.db"
    a_store(path, "mine")
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA journal_mode=DELETE")
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        holder.execute("UPDATE runs SET name = name")
        yield holder
    finally:
        if holder.in_transaction:
            holder.execute("ROLLBACK")
        holder.close()


def test_repair_of_a_locked_store_says_it_is_locked(
    cli: Cli, tmp_path: Path, locked: sqlite3.Connection
) -> None:
    """It said "nothing can be read (database is locked) (restore it from a backup)", after
    SQLite's own 5 s whatever the store's timeout: the store was intact."""
    result = cli("--db", f"sqlite:///{tmp_path / 's.db'}?timeout=0", "runs", "repair", "out.db")
    one_line(result, 1, "is locked by another process", "try again")
    assert "backup" not in result.err
    assert not (tmp_path / "out.db").exists()


def test_repair_waits_for_a_lock_as_the_other_commands_do(
    cli: Cli, tmp_path: Path, locked: sqlite3.Connection
) -> None:
    """The lock is let go once the repair has begun (its new store is there): the repair
    waits for it, within the store's busy timeout, and copies the run."""

    def release() -> None:
        deadline = time.monotonic() + EVENT_S
        while not list(tmp_path.glob(".out.db.repairing-*")) and time.monotonic() < deadline:
            time.sleep(0.01)
        locked.execute("ROLLBACK")

    releaser = threading.Thread(target=release)
    releaser.start()
    try:
        result = cli("--db", "s.db", "runs", "repair", "out.db")
    finally:
        releaser.join()
    assert result.code == 0, result.err
    assert names_in(cli, tmp_path / "out.db") == ["mine"]
