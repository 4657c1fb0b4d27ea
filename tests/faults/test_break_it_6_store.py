"""The store defect of the sixth break-it round (issue 41), reproduced first: `runs repair`
over a store of a newer schema than this dlperf's."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

from tests.conftest import CliResult
from tests.faults.test_break_it_4_store import a_run
from tests.faults.test_break_it_5_store import files_in, listed
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


def set_version(path: Path, version: str, *newer: str) -> None:
    """Write `version` as the store's schema version, then run the `newer` statements."""
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (version,))
        for statement in newer:
            conn.execute(statement)
        conn.commit()


# --- R07, R08: a store of a newer schema "repaired" into this dlperf's ----------------------


def test_a_repair_refuses_a_store_of_a_newer_schema(cli: Cli, tmp_path: Path) -> None:
    """Schema 99 with a runs.energy_j column and a table newthing: `runs repair` exited 0 with
    "left out 0" and wrote a schema-3 store without either, while `runs list` refused it."""
    source = tmp_path / "s.db"
    a_run(source)
    set_version(
        source,
        "99",
        "ALTER TABLE runs ADD COLUMN energy_j REAL",
        "UPDATE runs SET energy_j = 12.5",
        "CREATE TABLE newthing (x INT)",
        "INSERT INTO newthing VALUES (1)",
    )
    before = source.read_bytes()
    newer = "has schema version 99, newer than this dlperf's 3"
    one_line(cli("--db", str(source), "runs", "list"), 2, newer)
    result = cli("--db", str(source), "runs", "repair", "o.db")
    one_line(result, 2, f"run store {source} {newer}", "upgrade dlperf to repair it")
    assert files_in(tmp_path) == ["s.db"]  # no o.db, no temporary
    assert source.read_bytes() == before


def test_a_repair_still_copies_a_store_whose_version_is_damaged(cli: Cli, tmp_path: Path) -> None:
    """A version no dlperf writes is damage, which repair is for: it is not read as newer."""
    source = tmp_path / "s.db"
    run_id = a_run(source)
    set_version(source, "9x")
    result = cli("--db", str(source), "runs", "repair", "o.db")
    assert result.code == 0, result.err
    assert listed(cli, "--db", str(tmp_path / "o.db")) == [run_id]
