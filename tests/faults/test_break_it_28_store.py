"""Break-it round 28, part P3, fix task C: the run store on SQLite and PostgreSQL.

C1. A PostgreSQL database's, role's or URL's extra_float_digits rounded every float dlperf
    read (metrics, wall times): the server prints floats as text with that many digits.
    Its sessions now read floats at full precision, whatever the settings.
C2. A SQLite file or database whose only table is `meta` (another program's key/value table)
    was migrated as an old store: a traceback (NoSuchTableError: runs), the file switched to
    WAL. It is refused as not dlperf's in one line, exit 2, the file untouched.
C3. Tag and metric-key order followed PostgreSQL's collation (ICU en-US), not SQLite's code
    point order: one order on both now.
C4. A read of a SQLite store not in WAL mode that another program held (a sqlite3 shell's
    BEGIN EXCLUSIVE) waited the busy timeout three times over (92 s), said only "database is
    locked", and held Ctrl-C ~26 s in SQLite's busy handler. It waits once, in attempts a
    stop ends at once, and says the writers' line (exit 1).
C7. A search_path of no schema that exists sent the user to "fix search_path in the URL"
    where the URL had none (the database's or the role's setting), and to create a schema
    "Mixed" that exists (PostgreSQL folds the unquoted name to mixed). The fix names where
    the setting comes from, and quoting.
C8. `sqlite:///:memory:` was named `sqlite:///%3Amemory%3A` in its refusal.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, text

import dlperf
from dlperf.exporters import metric_series
from dlperf.store import RunStore, runstore
from tests.conftest import POSTGRES, CliResult, fresh_store_url

Cli = Callable[..., CliResult]


def one_line(result: CliResult, code: int, *parts: str) -> str:
    """Exit `code` and one error line, the only line on stderr, holding each of `parts`."""
    assert result.code == code, (result.out, result.err)
    assert result.err.startswith("error: ") and result.err.count("\n") == 1, result.err
    for part in parts:
        assert part in result.err, result.err
    return result.err.strip()


@pytest.fixture
def own_database() -> Iterator[Callable[..., str]]:
    """Makes databases of this test's own (`make(settings, create=...)`: ALTER DATABASE ...
    SET each setting), dropped after; skips without a server."""
    if not POSTGRES:
        pytest.skip("PostgreSQL store tests need a server: set DLPERF_TEST_POSTGRES_URL")
    admin = create_engine(POSTGRES, isolation_level="AUTOCOMMIT")
    made: list[str] = []

    def make(settings: dict[str, str] | None = None, create: str = "") -> str:
        name = f"fx28_c_{uuid.uuid4().hex[:8]}"
        with admin.connect() as conn:
            conn.execute(text(f"CREATE DATABASE {name} {create}"))
            made.append(name)
            for key, value in (settings or {}).items():
                conn.execute(text(f"ALTER DATABASE {name} SET {key} = {value}"))
        return make_url(POSTGRES).set(database=name).render_as_string(hide_password=False)

    try:
        yield make
    finally:
        with admin.connect() as conn:
            for name in made:
                conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()


# C1

LOSSES = [1.1, 0.43333333333333335]


@pytest.mark.parametrize("where", ["database", "url"])
def test_extra_float_digits_does_not_round_what_is_read(
    where: str, own_database: Callable[..., str], cli: Cli
) -> None:
    """Before: `train/loss` read [1.0, 0.4] (the database's -15), the wall times 2e9."""
    url = own_database({"extra_float_digits": "-15"} if where == "database" else None)
    with dlperf.track("x", config={}, store=url) as r:
        for step, loss in enumerate(LOSSES, 1):
            r.log(step, loss=loss)
    if where == "url":
        url = make_url(url).update_query_dict({"options": "-cextra_float_digits=-15"})
        url = url.render_as_string(hide_password=False)
    done = cli("--db", url, "runs", "show", "1", "--json")
    assert done.code == 0, done.err
    assert json.loads(done.out)["epochs"]["train/loss"] == LOSSES
    store = dlperf.Store(url)
    assert store.metrics(1, "train/loss") == [(1, 1.1), (2, 0.43333333333333335)]
    walls = [wall for _, _, wall in metric_series(RunStore.open(url), 1)["train/loss"]]
    assert all(1.7e9 < wall < 1.9e9 for wall in walls) and walls[0] != walls[1], walls


# C2

META = (
    "CREATE TABLE meta (key VARCHAR(40) NOT NULL PRIMARY KEY, value TEXT NOT NULL);"
    "INSERT INTO meta VALUES ('app', 'otherapp'), ('version', '7');"
)


@pytest.mark.parametrize("rows", ["another program's", "a store id alone"])
@pytest.mark.parametrize("command", [("runs", "list"), ("runs", "tag", "1", "a=1")])
def test_a_file_with_only_a_meta_table_is_not_a_store(
    rows: str, command: tuple[str, ...], cli: Cli, tmp_path: Path
) -> None:
    """Before: a traceback ending `NoSuchTableError: runs`, exit 1, the file switched to WAL."""
    path = tmp_path / "f1.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(META)
        if rows != "another program's":
            conn.executescript(
                "DELETE FROM meta; INSERT INTO meta VALUES ('store_id', '0123456789ab');"
            )
        conn.commit()
    before = path.read_bytes()
    done = cli("--db", str(path), *command)
    one_line(done, 2, f"run store sqlite:///{path} holds tables that are not dlperf's: meta")
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f1.db"]


def test_a_database_with_only_a_meta_table_is_not_a_store(
    own_database: Callable[..., str], cli: Cli
) -> None:
    """Before: `cannot open run store ...: relation "runs" does not exist`."""
    url = own_database()
    engine = create_engine(url)
    with engine.begin() as conn:
        for statement in META.split(";")[:2]:
            conn.execute(text(statement))
    engine.dispose()
    done = cli("--db", url, "runs", "list")
    one_line(done, 2, "holds tables that are not dlperf's: meta")


# C3

TAGS = ["B=1", "a=2", "_x=3", "A=4", "1=5", "a-b=6", "a.b=7", "Z=8"]
METRICS = ["B", "a", "_x", "é", "Z/1", "a/b", "a-b", "a.b", "A", "-z", "1"]


@pytest.fixture(params=["sqlite", "postgresql"])
def collated(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A new SQLite store, or a PostgreSQL database whose collation is ICU en-US."""
    if request.param == "sqlite":
        yield from fresh_store_url("sqlite", tmp_path, "fx28c")
        return
    make = request.getfixturevalue("own_database")
    yield make(create="TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'")


def test_tags_and_metric_keys_come_in_code_point_order(collated: str, cli: Cli) -> None:
    """Before, on ICU en-US: tags `_x 1 a A a-b a.b B Z`, metric keys `a/b, train/_x, ...`."""
    with dlperf.track("r", config={}, store=collated) as r:
        r.log(1, **{key: 1.0 for key in METRICS})
    store = dlperf.Store(collated)
    done = cli("--db", collated, "runs", "tag", "1", *TAGS)
    assert done.code == 0, done.err
    listed = cli("--db", collated, "runs", "list", "--json")
    tags = list(json.loads(listed.out)[0]["tags"])
    expected = ["1", "A", "B", "Z", "_x", "a", "a-b", "a.b"]
    assert tags == sorted(t.split("=")[0] for t in TAGS) == expected
    keys = store.metric_keys(1)
    assert keys == sorted(keys) and len(keys) == len(METRICS), keys
    assert keys[:3] == ["Z/1", "a/b", "train/-z"]
    # and the exports' and frame's order (exporters.metric_series sorted in SQL too)
    assert list(metric_series(RunStore.open(collated), 1)) == keys


# C4

EVENT_S = 120  # how long a busy machine may take to get somewhere: a deadline, not a wait


@contextmanager
def held_exclusive(path: Path) -> Iterator[None]:
    """A store at `path` in rollback-journal mode, which another connection holds in BEGIN
    EXCLUSIVE (as a sqlite3 shell would) until the block ends: no read gets in meanwhile."""
    store = RunStore.open(str(path))
    store.finish_run(store.create_run("r", "exp", {"a": 1}))
    store.engine.dispose()
    with closing(sqlite3.connect(path, isolation_level=None)) as holder:
        assert holder.execute("PRAGMA journal_mode=delete").fetchone() == ("delete",)
        holder.execute("BEGIN EXCLUSIVE")
        holder.execute("UPDATE runs SET name = name")
        try:
            yield
        finally:
            holder.execute("ROLLBACK")


@pytest.mark.parametrize("option", ["", "?mode=ro"])
def test_a_read_of_a_held_store_waits_once_and_says_the_writers_line(
    option: str, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: 3 waits of the busy timeout (the fast reader's own 30 s among them), then
    `cannot open run store ...: database is locked`, exit 2."""
    monkeypatch.setattr(runstore, "BUSY_TIMEOUT_S", 1)
    path = tmp_path / "lk.db"
    with held_exclusive(path):
        start = time.monotonic()
        done = cli("--db", f"sqlite:///{path}{option}", "runs", "list")
        took = time.monotonic() - start
    line = one_line(done, 1, "is locked by another process: waited 1 s to read it")
    assert line.startswith(f"error: run store sqlite:///{path}{option} "), line
    assert "let it end, then try again; ?timeout=SECONDS" in line
    assert took < 10, took


def test_ctrl_c_ends_a_read_waiting_for_a_held_store_at_once(tmp_path: Path) -> None:
    """Before: SIGINT 4 s into the wait ended the process 26 s later (SQLite's busy handler)."""
    path = tmp_path / "lk.db"
    with held_exclusive(path):
        child = subprocess.Popen(
            [sys.executable, "-m", "dlperf", "--db", str(path), "runs", "list"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + EVENT_S
            while not _has_open(child.pid, path):  # it has come to the wait
                assert child.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
            child.send_signal(signal.SIGINT)
            start = time.monotonic()
            _, err = child.communicate(timeout=EVENT_S)
            took = time.monotonic() - start
        finally:
            child.kill()
            child.wait()
    assert child.returncode == 130, err
    assert took < 5, took


def _has_open(pid: int, path: Path) -> bool:
    fds = Path(f"/proc/{pid}/fd")
    try:
        return any(os.readlink(fd) == str(path) for fd in fds.iterdir())
    except OSError:  # a descriptor closed as it was listed
        return False


# C7


def test_a_mixed_case_schema_unquoted_is_told_to_be_quoted(
    own_database: Callable[..., str], cli: Cli
) -> None:
    """Before: `schema Mixed does not exist (create it, or fix search_path in the URL)`."""
    url = own_database()
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text('CREATE SCHEMA "Mixed"'))
    engine.dispose()
    given = make_url(url).update_query_dict({"options": "-csearch_path=Mixed"})
    done = cli("--db", given.render_as_string(hide_password=False), "runs", "list")
    one_line(
        done,
        2,
        'schema Mixed does not exist (unquoted, PostgreSQL reads it as mixed; "Mixed" exists)',
        "(quote it: ?options=-csearch_path%3D%22Mixed%22 in the URL)",
    )
    quoted = make_url(url).update_query_dict({"options": '-csearch_path="Mixed"'})
    assert cli("--db", quoted.render_as_string(hide_password=False), "runs", "list").code == 0


@pytest.mark.parametrize("where", ["database", "role"])
def test_a_search_path_the_url_does_not_set_is_fixed_where_it_is_set(
    where: str, own_database: Callable[..., str], cli: Cli
) -> None:
    """Before: `schema nosuch does not exist (create it, or fix search_path in the URL)`."""
    url = own_database({"search_path": "nosuch"} if where == "database" else None)
    database, role = make_url(url).database, make_url(url).username
    reset = f"ALTER DATABASE {database} RESET search_path"
    if where == "role":
        admin = create_engine(url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f"ALTER ROLE {role} IN DATABASE {database} SET search_path = nosuch"))
        admin.dispose()
        reset = f"ALTER ROLE {role} IN DATABASE {database} RESET search_path"
    done = cli("--db", url, "runs", "list")
    one_line(
        done,
        2,
        f"schema nosuch does not exist (create it, or {reset}, or give the URL a search_path "
        "of its own: ?options=-csearch_path%3DSCHEMA)",
    )


# C8


def test_an_in_memory_store_is_named_as_typed(cli: Cli) -> None:
    """Before: `run store sqlite:///%3Amemory%3A is in memory`."""
    done = cli("--db", "sqlite:///:memory:", "runs", "list")
    one_line(done, 2, "run store sqlite:///:memory: is in memory")
