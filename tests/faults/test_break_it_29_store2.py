"""Break-it round 29, part P3, fix task I: the run store (reviewer 2).

C1. A `Store` named by a relative SQLite path (or the default, or $DLPERF_DB) pickled that
    relative path: a worker in another directory read an empty store, silently. It pickles
    the absolute path, as resolved when the `Store` was made.
C2. SQLite: one run id edited by hand in another table (a TEXT one, or SQLite's largest
    rowid) stopped every new run with a TypeError or OverflowError traceback. New ids are
    taken from integer ids only, and past the largest rowid SQLite chooses.
C5. PostgreSQL: a write refused by a RESTRICTIVE row-level security policy, or by a policy's
    USING expression in an upsert, was blamed on missing grants: the line names the table.
C7. SQLite: a NOT NULL constraint added by hand was a traceback from every new run: it is
    the "not as dlperf made it (a constraint refused ...)" line.
"""

from __future__ import annotations

import os
import pickle
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest

import dlperf
from tests.conftest import CliResult, fresh_store_url
from tests.faults.test_break_it_29_store import edit

Cli = Callable[..., CliResult]


def logged(url: str, name: str = "r") -> int:
    with dlperf.track(name, store=url) as run:
        run.log(1, loss=1.0)
    return run.id


# C1


@pytest.mark.parametrize(
    "named",
    ["runs.db", Path("runs.db"), "sqlite:///runs.db", "$DLPERF_DB", None],
    ids=["path", "Path", "url", "env", "default"],
)
def test_a_relative_store_pickles_its_absolute_path(
    named: str | Path | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was 0 runs in the worker's directory (and no error)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DLPERF_DB", raising=False)
    if named == "$DLPERF_DB":
        monkeypatch.setenv("DLPERF_DB", "runs.db")
        named = None
    file = "runs.db" if os.environ.get("DLPERF_DB") or named is not None else "dlperf.db"
    store = dlperf.Store(named)  # made before the store is: read again at each read
    logged(file)
    blob = pickle.dumps(store)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert [r.id for r in pickle.loads(blob).runs()] == [1]
    assert os.listdir() == []  # no store made where the worker runs


# C2


@pytest.mark.parametrize(
    "edit",
    [
        "INSERT INTO artifacts (run_id, kind, path) VALUES ('x', 'file', 'p')",
        "INSERT INTO tags (run_id, key, value) VALUES (9223372036854775807, 'k', 'v')",
    ],
    ids=["text", "rowid-max"],
)
def test_a_run_id_edited_by_hand_stops_no_new_run(edit: str, tmp_path: Path) -> None:
    """Was TypeError: '>' not supported between 'str' and 'int'; OverflowError."""
    path = str(tmp_path / "e.db")
    logged(path)
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(edit)
    assert logged(path, "next") == 2
    assert [r.name for r in dlperf.Store(path).runs()] == ["next", "r"]


# C5


@pytest.fixture
def pg(tmp_path: Path) -> Iterator[str]:
    """A PostgreSQL schema of this test's own; skips without a server."""
    yield from fresh_store_url("postgresql", tmp_path, "fx29i")


@pytest.mark.parametrize(
    ("table", "policies", "args"),
    [
        (
            "runs",
            [
                "CREATE POLICY allow ON runs USING (true)",
                "CREATE POLICY only_r ON runs AS RESTRICTIVE USING (name = 'r') "
                "WITH CHECK (name = 'r')",
            ],
            ["track"],
        ),
        (  # the upsert's row there is not the policy's to update
            "tags",
            ["CREATE POLICY p ON tags USING (value <> '0') WITH CHECK (true)"],
            ["runs", "tag", "1", "x=1"],
        ),
    ],
    ids=["restrictive", "using"],
)
def test_every_row_level_security_refusal_is_named(
    table: str, policies: list[str], args: list[str], pg: str, cli: Cli
) -> None:
    """Was "grant the role INSERT, UPDATE and DELETE on dlperf's tables": it holds them."""
    logged(pg)
    assert cli("--db", pg, "runs", "tag", "1", "x=0").code == 0
    edit(
        pg,
        f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY",
        f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY",
        *policies,
    )
    if args == ["track"]:
        with pytest.raises(dlperf.UserError) as refused:
            logged(pg, "other")
        said = str(refused.value)
    else:
        result = cli("--db", pg, *args)
        assert result.code == 2 and result.err.count("\n") == 1, result.err
        said = result.err
    assert f"a row-level security policy on {table} refuses it" in said, said
    assert "grant" not in said, said


# C7


def test_a_not_null_constraint_added_by_hand_is_one_line(tmp_path: Path) -> None:
    """Was sqlalchemy.exc.IntegrityError: NOT NULL constraint failed: runs.ended."""
    path = str(tmp_path / "n.db")
    logged(path)
    with closing(sqlite3.connect(path)) as conn, conn:
        (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'runs'").fetchone()
        conn.execute("ALTER TABLE runs RENAME TO runs_old")
        conn.execute(sql.replace("ended DATETIME", "ended DATETIME NOT NULL"))
        conn.execute("INSERT INTO runs SELECT * FROM runs_old")
        conn.execute("DROP TABLE runs_old")
    with pytest.raises(dlperf.UserError, match=r"a constraint refused an INSERT into runs"):
        logged(path, "other")
