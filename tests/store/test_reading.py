"""dlperf.store.reading: a current SQLite store listed through `sqlite3` reads exactly as
`RunStore` reads it, and every store it cannot vouch for goes the long way (None)."""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from dlperf.errors import UserError
from dlperf.procs import this_process
from dlperf.store import RunStore, integrity, migrations, reading, schema
from dlperf.store.reading import SqliteListing, sqlite_listing

DEAD_PID = 2**22 + 1  # above Linux's pid_max: no process has it


def file_of(db: str) -> Path:
    return Path(db.removeprefix("sqlite:///"))


@pytest.fixture
def filled(store: RunStore) -> RunStore:
    """Runs of two kinds, one in a study, tagged and untagged, finished, failed, running,
    lost (its process gone), without a summary, with non-ASCII text and nested config."""
    study = store.create_study("lr sweep", "sweep")
    me = this_process()
    for i in range(7):
        config = {"model": {"name": "smallcnn"}, "train": {"lr": 0.1 * i, "betas": [0.9, 0.99]}}
        kind = "sweep" if i % 3 == 0 else "run"
        run = store.create_run(
            f"run-é{i}", kind, config, f"h{i}", {"host": "h"}, study if i % 2 else None
        )
        if i == 5:  # a process that is gone: reads as lost
            store.update_run(run, system={"host": me["host"], "process": {**me, "pid": DEAD_PID}})
        if i < 4:
            store.finish_run(
                run, "failed" if i == 2 else "finished", {"test_accuracy": 0.5 + i / 10}
            )
        if i in (1, 3):
            store.set_tags(run, {"b": "2", "a": f"x{i}"})
    return store


@pytest.mark.parametrize(
    "args",
    [
        {},
        {"kind": "run"},
        {"kind": "sweep"},
        {"study_id": 1},
        {"limit": 3},
        {"kind": "run", "limit": 1},
        {"kind": "none"},
    ],
    ids=str,
)
def test_a_listing_reads_as_the_store_does(filled: RunStore, db: str, args: dict) -> None:
    listing = sqlite_listing(db)
    assert isinstance(listing, SqliteListing)
    expected = filled.list_runs(**args)
    assert listing.list_runs(**args) == expected
    if not args:  # the fixture's variety is there to be compared
        assert {r.status for r in expected} == {"finished", "failed", "running", "lost"}
        assert [r.tags for r in expected if r.tags] == [
            {"a": "x3", "b": "2"},
            {"a": "x1", "b": "2"},
        ]
        assert list(expected[3].tags) == ["a", "b"]  # in key order


def test_a_study_reads_as_the_store_does(filled: RunStore, db: str) -> None:
    listing = sqlite_listing(db)
    assert listing is not None
    assert listing.get_study(1) == filled.get_study(1)
    for missing in (2, 0, -1):
        with pytest.raises(UserError, match=f"^no study {missing} in the store$"):
            listing.get_study(missing)
    with pytest.raises(Exception) as long_way:  # past 64 bits: whatever the store says
        filled.get_study(2**70)
    with pytest.raises(long_way.type, match=re.escape(str(long_way.value))):
        listing.get_study(2**70)


def test_a_missing_or_empty_file_is_a_store_without_runs_left_unmade(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    for db in (str(empty), f"sqlite:///{tmp_path / 'missing.db'}"):
        listing = sqlite_listing(db)
        assert listing is not None and listing.list_runs() == []
        # said as the store says it: not there (round 66), or an empty file
        with pytest.raises(
            UserError,
            match=r"^no study 1: run store .* (does not exist|is an empty file) \(give the store",
        ):
            listing.get_study(1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]
    assert empty.stat().st_size == 0


@pytest.mark.parametrize(
    "db",
    [
        "postgresql+psycopg://u:p@localhost/db",
        "sqlite+pysqlite:///x.db",
        "sqlite://",
        "sqlite:///:memory:",
        "sqlite:///x.db?mode=ro",
        "sqlite:///a%20b.db",
        "no-such-directory/x.db",
    ],
)
def test_what_only_the_store_can_open_goes_the_long_way(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert sqlite_listing(db) is None


def test_the_default_store_is_dlperf_db_here(
    filled: RunStore, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(file_of(db).parent)
    for default in (None, "", "dlperf.db"):
        listing = sqlite_listing(default)
        assert listing is not None and len(listing.list_runs()) == 7


def test_a_store_to_migrate_goes_the_long_way(filled: RunStore, db: str) -> None:
    """An older store is upgraded when opened, even by a reader: a write only the store does."""
    filled.engine.dispose()
    with sqlite3.connect(file_of(db)) as conn:
        conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    assert sqlite_listing(db) is None
    assert len(RunStore.open(db, create=False).list_runs()) == 7  # and that way reads it


def test_a_store_not_in_wal_mode_goes_the_long_way(filled: RunStore, db: str) -> None:
    filled.engine.dispose()
    conn = sqlite3.connect(file_of(db))
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    assert sqlite_listing(db) is None


def test_a_file_that_is_no_store_goes_the_long_way(tmp_path: Path) -> None:
    text = tmp_path / "notes.db"
    text.write_text("not a database, but not empty either\n" * 200)
    assert sqlite_listing(str(text)) is None
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE runs (x)")
    assert sqlite_listing(str(foreign)) is None


def test_a_damaged_store_goes_the_long_way_which_refuses_it(filled: RunStore, db: str) -> None:
    filled.engine.dispose()
    path = file_of(db)
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'runs'").fetchone()[0]
    data = bytearray(path.read_bytes())
    start = (root - 1) * page
    data[start : start + page] = b"\xff" * page  # the runs table's root page, garbled
    path.write_bytes(bytes(data))
    assert sqlite_listing(db) is None
    with pytest.raises(UserError, match="is damaged"):
        RunStore.open(db, create=False)


def test_a_read_that_fails_is_answered_the_long_way(
    filled: RunStore, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    listing = sqlite_listing(db)
    assert listing is not None

    def locked(self: SqliteListing) -> None:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(SqliteListing, "_connection", locked)
    assert listing.list_runs(kind="run") == filled.list_runs(kind="run")
    assert listing.get_study(1) == filled.get_study(1)


def test_its_constants_are_the_store_s() -> None:
    """The reader names the schema's facts without importing it (SQLAlchemy); they must stay
    the schema's, or a current store would go the long way, or an old one be misread."""
    assert reading.SCHEMA_VERSION == migrations.SCHEMA_VERSION
    assert (reading.VERSION_KEY, reading.STORE_ID) == (schema.VERSION_KEY, schema.STORE_ID)
    assert reading.CHECK_MAX_BYTES == integrity.CHECK_MAX_BYTES
    columns = [c.name for c in schema.Run.__table__.columns if c.name != "owner"]
    assert reading.RUN_COLUMNS.split(", ") == columns


def test_the_listing_imports_no_sqlalchemy(filled: RunStore, db: str) -> None:
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "from dlperf.store.reading import sqlite_listing\n"
        f"assert len(sqlite_listing({db!r}).list_runs()) == 7\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sqlalchemy'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=os.environ
    )
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr


def test_runs_list_prints_the_same_either_way(filled: RunStore, db: str, cli: Any) -> None:
    """The command's table and JSON, read through sqlite3 and (forced by ?mode=ro, which
    only the store opens) through SQLAlchemy."""
    filled.engine.dispose()
    long_way = f"{db}?mode=ro"
    assert sqlite_listing(db) is not None and sqlite_listing(long_way) is None
    table, document = (
        ["runs", "list"],
        ["runs", "list", "--json", "--kind", "run", "--limit", "3"],
    )
    for args in (table, document):
        quick, slow = cli("--db", db, *args), cli("--db", long_way, *args)
        assert (quick.code, quick.err) == (0, "")
        assert quick.out == slow.out
    listed = cli("--db", db, *table).out
    assert all(status in listed for status in ("lost", "running", "failed", "tags"))
