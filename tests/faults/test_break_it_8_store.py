"""What the eighth break-it round (issue 41, half B) found in a store edited by hand,
reproduced first: a trigger that refuses the write marking a run finished left it `running`
behind a traceback (H08), and a metric row whose step, value or wall time holds another
type was a `ValueError` traceback in every command that reads it, and was copied as it was
by `runs repair` (R07, H04, H10)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest
from sqlalchemy import text

from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult, TrainedRun, fresh_store_url
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


def edit(path: Path, sql: str) -> None:
    """What `sqlite3 PATH SQL` does."""
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(sql)
        conn.commit()


def rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(sql).fetchall()


# --- H08: a trigger that refuses the write marking a run finished ---------------------------

NO_FINISHING = (
    "CREATE TRIGGER t BEFORE UPDATE OF status ON runs WHEN new.status = 'finished' "
    "BEGIN SELECT RAISE(ABORT, 'no finishing'); END"
)
NO_ENDING = (
    "CREATE TRIGGER t BEFORE UPDATE OF status ON runs WHEN new.status != 'running' "
    "BEGIN SELECT RAISE(ABORT, 'no ending'); END"
)


@pytest.fixture
def empty_store(db: str, tmp_path: Path) -> Path:
    """The test's store, made and closed, for a trigger to be added to it by hand."""
    RunStore.open(db).engine.dispose()
    return tmp_path / "dlperf.db"


def test_a_run_whose_finish_is_refused_ends_failed_saying_so(
    cli: Cli, tiny_exp: Callable[..., Path], empty_store: Path
) -> None:
    """An IntegrityError traceback (`UPDATE runs SET status=...`), exit 1, and the run left
    `running` (listed `lost`): it is marked failed, the line says the store refused."""
    edit(empty_store, NO_FINISHING)
    result = cli("run", str(tiny_exp(epochs=1)), "--set", "data.limit=200")
    one_line(result, 2, "run 1 is marked failed", "refused to mark it finished (no finishing)")
    [(status, error)] = rows(empty_store, "SELECT status, error FROM runs")
    assert status == "failed"
    assert "refused to mark it finished (no finishing)" in error


@pytest.mark.parametrize("lr", ["0.05", "1000000.0"])  # one that finishes, one that diverges
def test_a_run_no_mark_gets_through_for_says_how_to_fix_it(
    cli: Cli, tiny_exp: Callable[..., Path], empty_store: Path, lr: str
) -> None:
    """No write ends the run: the one line says it could not be marked, and how to fix it."""
    edit(empty_store, NO_ENDING)
    exp = str(tiny_exp(epochs=1))
    result = cli("run", exp, "--set", "data.limit=200", "--set", f"train.lr={lr}")
    one_line(result, 2, "run 1 could not be marked", "(no ending)", "dlperf run --resume 1")
    assert rows(empty_store, "SELECT status FROM runs") == [("running",)]


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "refuse")


# PostgreSQL's trigger, as the SQLite ones above: a function that raises, on the updates WHEN.
PG_TRIGGER = (
    "CREATE OR REPLACE FUNCTION nope() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'nope'; "
    "END $$ LANGUAGE plpgsql",
    "CREATE TRIGGER t BEFORE UPDATE ON runs FOR EACH ROW WHEN ({}) EXECUTE FUNCTION nope()",
)
SQLITE_TRIGGER = (
    "CREATE TRIGGER t BEFORE UPDATE ON runs WHEN {} BEGIN SELECT RAISE(ABORT, 'nope'); END",
)


@pytest.mark.parametrize(
    ("when", "said", "status"),
    [
        ("new.status = 'finished'", "run 1 is marked failed", "failed"),
        ("new.status <> 'running'", "run 1 could not be marked finished", "running"),
    ],
)
def test_the_store_refusing_the_mark_on_either_backend(
    store_url: str, when: str, said: str, status: str
) -> None:
    """The same on PostgreSQL, whose trigger raises RAISE EXCEPTION's P0001."""
    store = RunStore.open(store_url)
    try:
        trigger = SQLITE_TRIGGER if store.engine.dialect.name == "sqlite" else PG_TRIGGER
        with store.engine.begin() as conn:
            for sql in trigger:
                conn.execute(text(sql.format(when)))
        with pytest.raises(UserError, match=f"{said}.*[(]nope[)]"), store.new_run("a", "exp", {}):
            pass
        assert store.get_run(1).status == status  # running: its owner, this process, lives
    finally:
        store.engine.dispose()


# --- R07, H04, H10: a metric row of another type --------------------------------------------

# One row of a key that `runs show` reads (the per-epoch ones), and one that `doctor` reads
# (train/loss, for a diverged run); `runs export` reads them all.
ONE_ROW = "WHERE run_id = 1 AND key = 'val/acc1'"
LOSS_ROW = "WHERE run_id = 1 AND key = 'train/loss' AND step = 2"
STEP_TEXT = (f"UPDATE metrics SET step = 'abc' {ONE_ROW}", "step")
STEP_REAL = (f"UPDATE metrics SET step = 1.5 {ONE_ROW}", "step")
VALUE_TEXT = (f"UPDATE metrics SET value = 'abc' {ONE_ROW}", "value")
WALL_TEXT = (f"UPDATE metrics SET wall_time = 'x' {ONE_ROW}", "wall_time")
SHOW, DOCTOR = ["runs", "show", "1"], ["doctor", "1"]
PLOT, REPORT = ["runs", "plot", "1", "--out", "p.png"], ["report", "--out", "site"]
EXPORT = ["runs", "export", "1", "--to", "tensorboard", "--out", "tb"]


@pytest.mark.parametrize(
    ("sql", "column", "command"),
    [
        (*STEP_TEXT, SHOW),
        (*STEP_TEXT, EXPORT),
        (f"UPDATE metrics SET step = 'abc' {LOSS_ROW}", "step", DOCTOR),
        (*STEP_REAL, SHOW),
        (*VALUE_TEXT, SHOW),
        (*VALUE_TEXT, EXPORT),
        (f"UPDATE metrics SET value = 'abc' {LOSS_ROW}", "value", DOCTOR),
        (*WALL_TEXT, EXPORT),
        (*STEP_TEXT, PLOT),  # report/runs.py's own read
        (*VALUE_TEXT, REPORT),
        (*WALL_TEXT, PLOT),
    ],
)
def test_a_metric_row_of_another_type_is_one_line_naming_the_run(
    cli: Cli,
    trained_digits: TrainedRun,
    tmp_path: Path,
    sql: str,
    column: str,
    command: list[str],
) -> None:
    """`ValueError: invalid literal for int() with base 10: 'abc'` (and for float()), exit 1;
    a step of 1.5 was read as step 1."""
    store, _, _ = trained_digits.copy_to(tmp_path)
    store.engine.dispose()
    path = tmp_path / "dlperf.db"
    edit(path, sql)
    result = cli(*command)
    one_line(result, 2, f"run 1's metrics in run store {path}", column, "runs repair NEW.db")


@pytest.mark.parametrize("sql", [STEP_TEXT[0], STEP_REAL[0], VALUE_TEXT[0], WALL_TEXT[0]])
def test_repair_leaves_out_a_metric_row_of_another_type(
    cli: Cli, trained_digits: TrainedRun, tmp_path: Path, sql: str
) -> None:
    """The fix the line names: the row was copied as it was (and the new store failed the
    same way); it is left out and counted, and the run reads."""
    store, _, _ = trained_digits.copy_to(tmp_path)
    store.engine.dispose()
    path, out = tmp_path / "dlperf.db", tmp_path / "new.db"
    edit(path, sql)
    before = rows(path, "SELECT count(*) FROM metrics")[0][0]
    result = cli("runs", "repair", str(out))
    assert result.code == 0, result.err
    assert rows(out, "SELECT count(*) FROM metrics")[0][0] == before - 1
    line = next(line for line in result.out.splitlines() if line.startswith("metrics"))
    assert [cell.strip() for cell in line.split("│")][2] == "1"  # left out
    shown = cli("--db", str(out), "runs", "show", "1")
    assert shown.code == 0, shown.err
