"""What the ninth break-it round (half B) found in the run store, reproduced first: a foreign
SQLite file switched to WAL before it was refused (and, while its own program read it, a
30-second wait for "database is locked"); a study id past the id column's range a traceback;
a lone surrogate in a run's name or a metric key a UnicodeEncodeError from the driver; -0.0
read back as 0.0 on SQLite and -0.0 on PostgreSQL; and a store path's control characters
printed raw."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest

from dlperf.errors import UserError
from dlperf.store import RunStore
from dlperf.store.reading import SqliteListing
from tests.conftest import CliResult, fresh_store_url
from tests.faults.test_store_faults import one_line
from tests.sweep.test_sweep import write_sweep

Cli = Callable[..., CliResult]


# --- a foreign SQLite file is refused as it was: no WAL, no -wal or -shm beside it ------------


@pytest.fixture
def foreign(tmp_path: Path) -> Path:
    """Another program's SQLite file, in the default rollback journal: `notes`."""
    path = tmp_path / "app.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE notes (a)")
        conn.execute("INSERT INTO notes VALUES ('kept')")
        conn.commit()
    return path


def journal_mode(path: Path) -> str:
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])


@pytest.mark.parametrize(
    "args",
    [("runs", "list"), ("runs", "show", "1"), ("runs", "tag", "1", "a=b"), ("doctor",)],
)
def test_a_foreign_file_is_refused_and_left_as_it_was(
    cli: Cli, foreign: Path, args: tuple[str, ...]
) -> None:
    """`runs list` refused app.db rightly, but had switched it to WAL first: its journal
    mode 'wal', its header's bytes changed, app.db-wal and app.db-shm left beside it."""
    before = foreign.read_bytes()
    result = cli("--db", str(foreign), *args)
    one_line(result, 2, "holds tables that are not dlperf's: notes")
    assert journal_mode(foreign) == "delete"
    assert foreign.read_bytes() == before
    assert sorted(p.name for p in foreign.parent.iterdir()) == ["app.db"]


def test_a_foreign_file_its_program_is_reading_is_refused_at_once(cli: Cli, foreign: Path) -> None:
    """With the other program in a read transaction, switching to WAL waits for it: `runs
    list` waited the busy timeout and said `database is locked`. It reads nothing it would
    wait for: the foreign line at once (a 1 s timeout, so that the old way fails fast)."""
    with closing(sqlite3.connect(foreign)) as reader:
        reader.isolation_level = None
        reader.execute("BEGIN")
        reader.execute("SELECT * FROM notes").fetchall()  # a shared lock, held
        result = cli("--db", f"sqlite:///{foreign}?timeout=1", "runs", "list")
        reader.execute("COMMIT")
    one_line(result, 2, "holds tables that are not dlperf's: notes")
    assert journal_mode(foreign) == "delete"


def test_a_dlperf_store_still_opens_in_wal(cli: Cli, tmp_path: Path) -> None:
    """The check reads only: a new store, and a first-release one, are made and migrated as
    before, in WAL mode."""
    path = tmp_path / "new.db"
    assert cli("--db", str(path), "runs", "tag", "1", "a=b").code == 2  # no run 1: made
    assert journal_mode(path) == "wal"
    store = RunStore.open(str(path))
    store.create_run("r", "run", {})
    store.engine.dispose()
    assert cli("--db", str(path), "runs", "list").code == 0


# --- a study id the id column cannot hold is "no study N", as a run id is "no run N" -----------


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "bk9")


@pytest.fixture
def any_store(store_url: str) -> Iterator[RunStore]:
    store = RunStore.open(store_url)
    store.create_run("r", "run", {}, study_id=store.create_study("s", "sweep"))
    yield store
    store.engine.dispose()


# Past PostgreSQL's integer (2**31), past SQLite's (2**63), and none an id can be.
OUT_OF_RANGE = [2**31, 2**63, 10**20, 0, -1, -(2**63) - 1]


@pytest.mark.parametrize("study_id", OUT_OF_RANGE)
def test_a_study_id_out_of_range_is_no_study(any_store: RunStore, study_id: int) -> None:
    """An OverflowError traceback on SQLite from 2**63, psycopg's NumericValueOutOfRange on
    PostgreSQL from 2**31: the store says "no study N" to every caller."""
    with pytest.raises(UserError, match=f"^no study {study_id} in the store$"):
        any_store.get_study(study_id)
    assert any_store.list_runs(study_id=study_id) == []
    assert any_store.get_study(1)["name"] == "s"  # as before


@pytest.mark.parametrize("study_id", OUT_OF_RANGE)
def test_runs_list_reads_an_out_of_range_study_as_none(tmp_path: Path, study_id: int) -> None:
    """`runs list`'s own SQLite reader, as the store."""
    store = RunStore.open(str(tmp_path / "s.db"))
    store.create_study("s", "sweep")
    store.engine.dispose()
    listing = SqliteListing(tmp_path / "s.db", str(tmp_path / "s.db"))
    with pytest.raises(UserError, match=f"^no study {study_id} in the store$"):
        listing.get_study(study_id)
    assert listing.list_runs(study_id=study_id) == []


@pytest.mark.parametrize(
    "args",
    [
        ("runs", "list", "--study", "{n}"),
        ("runs", "compare", "--study", "{n}"),
        ("report", "--out", "site", "--study", "{n}"),
        ("sweep", "{sweep}", "--resume", "{n}"),
    ],
)
def test_every_command_says_no_study_in_one_line(
    cli: Cli, store_url: str, tmp_path: Path, args: tuple[str, ...]
) -> None:
    sweep = write_sweep(tmp_path, '[grid]\n"train.lr" = [0.05]\n')
    RunStore.open(store_url).engine.dispose()
    for n in (2**31, 10**20):
        given = [a.format(n=n, sweep=sweep) for a in args]
        result = cli("--db", store_url, *given)
        one_line(result, 2, f"no study {n} in the store")
