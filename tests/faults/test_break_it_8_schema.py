"""A store whose schema was edited by hand (the eighth break-it round, issue 41, half B),
reproduced first: a trigger that refuses a write (`RAISE(ABORT, 'nope')`), a table replaced
by a view, and on PostgreSQL a column dropped or a trigger added. Each was a traceback of
25 to 171 lines, exit 1, and a run whose metric write was refused stored the SQL as its
error; each is now one line naming the store, what refused and the fix, exit 2."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from dlperf.store import RunStore
from tests.conftest import CliResult, fresh_store_url
from tests.faults.test_break_it_7_damage import edit, two_runs
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


def two_runs_with_metrics(path: Path) -> None:
    """Two finished runs, each with metric rows (a trigger on metrics fires per row)."""
    two_runs(path)
    store = RunStore.open(str(path))
    try:
        for run_id in (1, 2):
            store.log_metrics(run_id, [("train/loss", step, 1.0 / step) for step in (1, 2)])
    finally:
        store.engine.dispose()


def runs_table(path: Path) -> list[tuple[int, str, str | None]]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute("SELECT id, status, error FROM runs ORDER BY id").fetchall()


def stored_as_one_line(error: str | None, *parts: str) -> None:
    """A failed run's error: one line saying what refused, never the SQL that was refused."""
    assert error is not None
    assert "\n" not in error and "INSERT INTO" not in error and "[SQL" not in error, error
    for part in parts:
        assert part in error, error


# --- H02, H13: a trigger added by hand refuses a write ----------------------------------


def test_a_trigger_refusing_metric_rows_fails_the_run_in_one_line(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    """Was a 25-line IntegrityError traceback, exit 1, and the run stored `failed` with
    `(sqlite3.IntegrityError) nope [SQL: INSERT INTO metrics ...]` as its error."""
    path = tmp_path / "x.db"
    two_runs(path)
    edit(path, "CREATE TRIGGER t BEFORE INSERT ON metrics BEGIN SELECT RAISE(ABORT, 'nope'); END")
    result = cli("--db", str(path), "run", str(tiny_exp(epochs=1)))
    one_line(
        result,
        2,
        f"run store {path} is not as dlperf made it",
        "a trigger refused an INSERT into metrics: nope",
        f"--db {path} runs repair NEW.db",
    )
    (*_, (run_id, status, error)) = runs_table(path)
    assert (run_id, status) == (3, "failed")
    stored_as_one_line(error, "a trigger refused an INSERT into metrics: nope")


TRIGGERS = """
CREATE TRIGGER t1 BEFORE INSERT ON tags BEGIN SELECT RAISE(ABORT, 'no tags'); END;
CREATE TRIGGER t2 BEFORE DELETE ON metrics BEGIN SELECT RAISE(ABORT, 'no deleting'); END;
CREATE TRIGGER t3 BEFORE INSERT ON runs BEGIN SELECT RAISE(ABORT, 'no new runs'); END;
"""


@pytest.mark.parametrize(
    ("command", "refused"),
    [
        (["runs", "tag", "1", "a=b"], "an INSERT into tags: no tags"),
        (["runs", "delete", "1", "--yes"], "a DELETE from metrics: no deleting"),
        (["sweep", "sw.toml"], "an INSERT into runs: no new runs"),
    ],
)
def test_a_trigger_refusing_a_write_is_one_line_in_every_command(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path, command: list[str], refused: str
) -> None:
    """Were tracebacks of 92 (`runs tag`), 80 (`runs delete`) and 171 (`sweep`) lines."""
    path = tmp_path / "x.db"
    two_runs_with_metrics(path)
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(TRIGGERS)
    (tmp_path / "sw.toml").write_text(
        f'base = "{tiny_exp(epochs=1)}"\n[grid]\n"train.lr" = [0.05]\n'
    )
    result = cli("--db", str(path), *command)
    one_line(
        result,
        2,
        f"run store {path} is not as dlperf made it",
        f"a trigger refused {refused}",
        f"--db {path} runs repair NEW.db",
    )
    assert [status for _, status, _ in runs_table(path)] == ["finished", "finished"]


# --- H03: the runs table replaced by a view ----------------------------------------------


def test_a_view_in_place_of_the_runs_table_is_one_line(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    """Was `OperationalError: cannot modify runs because it is a view`, a traceback, exit 1."""
    path = tmp_path / "x.db"
    two_runs(path)
    edit(path, "ALTER TABLE runs RENAME TO runs_t")
    edit(path, "CREATE VIEW runs AS SELECT * FROM runs_t")
    result = cli("--db", str(path), "run", str(tiny_exp(epochs=1)))
    one_line(
        result,
        2,
        f"run store {path} is not as dlperf made it",
        "(runs is a view, not a table)",
        "drop the view and rename the table it reads back to runs",
    )
    assert [status for _, status, _ in runs_table(path)] == ["finished", "finished"]


# --- G02, G03: a PostgreSQL store edited by hand -------------------------------------------


@pytest.fixture
def pg_store(tmp_path: Path) -> Iterator[str]:
    """A PostgreSQL store (a schema of its own) holding two finished runs."""
    for url in fresh_store_url("postgresql", tmp_path, "bk8b"):
        store = RunStore.open(url)
        try:
            for name in ("a", "b"):
                run_id = store.create_run(name, "exp", {"train": {"lr": 0.1}})
                store.finish_run(run_id, summary={"epochs": 1})
        finally:
            store.engine.dispose()
        yield url


def pg_edit(url: str, *sql: str) -> list[tuple[int, str, str | None]]:
    """What `psql -c SQL` does in the store's schema; the runs as they are after it."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            for statement in sql:
                conn.execute(text(statement))
            rows = conn.execute(text("SELECT id, status, error FROM runs ORDER BY id"))
            return [(int(i), str(s), e) for i, s, e in rows]
    finally:
        engine.dispose()


def test_a_column_dropped_by_hand_on_postgresql_is_one_line(cli: Cli, pg_store: str) -> None:
    """Was a `psycopg.errors.UndefinedColumn: column runs.owner does not exist` traceback."""
    pg_edit(pg_store, "ALTER TABLE runs DROP COLUMN owner")
    result = cli("--db", pg_store, "runs", "list")
    one_line(
        result,
        2,
        "is not as dlperf made it (column runs.owner does not exist)",
        "its schema was changed by hand",
    )
    assert "dlperf:dlperf@" not in result.err  # the password stays hidden


def test_a_trigger_on_postgresql_fails_the_run_in_one_line(
    cli: Cli, tiny_exp: Callable[..., Path], pg_store: str
) -> None:
    """Was a `psycopg.errors.RaiseException: nope` traceback, the run stored `failed` with
    the SQL as its error."""
    pg_edit(
        pg_store,
        "CREATE FUNCTION nope() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'nope'; END $$ "
        "LANGUAGE plpgsql",
        "CREATE TRIGGER t BEFORE INSERT ON metrics FOR EACH ROW EXECUTE FUNCTION nope()",
    )
    result = cli("--db", pg_store, "run", str(tiny_exp(epochs=1)))
    one_line(
        result,
        2,
        "is not as dlperf made it (a trigger refused an INSERT into metrics: nope)",
        "its schema was changed by hand",
    )
    (*_, (run_id, status, error)) = pg_edit(pg_store)
    assert (run_id, status) == (3, "failed")
    stored_as_one_line(error, "a trigger refused an INSERT into metrics: nope")
