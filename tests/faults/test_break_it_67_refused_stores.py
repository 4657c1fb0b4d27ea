"""Refused stores, the same on both backends and left as found (break-it round 67, W2's causes
3, 6 and 7).

Before: a WAL-mode SQLite store refused for its schema version (4, '0', 'x', '') was left with
an empty -wal and a 32 KiB -shm beside it, made by the read-only look that refused it, though
the refusal "changes nothing". A database of another program's `meta` table alone, with a
store id 'abc', was "not dlperf's" on SQLite but, on PostgreSQL, a store id "dlperf does not
make", with the advice to set back an id it never had. And a current store whose `metrics`
table was dropped was damaged for `runs show` ("dlperf neither reads nor writes it"), while
`runs tag` wrote a tag into it (exit 0, the file switched to WAL) and `runs list` read it.

Now: the refused store's -wal and -shm made by that look are removed (those another
connection holds are kept); both backends refuse their version first, then tables that are
not dlperf's, then the id, so the `meta`-only database is "not dlperf's" on both; and a
current store without one of dlperf's tables is refused as it opens, by every command,
readers and writers alike, in the words its first query to meet the table gave.
PostgreSQL cases skip without DLPERF_TEST_POSTGRES_URL.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest

from dlperf.store import RunStore
from dlperf.store.migrations import OWN_SPACE
from dlperf.store.urls import masked_url
from tests.conftest import CliResult, fresh_store_url
from tests.faults.test_break_it_22_store import _sql

Cli = Callable[..., CliResult]


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url("postgresql", tmp_path, "bi67h3")


def two_runs(url: str) -> None:
    """A store (a file path or a URL) of two finished runs with a metric each; a SQLite
    store's WAL checkpointed into its file, which stays in WAL mode."""
    store = RunStore.open(url)
    try:
        for name in ("a", "b"):
            run_id = store.create_run(name, "exp", {"train": {"lr": 0.1}})
            store.log_metrics(run_id, [("train/loss", 1, 0.5)])
            store.finish_run(run_id, summary={"epochs": 1})
    finally:
        store.engine.dispose()


def edit(path: Path, script: str) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(script)


def beside(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name + "-"))


def error(result: CliResult) -> str:
    """The one line a refusal prints, checked to be the only one, with exit 2."""
    assert result.code == 2, (result.out, result.err)
    assert result.err.splitlines() == [result.err.strip()], result.err
    return result.err.strip()


# --- cause 3: a refused WAL store keeps no -wal or -shm -------------------------------------


VERSIONS = [
    ("4", "has schema version 4, newer than this dlperf's 3 (upgrade dlperf to use it)"),
    ("0", "has schema version '0', which no dlperf writes"),
    ("x", "has schema version 'x', which no dlperf writes"),
    ("", "has schema version '', which no dlperf writes"),
]


@pytest.mark.parametrize(("version", "said"), VERSIONS)
@pytest.mark.parametrize("command", [["runs", "list"], ["runs", "tag", "1", "a=b"]])
def test_a_wal_store_refused_for_its_version_is_left_without_wal_or_shm(
    cli: Cli, tmp_path: Path, version: str, said: str, command: list[str]
) -> None:
    path = tmp_path / "vv.db"
    two_runs(str(path))
    edit(path, f"UPDATE meta SET value = '{version}' WHERE key = 'schema_version'")
    assert beside(path) == []
    before = path.read_bytes()
    line = error(cli("--db", str(path), *command))
    assert line.startswith(f"error: run store sqlite:///{path} {said}")
    assert beside(path) == []  # was: vv.db-shm (32768 bytes) and vv.db-wal (0 bytes)
    assert path.read_bytes() == before


def test_a_foreign_wal_file_is_left_without_wal_or_shm(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "mlflow.db"
    edit(path, "PRAGMA journal_mode=WAL; CREATE TABLE experiments (id INTEGER);")
    assert beside(path) == []
    line = error(cli("--db", str(path), "runs", "list"))
    assert line == (
        f"error: run store sqlite:///{path} holds tables that are not dlperf's: experiments "
        f"({OWN_SPACE})"
    )
    assert beside(path) == []


def test_the_wal_and_shm_another_connection_holds_are_kept(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "vv.db"
    two_runs(str(path))
    edit(path, "UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    with closing(sqlite3.connect(path)) as holder:
        assert holder.execute("SELECT count(*) FROM runs").fetchone() == (2,)
        assert beside(path) == ["vv.db-shm", "vv.db-wal"]
        assert "newer than this dlperf's" in error(cli("--db", str(path), "runs", "list"))
        assert beside(path) == ["vv.db-shm", "vv.db-wal"]  # the holder's: still in use
        assert holder.execute("SELECT count(*) FROM runs").fetchone() == (2,)
    assert beside(path) == []  # the holder, the last to close, removed them


# --- cause 6: another program's `meta` table alone, refused alike on both backends ----------


META_ONLY = (
    "CREATE TABLE meta (key VARCHAR(40) NOT NULL, value TEXT NOT NULL, PRIMARY KEY (key)); "
    "INSERT INTO meta VALUES ('store_id', 'abc');"
)


def not_dlperfs(name: str) -> str:
    return f"error: run store {name} holds tables that are not dlperf's: meta ({OWN_SPACE})"


COMMANDS = [["runs", "list"], ["runs", "tag", "1", "a=b"], ["doctor", "--last", "1"]]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_meta_only_sqlite_file_with_a_foreign_id_is_not_dlperfs(
    cli: Cli, tmp_path: Path, command: list[str]
) -> None:
    path = tmp_path / "m1.db"
    edit(path, META_ONLY)
    before = path.read_bytes()
    for url in (str(path), f"sqlite:///{path}?mode=ro"):
        line = error(cli("--db", url, *command))
        name = url if "://" in url else f"sqlite:///{url}"
        assert line == not_dlperfs(name)
    assert path.read_bytes() == before
    assert beside(path) == []


@pytest.mark.parametrize("command", COMMANDS)
def test_a_meta_only_postgresql_schema_with_a_foreign_id_is_not_dlperfs(
    cli: Cli, pg_url: str, command: list[str]
) -> None:
    """It was "has store id 'abc', which dlperf does not make ... (set it back to the id it
    had (the name of its directory under run.out_dir) ...)"."""
    _sql(pg_url, *META_ONLY.split("; "))
    line = error(cli("--db", pg_url, *command))
    assert line == not_dlperfs(masked_url(pg_url))
    assert _sql(pg_url, "SELECT key || '=' || value FROM meta") == ["store_id=abc"]


# --- cause 7: a current store without one of dlperf's tables, refused by every command -------


def damaged(path: Path, detail: str) -> str:
    return (
        f"error: run store {path} is damaged ({detail}; its tables are not as dlperf made them); "
        f"dlperf neither reads nor writes it (restore it from a backup, or copy what is still "
        f"readable into a new store with `dlperf --db {path} runs repair NEW.db`)"
    )


@pytest.mark.parametrize(
    "command", [["runs", "list"], ["runs", "show", "1"], ["runs", "tag", "1", "a=b"]]
)
def test_a_sqlite_store_without_metrics_is_refused_by_every_command(
    cli: Cli, tmp_path: Path, command: list[str]
) -> None:
    path = tmp_path / "nm.db"
    two_runs(str(path))
    edit(path, "PRAGMA foreign_keys=off; DROP TABLE metrics; PRAGMA journal_mode=delete;")
    before = path.read_bytes()
    line = error(cli("--db", str(path), *command))
    assert line == damaged(path, "no such table: metrics")  # was: runs tag wrote, exit 0
    assert path.read_bytes() == before  # no tag, and still in rollback-journal mode
    assert beside(path) == []


def test_a_sqlite_store_without_two_tables_names_one(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "nm.db"
    two_runs(str(path))
    edit(path, "PRAGMA foreign_keys=off; DROP TABLE tags; DROP TABLE metrics;")
    line = error(cli("--db", str(path), "runs", "list"))
    assert line == damaged(path, "no such table: metrics")  # as SQLite names one
    assert beside(path) == []  # a WAL store: the engine's own close removed them


@pytest.mark.parametrize(
    "command", [["runs", "list"], ["runs", "show", "1"], ["runs", "tag", "1", "a=b"]]
)
def test_a_postgresql_store_without_metrics_is_refused_by_every_command(
    cli: Cli, pg_url: str, command: list[str]
) -> None:
    two_runs(pg_url)
    _sql(pg_url, "DROP TABLE metrics CASCADE")
    line = error(cli("--db", pg_url, *command))
    shown = masked_url(pg_url)
    assert line == (
        f'error: run store {shown} is not as dlperf made it (relation "metrics" does not exist) '
        "(its schema was changed by hand: undo that change, or use a new database)"
    )
    assert _sql(pg_url, "SELECT count(*) FROM tags") == [0]
