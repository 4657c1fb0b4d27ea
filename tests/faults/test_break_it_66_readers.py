"""Reading commands and a SQLite store's journal mode (break-it round 66, Z2's cause A).

Before: every connection of a store opened without `?mode=ro` switched its file to WAL as it
connected, readers' too. `runs list`, `runs show`, `runs compare` and `doctor` (which only
read) rewrote the header of a store a user had set to rollback-journal mode (bytes 19/20 and
the change counter), and a file they then refused as damaged ("dlperf neither reads nor
writes it": dlperf's `meta` rows without `runs`) had been switched first; `dlperf run` and
`runs tag` did the same to it.

Now: a connection only reads the journal mode; a writer switches the store to WAL once it
has found it sound (as it opens it to write, or at its first write; a store dlperf makes is
in WAL mode from its first write, as before), so a command that only reads leaves the file
byte for byte. A current store without `runs` is
refused as damaged as it opens, before a writer's first write, so it is never written.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]


def two_runs(path: Path) -> None:
    """A store of two finished runs, its WAL checkpointed into the file."""
    store = RunStore.open(str(path))
    try:
        for name in ("a", "b"):
            run_id = store.create_run(name, "exp", {"train": {"lr": 0.1}})
            store.log_metrics(run_id, [("train/loss", 1, 0.5)])
            store.finish_run(run_id, summary={"epochs": 1})
    finally:
        store.engine.dispose()


def journal_mode(path: Path) -> str:
    with closing(sqlite3.connect(path)) as conn:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])


def set_rollback(path: Path) -> None:
    """What `sqlite3 PATH 'pragma journal_mode=delete'` does."""
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA journal_mode=DELETE").fetchone() == ("delete",)


def beside(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name + "-"))


@pytest.mark.parametrize(
    "command",
    [["runs", "list"], ["runs", "show", "1"], ["runs", "compare", "1", "2"], ["doctor", "1"]],
)
def test_a_reader_leaves_a_rollback_journal_store_byte_for_byte(
    cli: Cli, tmp_path: Path, command: list[str]
) -> None:
    path = tmp_path / "s.db"
    two_runs(path)
    set_rollback(path)
    before = path.read_bytes()
    result = cli("--db", str(path), *command)
    assert result.code == 0, result.err
    assert path.read_bytes() == before  # was: header bytes 19/20 set to 2 (WAL), counter moved
    assert journal_mode(path) == "delete"
    assert beside(path) == []


def test_a_writer_switches_a_rollback_journal_store_to_wal_as_it_writes(
    cli: Cli, tmp_path: Path
) -> None:
    path = tmp_path / "s.db"
    two_runs(path)
    set_rollback(path)
    result = cli("--db", str(path), "runs", "tag", "1", "k=v")
    assert result.code == 0, result.err
    assert journal_mode(path) == "wal"  # readers never wait on this writer's successors
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT run_id, key, value FROM tags").fetchall() == [(1, "k", "v")]


def test_a_new_store_is_made_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    two_runs(path)
    assert journal_mode(path) == "wal"


def meta_without_runs(path: Path) -> None:
    """dlperf's meta rows at the current version, and no `runs` table."""
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE meta(key text, value text)")
        conn.execute(
            "INSERT INTO meta VALUES ('store_id', 'abcdefabcdef'), ('schema_version', '3')"
        )
        conn.commit()


@pytest.mark.parametrize(
    "command",
    [
        ["runs", "list"],
        ["runs", "show", "1"],
        ["doctor"],
        ["report", "--out", "site"],
        ["runs", "tag", "1", "a=b"],  # a writer
        ["run", "tiny.toml"],  # a writer that makes a run
    ],
)
def test_a_store_refused_as_damaged_is_never_written(
    cli: Cli, tmp_path: Path, tiny_exp: Callable[..., Path], command: list[str]
) -> None:
    path = tmp_path / "m4.db"
    meta_without_runs(path)
    tiny_exp(epochs=1)
    before = path.read_bytes()
    result = cli("--db", str(path), *command)
    assert result.code == 2
    assert result.err == (
        f"error: run store {path} is damaged (no such table: runs; its tables are not as dlperf "
        "made them); dlperf neither reads nor writes it (restore it from a backup, or copy "
        f"what is still readable into a new store with `dlperf --db {path} runs repair "
        "NEW.db`)\n"
    )
    assert path.read_bytes() == before  # was: switched to WAL, bytes 19, 20, 28 and 96
    assert journal_mode(path) == "delete"
    assert beside(path) == []
