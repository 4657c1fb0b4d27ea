"""Break-it round 30, part P3, fixer S2: the run store and `--where`.

C2. `runs repair` of a store missing one of dlperf's tables (renamed by hand) reported it as an
    empty table copied cleanly, exit 0: it counts as a damaged stretch (`--json`: missing).
C5. `--where mix="5"` / `tag.x=02` were refused as "not a number ... write it as 5.0" though a
    run holds that very text, and 5.0 selected another run: the text is matched where a run
    holds it, and refused only where none does.
C8. A PostgreSQL URL with port 0 read the server on 5432 (SQLAlchemy drops a falsy port): refused.
C11. A --db with a leading space said "run store directory   does not exist": names with a
    space at an end are quoted, and the line says the path starts (or ends) with one.
C12. `--where final.train/loss=0.5`, a tracked run's result as `runs compare` labels it, was an
    unknown key with the hint 'analyze.train': a summary's nested keys select, and a hint is
    only a key of the same section.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest

import dlperf
from tests.conftest import CliResult, fresh_store_url

Cli = Callable[..., CliResult]


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store nobody opened: a SQLite file, or a PostgreSQL schema of this test's own."""
    yield from fresh_store_url(request.param, tmp_path, "fx30s2")


def one_line(result: CliResult, code: int, line: str) -> None:
    assert result.code == code, (result.out, result.err)
    assert result.err == f"error: {line}\n", result.err


def ids(result: CliResult) -> list[int]:
    assert result.code == 0, result.err
    return [run["id"] for run in json.loads(result.out)]


# C2


@pytest.mark.parametrize(
    ("renamed", "missing"),
    [
        (("metrics",), {"metrics"}),
        (("tags",), {"tags"}),  # a versioned store had them all
        (("meta",), {"meta"}),  # meta came before tags
        (("meta", "tags"), set()),  # a store of the first release, before versions
    ],
)
def test_a_missing_table_is_repaired_as_damage(
    renamed: tuple[str, ...], missing: set[str], tmp_path: Path, cli: Cli
) -> None:
    """Was `metrics │ 0 copied │ 0 left out │ 0 damaged stretches`: a clean copy, its rows
    gone without a word."""
    source = tmp_path / "renamed.db"
    with dlperf.track("p", store=str(source)) as run:
        run.log(1, loss=1.0)
    with closing(sqlite3.connect(source)) as conn:
        for table in renamed:
            conn.execute(f"ALTER TABLE {table} RENAME TO {table}_old")
    result = cli("--db", str(source), "runs", "repair", str(tmp_path / "fixed.db"), "--json")
    assert result.code == 0, result.err  # as for a damaged page: what was read is written
    tables = json.loads(result.out)["tables"]
    assert {name for name, counts in tables.items() if counts["missing"]} == missing
    assert {name for name, counts in tables.items() if counts["skipped_stretches"]} == missing
    if "metrics" in missing:
        shown = cli("--db", str(source), "runs", "repair", str(tmp_path / "again.db"))
        row = "metrics   │ missing │        0 │                         1\n"
        assert row in shown.out, shown.out


# C5


def test_where_matches_text_a_run_holds(backend: str, cli: Cli) -> None:
    """Was "'5' is not a number as --set reads it ... (write it as 5.0)", and 5.0 selected
    the run holding the number."""
    for value in (5, "5"):
        with dlperf.track("m", config={"mix": value}, store=backend) as run:
            run.log(1, loss=1.0)
    assert cli("--db", backend, "runs", "tag", "1", "x=2").code == 0
    assert cli("--db", backend, "runs", "tag", "2", "x=02").code == 0
    listed = ("--db", backend, "runs", "list", "--json", "--where")
    assert ids(cli(*listed, 'mix="5"')) == [2]
    assert ids(cli(*listed, "tag.x=02")) == [2]
    assert ids(cli(*listed, "mix=5.0")) == [1]
    assert ids(cli(*listed, "tag.x=2")) == [1]
    one_line(  # where no run holds the text, the refusal stands
        cli(*listed, "tag.x=2."),
        2,
        "--where tag.x=2.: '2.' is not a number as --set reads it, and tag.x holds numbers "
        "(write it as 2.0)",
    )


# C8


def test_port_0_is_refused(cli: Cli) -> None:
    """Was the runs of the database on port 5432, exit 0."""
    one_line(
        cli("--db", "postgresql+psycopg://u:pw@127.0.0.1:0/db", "runs", "list"),
        2,
        "cannot open run store postgresql+psycopg://u:***@127.0.0.1:0/db: port 0 is not a port "
        "(leave it out for the server's default, 5432 for PostgreSQL)",
    )


# C11


def test_a_space_at_an_end_of_a_store_path_is_named(tmp_path: Path, cli: Cli) -> None:
    """Was `run store directory   does not exist`, the directory ' ' unseen."""
    given = f" {tmp_path}/x.db"
    one_line(
        cli("--db", given, "runs", "list"),
        2,
        f"run store directory ' ' does not exist: the store path '{given}' starts with a space",
    )
    one_line(
        cli("--db", f"{tmp_path}/x.db ", "runs", "show", "1"),
        2,
        f"no run 1: run store '{tmp_path}/x.db ' does not exist: its path ends with a space "
        "(give the store with --db or DLPERF_DB (by default: ./dlperf.db, in the current "
        "directory))",
    )


# C12


def test_where_selects_a_tracked_runs_result(backend: str, cli: Cli) -> None:
    """Was "unknown key 'final.train/loss' (did you mean 'analyze.train'?)"."""
    one_line(
        cli("--db", backend, "runs", "list", "--where", "final.train/loss=0.5"),
        2,
        "--where: unknown key 'final.train/loss' (keys: config keys (model.name, train.lr), "
        "status, kind, name, summary keys (test_accuracy, throughput, final.train/loss) and "
        "tag.NAME)",
    )
    for loss in (0.5, 0.25):
        with dlperf.track("k", store=backend) as run:
            run.log(1, loss=loss)
    listed = ("--db", backend, "runs", "list", "--json", "--where")
    assert ids(cli(*listed, "final.train/loss=0.5")) == [1]
    one_line(
        cli(*listed, "final.train/los=0.5"),
        2,
        "--where: unknown key 'final.train/los' (did you mean 'final.train/loss'?)",
    )
