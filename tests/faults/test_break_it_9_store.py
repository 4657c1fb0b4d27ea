"""What the ninth break-it round (half B) found in the run store, reproduced first: a foreign
SQLite file switched to WAL before it was refused (and, while its own program read it, a
30-second wait for "database is locked"); a study id past the id column's range a traceback;
a lone surrogate in a run's name or a metric key a UnicodeEncodeError from the driver; -0.0
read back as 0.0 on SQLite and -0.0 on PostgreSQL; and a store path's control characters
printed raw."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest

import dlperf
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
    store = RunStore.open(str(path))  # made here (runs tag no longer makes a store)
    assert journal_mode(path) == "wal"
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


# --- text with a lone surrogate is refused at the call, on every backend ----------------------

BAD = "bad\udcffname"  # what Python makes of a file name's byte 0xff that is not UTF-8


def test_a_run_name_that_is_not_utf8_is_refused_before_anything_is_stored(store_url: str) -> None:
    """A UnicodeEncodeError traceback from the driver (SQLite and psycopg alike)."""
    refused = pytest.raises(UserError, match=r"^run name 'bad\\udcffname' is not UTF-8 text")
    with refused, dlperf.track(BAD, store=store_url) as run:
        run.log(1, loss=1.0)
    store = RunStore.open(store_url)
    try:
        assert store.list_runs() == []
    finally:
        store.engine.dispose()


def test_a_metric_key_that_is_not_utf8_is_refused_at_its_call(store_url: str) -> None:
    """The UnicodeEncodeError escaped log(), and the run was stored failed: a UserError at
    that call, and the run's earlier metrics stay."""
    with dlperf.track("ok", store=store_url) as run:
        run.log(1, loss=1.0)
        with pytest.raises(UserError, match=r"^metric key 'k\\udcff' is not UTF-8 text"):
            run.log(2, **{"k\udcff": 1.0})
        run.log(2, loss=0.5)
    store = RunStore.open(store_url)
    try:
        assert store.get_run(1).status == "finished"
        assert store.metrics(1, "train/loss") == [(1, 1.0), (2, 0.5)]
    finally:
        store.engine.dispose()


@pytest.mark.parametrize(
    ("write", "said"),
    [
        (lambda s: s.create_study(BAD, "sweep"), r"study name 'bad\\udcffname'"),
        (lambda s: s.create_run(BAD, "run", {}), r"run name 'bad\\udcffname'"),
        (lambda s: s.set_tags(1, {"k\udcff": "v"}), r"tag key 'k\\udcff'"),
        (lambda s: s.set_tags(1, {"k": BAD}), r"tag 'k': its value 'bad\\udcffname'"),
        (lambda s: s.log_metrics(1, [("k\udcff", 1, 1.0)]), r"metric key 'k\\udcff'"),
    ],
)
def test_the_store_refuses_text_that_is_not_utf8(
    any_store: RunStore, write: Callable[[RunStore], object], said: str
) -> None:
    with pytest.raises(UserError, match=f"^{said} is not UTF-8 text"):
        write(any_store)
    assert [r.name for r in any_store.list_runs()] == ["r"]
    assert any_store.get_run(1).tags == {}
    assert any_store.metric_keys(1) == []


def test_an_error_that_is_not_utf8_still_marks_the_run_failed(store_url: str) -> None:
    """A run that failed with such text (or a NUL, which PostgreSQL's text refuses) in its
    exception: marking it failed raised a UnicodeEncodeError in the exception's place, and
    left the run `running` (listed lost). Its error is kept escaped."""
    with pytest.raises(ValueError, match=r"^x"), dlperf.track("ok", store=store_url):
        raise ValueError("x\udcff y\x00z")
    store = RunStore.open(store_url)
    try:
        run = store.get_run(1)
        assert (run.status, run.error) == ("failed", "ValueError: x\\udcff y\\x00z")
    finally:
        store.engine.dispose()


# --- -0.0 reads back as 0.0 on every backend -------------------------------------------------


def test_negative_zero_reads_back_the_same_on_every_backend(any_store: RunStore) -> None:
    """SQLite kept -0.0 as 0.0, PostgreSQL as -0.0: an export or a comparison of one run in
    two stores differed. Both keep 0.0 now; a NaN stays NaN."""
    any_store.log_metrics(1, [("train/loss", 5, -0.0), ("train/loss", 6, float("nan"))])
    with dlperf.track("t", store=any_store.engine.url.render_as_string(False)) as run:
        run.log(1, loss=-0.0)
    [(five, zero), (six, nan)] = any_store.metrics(1, "train/loss")
    assert (five, zero, math.copysign(1.0, zero)) == (5, 0.0, 1.0)
    assert (six, math.isnan(nan)) == (6, True)
    [(_, tracked)] = any_store.metrics(2, "train/loss")
    assert math.copysign(1.0, tracked) == 1.0


# --- a store path's control characters are shown escaped, on one line ------------------------


def no_raw_control(result: CliResult) -> None:
    """One line, no ESC, CR or other control character reaching the terminal."""
    assert not any(c in result.err for c in "\x1b\r\x07\x7f\x9b"), repr(result.err)


@pytest.mark.parametrize("odd", ["no\ndir", "no\x1b[31mdir", "no\rdir\x07"])
@pytest.mark.parametrize("args", [("runs", "tag", "1", "a=b"), ("runs", "list"), ("doctor",)])
def test_a_missing_directory_is_named_escaped(
    cli: Cli, tmp_path: Path, odd: str, args: tuple[str, ...]
) -> None:
    """`run store directory /tmp/no<newline>dir does not exist`: two lines on stderr, and
    ESC [31m turned the terminal red."""
    shown = repr(odd)[1:-1]
    for db in (str(tmp_path / odd / "x.db"), f"sqlite:///{tmp_path / odd / 'x.db'}"):
        result = cli("--db", db, *args)
        one_line(result, 2, f"run store directory {tmp_path}/{shown} does not exist")
        no_raw_control(result)


def test_every_line_naming_the_store_escapes_it(cli: Cli, tmp_path: Path) -> None:
    """A directory given as the store, a dangling link's directory, a foreign file, a store
    of a newer dlperf and a damaged one, each in a directory whose name holds ESC and a
    newline."""
    odd = tmp_path / "a\x1b[31m\nb"
    odd.mkdir()
    shown = f"{tmp_path}/a\\x1b[31m\\nb"
    one_line(cli("--db", str(odd), "runs", "list"), 2, f"run store {shown} is a directory")
    (odd / "link.db").symlink_to(odd / "gone" / "x.db")
    one_line(
        result := cli("--db", str(odd / "link.db"), "runs", "list"),
        2,
        f"run store directory {shown}/gone does not exist",
    )
    no_raw_control(result)
    with closing(sqlite3.connect(odd / "app.db")) as conn:
        conn.execute("CREATE TABLE notes (a)")
    for args in (("runs", "list"), ("runs", "tag", "1", "a=b")):
        result = cli("--db", str(odd / "app.db"), *args)
        one_line(result, 2, "app.db holds tables that are not dlperf's: notes")
        no_raw_control(result)
    newer = odd / "newer.db"
    RunStore.open(str(newer)).engine.dispose()
    with closing(sqlite3.connect(newer)) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
        conn.commit()
    result = cli("--db", str(newer), "runs", "tag", "1", "a=b")
    one_line(result, 2, "newer.db has schema version 99")
    no_raw_control(result)
    damaged = odd / "damaged.db"
    store = RunStore.open(str(damaged))
    store.log_metrics(store.create_run("r", "run", {}), [("k", s, 1.0) for s in range(3000)])
    store.engine.dispose()
    with damaged.open("r+b") as f:  # pages 3 to 6: metric rows
        f.seek(2 * 4096)
        f.write(bytes(range(256)) * 64)
    result = cli("--db", str(damaged), "runs", "show", "1")
    one_line(result, 2, f"run store {shown}/damaged.db is damaged")
    no_raw_control(result)
