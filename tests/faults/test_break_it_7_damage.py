"""A store edited by hand (the seventh break-it round, issue 41, half B), reproduced first: a
column or table dropped from a current store (S08), and a run's time or JSON column set to
what dlperf cannot read (S18). Each was a traceback, exit 1; each is now one line naming the
store (and the run, where known) and `runs repair`, exit 2, as a config that is not JSON
already was. And a store on read-only media, which could not be read even with ?mode=ro
(S06)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line, read_only

Cli = Callable[..., CliResult]


def two_runs(path: Path) -> None:
    store = RunStore.open(str(path))
    try:
        for name in ("a", "b"):
            run_id = store.create_run(name, "exp", {"train": {"lr": 0.1}})
            store.finish_run(run_id, summary={"epochs": 1})
    finally:
        store.engine.dispose()


def edit(path: Path, sql: str) -> None:
    """What `sqlite3 PATH SQL` does."""
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(sql)
        conn.commit()


def run_ids(path: Path) -> list[int]:
    with closing(sqlite3.connect(path)) as conn:
        return [run_id for (run_id,) in conn.execute("SELECT id FROM runs ORDER BY id")]


# --- S08: a current store that lost a column or a table ------------------------------------


DROP_NAME = ("ALTER TABLE runs DROP COLUMN name", "runs.name")
DROP_TAGS = ("DROP TABLE tags", "no such table: tags")  # `run` never reads tags: it runs


@pytest.mark.parametrize(
    ("sql", "detail", "command"),
    [
        (*DROP_NAME, ["runs", "list"]),
        (*DROP_NAME, ["runs", "show", "1"]),
        (DROP_NAME[0], "table runs has no column named name", ["run"]),
        (*DROP_TAGS, ["runs", "list"]),
        (*DROP_TAGS, ["runs", "show", "1"]),
    ],
)
def test_a_store_that_lost_a_column_or_table_is_one_line(
    cli: Cli,
    tiny_exp: Callable[..., Path],
    tmp_path: Path,
    sql: str,
    detail: str,
    command: list[str],
) -> None:
    """A current store is not inspected when it opens (only a store to migrate is): ~92
    lines ending `OperationalError: no such column: runs.name`, in every command."""
    path = tmp_path / "x.db"
    two_runs(path)
    edit(path, sql)
    args = [*command, str(tiny_exp(epochs=1))] if command == ["run"] else command
    result = cli("--db", str(path), *args)
    one_line(result, 2, f"run store {path} is damaged", detail, f"--db {path} runs repair NEW.db")
    assert run_ids(path) == [1, 2]  # nothing written


# --- S18: a run's time or JSON column set by hand ------------------------------------------


GARBLED = [
    ("started", "'yesterday'", "is not a time"),
    ("ended", "5", "is not a time"),
    ("summary", "'[1,2]'", "is not a JSON object"),
    ("system", "'\"x\"'", "is not a JSON object"),
    ("config", "'[1]'", "is not a JSON object"),
    ("config", "7", "is not a JSON object"),
]


@pytest.mark.parametrize(("column", "value", "reason"), GARBLED)
@pytest.mark.parametrize("command", [["runs", "list"], ["runs", "show", "1"]])
def test_a_run_whose_time_or_json_is_garbled_is_one_line_naming_it(
    cli: Cli, tmp_path: Path, column: str, value: str, reason: str, command: list[str]
) -> None:
    """ValueError: Invalid isoformat string, AttributeError: 'list' object has no attribute
    'get', 'items'..., exit 1. `runs list` reads the store with sqlite3, `runs show` with
    SQLAlchemy: both name the run and the column."""
    path = tmp_path / "x.db"
    two_runs(path)
    edit(path, f"UPDATE runs SET {column} = {value} WHERE id = 1")
    result = cli("--db", str(path), *command)
    one_line(result, 2, f"run 1's {column} in run store {path} {reason}", "runs repair NEW.db")


@pytest.mark.parametrize(("column", "value", "reason"), GARBLED)
def test_the_stores_own_reads_name_a_garbled_run_too(
    tmp_path: Path, column: str, value: str, reason: str
) -> None:
    """SQLAlchemy's reads (resume, export, compare, report): run 2 is named, run 1 reads."""
    path = tmp_path / "x.db"
    two_runs(path)
    edit(path, f"UPDATE runs SET {column} = {value} WHERE id = 2")
    store = RunStore.open(str(path), create=False)
    try:
        assert store.get_run(1).id == 1
        for read in (lambda: store.get_run(2), store.list_runs):
            with pytest.raises(UserError, match=f"run 2's {column} in run store .* {reason}"):
                read()
    finally:
        store.engine.dispose()


@pytest.mark.parametrize(("column", "value", "reason"), GARBLED)
def test_repair_leaves_out_a_run_it_could_not_read(
    cli: Cli, tmp_path: Path, column: str, value: str, reason: str
) -> None:
    """The fix the line names: the new store holds run 2 only, and lists."""
    path, out = tmp_path / "x.db", tmp_path / "new.db"
    two_runs(path)
    edit(path, f"UPDATE runs SET {column} = {value} WHERE id = 1")
    assert cli("--db", str(path), "runs", "repair", str(out)).code == 0
    assert run_ids(out) == [2]
    listed = cli("--db", str(out), "runs", "list", "--json")
    assert listed.code == 0, listed.err


# --- S06: a store on read-only media --------------------------------------------------------


def test_a_store_on_read_only_media_reads_with_mode_ro(cli: Cli, tmp_path: Path) -> None:
    """SQLite writes a -shm file beside a WAL store even to read it: `unable to open database
    file` with ?mode=ro too, so a store on a DVD or a read-only share could not be read."""
    data = tmp_path / "data"
    data.mkdir()
    two_runs(data / "x.db")  # closed: nothing left in a -wal or -shm file
    with read_only(data, tmp_path / "ro") as ro:
        url = f"sqlite:///{ro / 'x.db'}?mode=ro"
        listed = cli("--db", url, "runs", "list", "--json")
        assert listed.code == 0, listed.err
        assert [run["name"] for run in json.loads(listed.out)] == ["b", "a"]
        assert cli("--db", url, "runs", "show", "1").code == 0
        one_line(cli("--db", url, "runs", "tag", "1", "a=1"), 2, "is open read-only")
        assert [p.name for p in ro.iterdir()] == ["x.db"]
        # Without ?mode=ro a command may write: the line says how to read the store.
        one_line(cli("--db", str(ro / "x.db"), "runs", "list"), 2, "sqlite:///PATH?mode=ro")
