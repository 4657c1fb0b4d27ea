"""Break-it round 29, part P3, fix task D: the run store on SQLite and PostgreSQL.

C2. A CHECK constraint or UNIQUE index added by hand (PostgreSQL's class 23, SQLite's
    "constraint failed") was a traceback from every write but a run's end mark. It is the
    one line a trigger gets ("not as dlperf made it (a constraint refused ...)"), exit 2;
    `dlperf.track` raises UserError.
C3. A PostgreSQL write refused by row-level security was blamed on missing grants: the line
    names the policy's table and the fix that works.
C4. SQLite: a run row deleted by hand (sqlite3's foreign keys are off) left its metrics,
    and the next run took its id and showed them as its own. New ids stay above every run
    id the other tables mention.
C5. `dlperf.Store` of a SQLite file not there yet (an in-memory stand-in) failed when read
    from another thread. It reads as empty from any thread.
C6. A PostgreSQL store inherited by forked workers shared the parent's pooled connections:
    children at once broke it, and the error said the server went away. A child opens its own.
C7. Pickling a `Store` (a multiprocessing argument) failed in SQLAlchemy's internals. It
    pickles as its URL and reopens where it is loaded.
"""

from __future__ import annotations

import multiprocessing
import pickle
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

import dlperf
from tests.conftest import CliResult, fresh_store_url

Cli = Callable[..., CliResult]


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store nobody opened: a SQLite file, or a PostgreSQL schema of this test's own."""
    yield from fresh_store_url(request.param, tmp_path, "fx29d")


@pytest.fixture
def pg(tmp_path: Path) -> Iterator[str]:
    """A PostgreSQL schema of this test's own; skips without a server."""
    yield from fresh_store_url("postgresql", tmp_path, "fx29d")


def edit(url: str, *statements: str) -> None:
    """Change the store's schema by hand, as psql or sqlite3 would."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            for statement in statements:
                conn.execute(text(statement))
    finally:
        engine.dispose()


def logged(url: str, name: str = "r", steps: tuple[int, ...] = (1,)) -> int:
    with dlperf.track(name, store=url) as run:
        for step in steps:
            run.log(step, loss=1.0 / step)
    return run.id


def one_line(result: CliResult, code: int, *parts: str) -> None:
    assert result.code == code, (result.out, result.err)
    assert result.err.startswith("error: ") and result.err.count("\n") == 1, result.err
    for part in parts:
        assert part in result.err, result.err


# C2


def test_a_constraint_added_by_hand_is_one_line(backend: str, cli: Cli) -> None:
    """Was sqlalchemy.exc.IntegrityError: a traceback from `runs tag`, and from track."""
    logged(backend)
    logged(backend)
    edit(
        backend,
        "CREATE UNIQUE INDEX u ON tags (value)",
        "CREATE UNIQUE INDEX m ON metrics (run_id, key)",
    )
    assert cli("--db", backend, "runs", "tag", "1", "note=x").code == 0
    one_line(
        cli("--db", backend, "runs", "tag", "2", "note=x"),
        2,
        "is not as dlperf made it (a constraint refused an INSERT into tags: ",
    )
    with pytest.raises(dlperf.UserError, match="a constraint refused an INSERT into metrics"):
        logged(backend, steps=(1, 2))
    if backend.startswith("postgresql"):  # SQLite cannot add a CHECK to a table
        edit(backend, "ALTER TABLE tags ADD CONSTRAINT short_tag CHECK (length(value) < 5)")
        one_line(
            cli("--db", backend, "runs", "tag", "1", "other=longvalue"),
            2,
            'violates check constraint "short_tag"',
            "its schema was changed by hand",
        )


# C3


def test_row_level_security_is_named(pg: str) -> None:
    """Was "grant the role INSERT, UPDATE and DELETE": the role owns the tables already."""
    url = pg
    logged(url)
    edit(
        url,
        "ALTER TABLE runs ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE runs FORCE ROW LEVEL SECURITY",
        "CREATE POLICY only_r ON runs USING (name = 'r') WITH CHECK (name = 'r')",
    )
    with pytest.raises(dlperf.UserError) as refused:
        logged(url, "other")
    said = str(refused.value)
    assert "a row-level security policy on runs refuses it" in said, said
    assert "grant" not in said, said
    edit(url, "ALTER TABLE runs DISABLE ROW LEVEL SECURITY")  # the fix it gives
    assert logged(url, "other") == 3  # id 2 went to the refused run's sequence value


# C4


def test_a_run_deleted_by_hand_leaves_no_metrics_to_the_next(tmp_path: Path) -> None:
    """Was run 2 again, with the deleted run's curve (steps 1-3) before its own step 10."""
    path = tmp_path / "o.db"
    logged(str(path), steps=(1, 2, 3))
    logged(str(path), steps=(1, 2, 3))
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("DELETE FROM runs WHERE id = 2")
    with dlperf.track("new", store=str(path)) as run:
        run.log(10, loss=9.0)
    assert run.id == 3
    assert dlperf.Store(str(path)).metrics(run.id, "loss") == [(10, 9.0)]


# C5


def test_a_store_not_there_yet_reads_as_empty_from_another_thread(tmp_path: Path) -> None:
    """Was sqlite3.ProgrammingError: objects created in a thread used in another."""
    store = dlperf.Store(str(tmp_path / "none.db"))
    read: list[object] = []
    reader = threading.Thread(target=lambda: read.append(store.runs(limit=5)))
    reader.start()
    reader.join(timeout=60)
    assert read == [[]]
    assert not (tmp_path / "none.db").exists()


# C6

_INHERITED: dlperf.Store | None = None


def _backend_and_runs(_: int) -> tuple[int, int]:
    """In a forked child: the server process of the connection it reads through, and runs."""
    assert _INHERITED is not None
    engine = _INHERITED._read().engine
    with engine.connect() as conn:
        backend_pid = conn.scalar(text("SELECT pg_backend_pid()"))
    return int(backend_pid), len(_INHERITED.runs())


def test_forked_children_open_their_own_connections(pg: str) -> None:
    """Was the parent's pooled connection: concurrent children broke it (StoreGone, "can't
    change 'autocommit' now")."""
    global _INHERITED
    url = pg
    logged(url)
    _INHERITED = dlperf.Store(url)
    try:
        assert len(_INHERITED.runs()) == 1
        with _INHERITED._read().engine.connect() as conn:  # the connection the pool keeps
            parents = conn.scalar(text("SELECT pg_backend_pid()"))
        with multiprocessing.get_context("fork").Pool(3) as pool:
            got = pool.map(_backend_and_runs, range(6), chunksize=1)
        assert all(runs == 1 for _, runs in got), got
        assert parents not in {pid for pid, _ in got}, (parents, got)
        assert len(_INHERITED.runs()) == 1  # the parent's session is whole
    finally:
        _INHERITED = None


# C7


def test_a_store_pickles_as_its_url(backend: str) -> None:
    """Was AttributeError: Can't pickle local object 'create_engine.<locals>.connect'."""
    reader = dlperf.Store(backend)  # not there yet: a stand-in
    assert pickle.loads(pickle.dumps(reader)).runs() == []
    logged(backend)
    written = dlperf.Store(backend)
    with dlperf.track("r", store=written) as run:  # now it is the writer's store
        run.log(1, loss=1.0)
    for store in (reader, written):
        again = pickle.loads(pickle.dumps(store))
        assert [r.id for r in again.runs()] == [2, 1]
