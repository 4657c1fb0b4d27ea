"""What the 22nd break-it round found in the run store, reproduced first: a stored schema
version of '0' was read as an empty database, and a read command re-stamped the store and broke
it (1); on PostgreSQL, `runs tag` and `runs delete` checked a run's existence before locking its
row, so a tag racing a delete ended in a ForeignKeyViolation traceback and two deletes both said
"deleted run N" (2); a PostgreSQL schema without USAGE was called missing (3); a SQLite store
path that is a FIFO, a device or a /proc file read as an empty store (4); an old store opened in
a read-only PostgreSQL session said only "cannot execute ALTER TABLE in a read-only transaction"
(6); and a SQLite run read with a garbled JSON column blamed the first garbled run of the store,
not the run asked about (7). PostgreSQL cases skip without DLPERF_TEST_POSTGRES_URL."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest
from sqlalchemy import Connection, create_engine, make_url, text

from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult, fresh_store_url
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]
EVENT_S = 120  # generous: how long a test waits for another process to reach a point


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "bi22")


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url("postgresql", tmp_path, "bi22")


def _runs(url: str, count: int = 1) -> list[int]:
    store = RunStore.open(url)
    ids = []
    for i in range(count):
        run_id = store.create_run(f"r{i}", "train", {})
        store.finish_run(run_id)
        ids.append(run_id)
    store.engine.dispose()
    return ids


def _sql(url: str, *statements: str) -> list[object]:
    """Run `statements` on the store at `url` in one transaction (a hand edit); the first
    column of the last one's rows."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            rows: list[object] = []
            for statement in statements:
                result = conn.execute(text(statement))
                rows = list(result.scalars()) if result.returns_rows else []
            return rows
    finally:
        engine.dispose()


def _schema(url: str) -> str:
    return str(make_url(url).query["options"]).removeprefix("-csearch_path=")


def _with_options(url: str, options: str) -> str:
    changed = make_url(url).update_query_dict({"options": options})
    return changed.render_as_string(hide_password=False)


# --- 1: a stored schema version of '0' ----------------------------------------------------------


@pytest.mark.parametrize("shape", ["current", "old"])
def test_a_schema_version_of_0_is_refused_and_nothing_written(
    cli: Cli, store_url: str, shape: str
) -> None:
    """'0' passed the isdecimal() check and was taken for an empty database: `runs list`
    made the missing tables, stamped '3', and the old store then read as damaged."""
    (run_id,) = _runs(store_url)
    edits = ["ALTER TABLE runs DROP COLUMN owner", "DROP TABLE claims"] if shape == "old" else []
    _sql(store_url, *edits, "UPDATE meta SET value = '0' WHERE key = 'schema_version'")
    for args in (("runs", "list"), ("runs", "show", str(run_id)), ("runs", "tag", "1", "a=b")):
        one_line(cli("--db", store_url, *args), 2, "schema version '0', which no dlperf writes")
        version = _sql(store_url, "SELECT value FROM meta WHERE key = 'schema_version'")
        assert version == ["0"], args
    if shape == "old":
        assert "claims" not in _tables(store_url)


def _tables(url: str) -> set[str]:
    if url.startswith("sqlite"):
        return set(map(str, _sql(url, "SELECT name FROM sqlite_master WHERE type = 'table'")))
    query = f"SELECT tablename FROM pg_tables WHERE schemaname = '{_schema(url)}'"
    return set(map(str, _sql(url, query)))


def test_a_schema_version_of_0_names_the_version_to_set_on_postgresql(
    cli: Cli, pg_url: str
) -> None:
    _runs(pg_url)
    _sql(pg_url, "UPDATE meta SET value = '0' WHERE key = 'schema_version'")
    result = cli("--db", pg_url, "runs", "list")
    one_line(result, 2, "schema version '0'", f"UPDATE {_schema(pg_url)}.meta SET value = '3'")


# --- 2: a run locked before it is looked at (PostgreSQL) ----------------------------------------


def _deleting(url: str, run_id: int) -> tuple[Connection, int]:
    """A transaction of another process that deletes run `run_id` and has not committed: it
    holds the run's row lock, as `runs delete` does between its delete and its commit. Returns
    the open connection and its backend's pid."""
    engine = create_engine(url)
    conn = engine.connect()
    pid = int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
    for table in ("tags", "metrics", "artifacts"):
        conn.execute(text(f"DELETE FROM {table} WHERE run_id = :id"), {"id": run_id})
    conn.execute(text("DELETE FROM runs WHERE id = :id"), {"id": run_id})
    return conn, pid


def _blocked_by(url: str, pid: int, process: subprocess.Popen[str]) -> None:
    """Wait until a backend waits on a lock that backend `pid` holds: the command reached the
    run's row and waits for the other transaction's end."""
    engine = create_engine(url)
    deadline = time.monotonic() + EVENT_S
    query = "SELECT count(*) FROM pg_stat_activity WHERE :pid = ANY(pg_blocking_pids(pid))"
    try:
        with engine.connect() as conn:
            while True:
                if conn.execute(text(query), {"pid": pid}).scalar_one() > 0:
                    return
                assert process.poll() is None, process.communicate()
                assert time.monotonic() < deadline, "the command never waited on the run's lock"
                conn.rollback()
                time.sleep(0.05)
    finally:
        engine.dispose()


def _command(url: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "dlperf", "--db", url, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("args", [("tag", "{id}", "k=v"), ("delete", "{id}", "--yes")])
def test_a_run_deleted_while_a_command_waits_for_it_is_no_run(
    pg_url: str, args: tuple[str, ...]
) -> None:
    """`runs tag` checked the run, then inserted its tags: a delete committed in between made
    the insert's foreign key fail, a traceback. Two `runs delete` both found the run, then
    both said "deleted run N". Now the run's row is locked before it is looked at: the loser
    waits for the other's end, finds no run, and says so."""
    run_id, kept = _runs(pg_url, 2)
    conn, pid = _deleting(pg_url, run_id)
    try:
        process = _command(pg_url, "runs", *(a.format(id=run_id) for a in args))
        _blocked_by(pg_url, pid, process)
        conn.commit()
    finally:
        conn.close()
        conn.engine.dispose()
    out, err = process.communicate(timeout=EVENT_S)
    assert process.returncode == 2, (out, err)
    assert "Traceback" not in err and "deleted run" not in out, (out, err)
    assert err.strip().splitlines()[-1].startswith(f"error: no run {run_id} in the store"), err
    store = RunStore.open(pg_url)
    assert [r.id for r in store.list_runs()] == [kept]
    store.engine.dispose()


# --- 3: a PostgreSQL schema without USAGE -------------------------------------------------------


def test_a_schema_without_usage_is_not_called_missing(cli: Cli, pg_url: str) -> None:
    """current_schema() is NULL both for a schema that does not exist and for one the user
    may not use: "schema X does not exist (create it ...)" sent the user to create what is
    there."""
    schema = _schema(pg_url)
    user = make_url(pg_url).username
    _sql(pg_url, f"REVOKE ALL ON SCHEMA {schema} FROM {user}")
    try:
        result = cli("--db", pg_url, "runs", "list")
        one_line(
            result,
            2,
            f"user {user} has no USAGE on schema {schema}",
            f"GRANT USAGE, CREATE ON SCHEMA {schema} TO {user}",
        )
        assert "does not exist" not in result.err
    finally:
        _sql(pg_url, f"GRANT ALL ON SCHEMA {schema} TO {user}")


# --- 4: a SQLite store path that is not a regular file ------------------------------------------


@pytest.mark.parametrize("path", ["/dev/null", "/proc/self/status"])
@pytest.mark.parametrize("args", [("runs", "list"), ("runs", "tag", "1", "a=b"), ("doctor",)])
def test_a_store_that_is_not_a_regular_file_is_refused(
    cli: Cli, path: str, args: tuple[str, ...]
) -> None:
    """A device or a /proc file reads as size 0, which was taken for a missing store: an
    empty list, exit 0, and a write's "disk I/O error" or "unable to open database file"."""
    one_line(cli("--db", path, *args), 2, f"run store {path} is not a regular file")


def test_a_store_that_is_a_fifo_is_refused(tmp_path: Path) -> None:
    """In a process of its own: a FIFO opened for reading would wait for a writer."""
    fifo = tmp_path / "fifo.db"
    os.mkfifo(fifo)
    for args in (("runs", "list"), ("runs", "tag", "1", "a=b")):
        process = _command(str(fifo), *args)
        out, err = process.communicate(timeout=EVENT_S)
        assert process.returncode == 2, (out, err)
        last = err.strip().splitlines()[-1]
        assert f"run store {fifo} is not a regular file (a FIFO)" in last, err
        assert "Traceback" not in err
    assert fifo.is_fifo()


def test_an_empty_regular_file_is_still_a_new_store(cli: Cli, tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    listed = cli("--db", str(empty), "runs", "list", "--json")
    assert (listed.code, listed.out.strip()) == (0, "[]"), listed.err
    one_line(cli("--db", str(empty), "runs", "tag", "1", "a=b"), 2, "empty.db is an empty file")


# --- 6: an old store in a read-only PostgreSQL session ------------------------------------------


def test_an_old_store_in_a_read_only_session_names_the_fix(cli: Cli, pg_url: str) -> None:
    _runs(pg_url)
    _sql(
        pg_url,
        "ALTER TABLE runs DROP COLUMN owner",
        "DROP TABLE claims",
        "UPDATE meta SET value = '2' WHERE key = 'schema_version'",
    )
    options = f"-csearch_path={_schema(pg_url)} -cdefault_transaction_read_only=on"
    result = cli("--db", _with_options(pg_url, options), "runs", "list")
    one_line(
        result,
        2,
        "is older than this dlperf and opened read-only",
        "open it once from a session that may write",
    )
    assert _sql(pg_url, "SELECT value FROM meta WHERE key = 'schema_version'") == ["2"]


def test_a_new_store_in_a_read_only_session_is_one_line(cli: Cli, pg_url: str) -> None:
    options = f"-csearch_path={_schema(pg_url)} -cdefault_transaction_read_only=on"
    read_only = _with_options(pg_url, options)
    assert cli("--db", read_only, "runs", "list").code == 0  # a reader writes nothing
    with pytest.raises(UserError) as caught:  # a writer (run, track) makes the store
        RunStore.open(read_only)
    said = str(caught.value)
    assert "is read-only" in said and "a session that may write" in said, said
    assert "older" not in said and "\n" not in said


# --- 7: a garbled JSON column names the run being read ------------------------------------------


def test_a_garbled_column_names_the_run_being_read(cli: Cli, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'g.db'}"
    _runs(url, 3)
    with closing(sqlite3.connect(tmp_path / "g.db")) as conn, conn:
        conn.execute("UPDATE runs SET config = '[1,2]' WHERE id = 2")
        conn.execute("UPDATE runs SET system = '\"x\"' WHERE id = 3")
    one_line(cli("--db", url, "runs", "show", "3"), 2, "run 3's system", "is not a JSON object")
    one_line(cli("--db", url, "runs", "show", "2"), 2, "run 2's config", "is not a JSON object")
    one_line(cli("--db", url, "runs", "tag", "3", "a=b"), 2, "run 3's system")
    one_line(cli("--db", url, "doctor", "--last", "4"), 2, "run 3's system")
