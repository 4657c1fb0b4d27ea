"""Break-it round 28, fix task C2: the run store, second part (P3 and P4 reports).

P4-5. The working directory deleted while a run recorded into the default ./dlperf.db: a vague
      "No such file or directory" and an atexit traceback (the store's relative path resolved
      against the deleted directory). One line, exit 1, nothing at exit.
P3-4. A read of a PostgreSQL store whose table another session held (LOCK TABLE ... ACCESS
      EXCLUSIVE, VACUUM FULL) waited as long as it was held. It waits the busy timeout and
      says the writers' line, exit 1.
P3-2. A file whose only table is another program's `tags` (or `meta`): refused by --db, and
      `runs repair` of a meta-only one wrote "0 run(s)", exit 0, where a tags-only one was
      refused: both are refused alike ("holds no runs table"), exit 2, nothing written.
P3-11. `--db file:x.db` (a plain path) was pointed at x.db, another file, and
      `sqlite:///file::memory:?...` at `:memory:` stores, refused in turn: the fix names
      ./file:x.db too, and a memory store is refused as one.
P4-6. Store and run folder moved mid-run: the `--resume` the "moved" line offers failed, the
      checkpoint's path stored absolute under the old folder. The rows are pointed at the
      checkpoint where it moved with the store.
P3-8. A libpq host list in the URL's host part was told "its port is not a number" with an
      IPv6 hint: it is told the host= form. A database name escaped in the URL (%C3%BC%20x)
      was named half-decoded (%C3%BC x): named as typed.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

import dlperf
from dlperf.engine import checkpoint
from dlperf.errors import StoreGone
from dlperf.store import RunStore, integrity, runstore, urls
from tests.conftest import CliResult, fresh_store_url
from tests.faults.test_break_it_28_store import one_line

Cli = Callable[..., CliResult]


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


# P3-2

FOREIGN = {
    "meta": "CREATE TABLE meta (key VARCHAR(40) NOT NULL PRIMARY KEY, value TEXT NOT NULL);"
    "INSERT INTO meta VALUES ('app', 'otherapp'), ('version', '7');",
    "tags": "CREATE TABLE tags (run_id INTEGER, key TEXT, value TEXT);"
    "INSERT INTO tags VALUES (1, 'a', 'b');",
}


@pytest.mark.parametrize("table", sorted(FOREIGN))
@pytest.mark.parametrize("command", ["list", "tag", "repair"])
def test_a_file_of_one_foreign_table_with_a_dlperf_name_is_refused(
    table: str, command: str, cli: Cli, tmp_path: Path
) -> None:
    """Before: `runs repair` of the meta-only file wrote `0 run(s)`, exit 0."""
    path = tmp_path / "f.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(FOREIGN[table])
    before = path.read_bytes()
    given = {"list": [], "tag": ["1", "a=1"], "repair": [str(tmp_path / "out.db")]}[command]
    done = cli("--db", str(path), "runs", command, *given)
    said = "holds no runs table" if command == "repair" else "holds tables that are not dlperf's"
    one_line(done, 2, said)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.db"]


# P3-11


@pytest.mark.parametrize(
    ("db", "said"),
    [
        (
            "file:x.db",
            "SQLite URI filenames (file:...) are not supported (give the file itself: "
            "sqlite:///x.db or --db x.db, or --db ./file:x.db for a file of that name)",
        ),
        (
            "sqlite:///file::memory:?cache=shared&uri=true",
            "is in memory: it would keep nothing (give a file, e.g. --db dlperf.db)",
        ),
    ],
)
def test_a_sqlite_uri_filename_is_told_a_fix_that_works(
    db: str, said: str, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: `file:x.db` was told `--db x.db` alone; `file::memory:` `--db :memory:`."""
    monkeypatch.chdir(tmp_path)
    one_line(cli("--db", db, "runs", "list"), 2, said)
    with dlperf.track("x", config={}, store="./file:x.db") as r:  # the fix, taken
        r.log(1, loss=1.0)
    assert (tmp_path / "file:x.db").is_file()


# P4-6


def test_a_checkpoint_moved_with_its_store_is_found_where_it_went(tmp_path: Path) -> None:
    """Before: `run --resume` said `run 1's checkpoint .../sub1/... is missing`."""
    old = tmp_path / "sub1"
    old.mkdir()
    saved = old / "dlperf_runs" / "s" / "run-1" / "checkpoint.pt"
    saved.parent.mkdir(parents=True)
    saved.write_bytes(b"weights")
    with pytest.raises(StoreGone) as gone, dlperf.track("m", store=str(old / "x.db")) as r:
        r._store.add_artifact(r.id, "checkpoint", saved)
        r.log(1, loss=0.5)
        r.flush()
        old.rename(tmp_path / "sub2")
        r.log(2, loss=0.25)
        r.flush()
    assert "was moved to" in str(gone.value)
    store = RunStore.open(str(tmp_path / "sub2" / "x.db"), create=False)
    try:
        moved = tmp_path / "sub2" / "dlperf_runs" / "s" / "run-1" / "checkpoint.pt"
        assert store.artifacts(r.id) == [{"kind": "checkpoint", "path": str(moved)}]
        assert checkpoint.run_checkpoint(store, r.id, "to resume", "-") == moved
    finally:
        store.engine.dispose()


# P3-8


def test_a_libpq_host_list_is_told_the_host_parameters(cli: Cli) -> None:
    """Before: `its port is not a number (..., an IPv6 host in brackets: [::1]:5432)`."""
    done = cli("--db", "postgresql+psycopg://u:pw@127.0.0.1:5439,127.0.0.1:5438/db", "runs", "list")
    one_line(
        done,
        2,
        "run store 'postgresql+psycopg://u:***@127.0.0.1:5439,127.0.0.1:5438/db': it lists its "
        "hosts in the URL's host part",
        "postgresql+psycopg://user@/db?host=h1:5432&host=h2:5433",
    )


def test_an_escaped_database_name_is_named_as_typed() -> None:
    """Before: `.../bk28_p3_%C3%BC x` for `.../bk28_p3_%C3%BC%20x`."""
    typed = "postgresql+psycopg://u:pw@127.0.0.1:5439/bk28_p3_%C3%BC%20x?sslmode=disable"
    assert urls.masked_url(typed) == typed.replace(":pw@", ":***@")
