"""What the eleventh break-it round found in opening the run store, reproduced first: a
PostgreSQL URL whose port takes connections but never answers hung every command (no connect
timeout); a store whose schema version row was deleted (or whose meta table was dropped) was
silently migrated and stamped again, on SQLite and PostgreSQL alike."""

from __future__ import annotations

import socket
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, inspect, text

from dlperf.store import RunStore
from dlperf.store.migrations import SCHEMA_VERSION
from tests.conftest import CliResult, fresh_store_url
from tests.faults.test_break_it_10_store import a_run
from tests.faults.test_break_it_22_store import _schema
from tests.faults.test_store_faults import one_line
from tests.store.test_migrations import FIRST_RELEASE

Cli = Callable[..., CliResult]
WAIT_S = 60  # generous: each wait ends as soon as what it waits for is seen
# The silent server lets go of its connections after this long, so that a command that
# would wait for ever fails the test instead of hanging it.
HANG_S = 40


# --- B1: a server that takes the connection and never answers ----------------------------------


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts connections and never answers (a hung server, a
    proxy with nothing behind it), in a thread; closed at the end."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = int(listener.getsockname()[1])
    done = threading.Event()
    held: list[socket.socket] = []

    def hold() -> None:
        while True:
            conn, _ = listener.accept()
            if done.is_set():
                conn.close()
                return
            held.append(conn)

    def let_go() -> None:
        done.set()
        with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S):
            pass  # wakes accept()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    release = threading.Timer(HANG_S, lambda: [c.close() for c in list(held)])
    release.start()
    try:
        yield port
    finally:
        release.cancel()
        let_go()
        thread.join(WAIT_S)
        assert not thread.is_alive()
        for conn in held:
            conn.close()
        listener.close()


def _closed_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return int(s.getsockname()[1])


@pytest.mark.timeout(4 * HANG_S)
def test_a_server_that_never_answers_is_one_line_naming_it(cli: Cli, silent_port: int) -> None:
    """It waited for ever (psycopg's own 130 s at best); with a timeout in the URL it said
    only 'connection timeout expired', naming neither the server nor the fix."""
    url = f"postgresql+psycopg://u:secret@127.0.0.1:{silent_port}/x?connect_timeout=2"
    result = cli("--db", url, "runs", "list")
    one_line(
        result,
        2,
        f"the server at 127.0.0.1:{silent_port} did not answer within 2 s",
        "?connect_timeout=SECONDS",
    )
    assert "secret" not in result.err


@pytest.fixture
def connect_params() -> Iterator[list[dict[str, Any]]]:
    """The keyword arguments each new connection of any engine is made with."""
    seen: list[dict[str, Any]] = []

    def record(dialect: Any, conn_rec: Any, cargs: Any, cparams: dict[str, Any]) -> None:
        seen.append(dict(cparams))

    event.listen(Engine, "do_connect", record)
    try:
        yield seen
    finally:
        event.remove(Engine, "do_connect", record)


@pytest.mark.parametrize(
    ("query", "env", "expected"),
    [
        ("", None, 10),
        ("?connect_timeout=5", None, "5"),  # the URL's own wins
        ("", "7", None),  # so does libpq's PGCONNECT_TIMEOUT: libpq reads it itself
    ],
)
def test_a_server_store_connects_with_a_time_limit_by_default(
    cli: Cli,
    connect_params: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    query: str,
    env: str | None,
    expected: object,
) -> None:
    """Checked on a closed port (refused at once): the arguments every connection gets."""
    if env is None:
        monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    else:
        monkeypatch.setenv("PGCONNECT_TIMEOUT", env)
    url = f"postgresql+psycopg://u:p@127.0.0.1:{_closed_port()}/x{query}"
    one_line(cli("--db", url, "runs", "list"), 2, "Connection refused")
    assert connect_params, "no connection was tried"
    assert all(p.get("connect_timeout") == expected for p in connect_params), connect_params


# --- B5: a store that lost its schema version --------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "bi11")


def _execute(url: str, sql: str) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text(sql))
    finally:
        engine.dispose()


def _state(url: str) -> tuple[set[str], dict[str, str]]:
    """The store's tables and its meta rows, read without dlperf."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            tables = set(inspect(conn).get_table_names())
            rows = conn.execute(text("SELECT key, value FROM meta")) if "meta" in tables else []
            meta = {str(key): str(value) for key, value in rows}
        return tables, meta
    finally:
        engine.dispose()


def _file(url: str) -> Path | None:
    return Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None


@pytest.mark.parametrize(
    ("damage", "args"),
    [
        ("DELETE FROM meta WHERE key = 'schema_version'", ("runs", "list")),  # a reader
        ("DROP TABLE meta", ("runs", "tag", "1", "a=b")),  # a writer
    ],
)
def test_a_store_that_lost_its_schema_version_is_refused_and_left_as_it_was(
    cli: Cli, store_url: str, damage: str, args: tuple[str, ...]
) -> None:
    """It was migrated as a store of before versions: exit 0, version 3 written back (and,
    its meta dropped, a new store id made, so its runs' files under the old id were lost)."""
    assert a_run(store_url) == 1
    _execute(store_url, damage)
    before = _state(store_url)
    path = _file(store_url)
    raw = path.read_bytes() if path else b""
    result = cli("--db", store_url, *args)
    one_line(result, 2, "has no schema version", "edited by hand or damaged")
    assert _state(store_url) == before
    if path:
        assert path.read_bytes() == raw
        assert "runs repair NEW.db" in result.err.splitlines()[-1]
    else:
        assert "runs repair" not in result.err  # which reads SQLite files only


def test_the_fix_named_for_a_sqlite_store_that_lost_its_version_works(
    cli: Cli, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'lost.db'}"
    store_id = RunStore.open(url).id
    a_run(url)
    _execute(url, "DELETE FROM meta WHERE key = 'schema_version'")
    new = tmp_path / "new.db"
    result = cli("--db", url, "runs", "repair", str(new))
    assert result.code == 0, result.err
    repaired = RunStore.open(str(new))
    assert [r.id for r in repaired.list_runs()] == [1]
    assert _state(f"sqlite:///{new}")[1]["schema_version"] == str(SCHEMA_VERSION)
    assert repaired.id == store_id
    repaired.engine.dispose()


def test_a_garbled_version_on_postgresql_names_a_fix_that_works_there(
    cli: Cli, tmp_path: Path
) -> None:
    """Its hint was `runs repair NEW.db`, which refuses anything but a SQLite file."""
    for url in fresh_store_url("postgresql", tmp_path, "bi11"):
        a_run(url)
        _execute(url, "UPDATE meta SET value = 'abc' WHERE key = 'schema_version'")
        result = cli("--db", url, "runs", "list")
        one_line(result, 2, "has schema version 'abc', which no dlperf writes")
        assert "runs repair" not in result.err
        fix = f"UPDATE {_schema(url)}.meta SET value = '3' WHERE key = 'schema_version'"
        assert fix in result.err  # in the store's schema (break-it 36)


# Stores made after store ids (meta) came and before versions were recorded: tags and meta,
# no schema_version row, and neither runs.owner nor claims, which came with version 3.
BEFORE_VERSIONS = """
CREATE TABLE tags (run_id INTEGER, key VARCHAR(100), value TEXT, PRIMARY KEY (run_id, key));
CREATE TABLE meta (key VARCHAR(100) PRIMARY KEY, value TEXT);
INSERT INTO meta (key, value) VALUES ('store_id', '0123456789ab');
"""


@pytest.mark.parametrize("script", [FIRST_RELEASE, FIRST_RELEASE + BEFORE_VERSIONS])
def test_a_store_made_before_versions_still_migrates_and_keeps_its_runs(
    cli: Cli, tmp_path: Path, script: str
) -> None:
    path = tmp_path / "old.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(script)
    result = cli("--db", str(path), "runs", "list", "--json")
    assert result.code == 0, result.err
    assert '"old"' in result.out
    tables, meta = _state(f"sqlite:///{path}")
    assert {"claims", "tags", "meta"} <= tables
    assert meta["schema_version"] == str(SCHEMA_VERSION)
    if "store_id" in script:
        assert meta["store_id"] == "0123456789ab"  # kept: its runs' files are under it
