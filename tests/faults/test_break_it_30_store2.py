"""Break-it round 30, review 2 of fixer S2's store fixes (fixer T2).

C2. Port 0 given in the query (`?host=127.0.0.1:0`, two host= values, `?port=0`) was dropped by
    SQLAlchemy as the URL's :0 was, and the server on 5432 listed: refused as that :0 is.
C4. A store path ending with a space, not there, gave `doctor` (and `runs list`) no word of the
    space: a reader that lists the runs of such a store says it in one warning line.
C5. `runs repair` of a store whose version row cannot be read was silent about a missing tags
    table: only a store without a meta table is one from before versions.
C10. A name of a store path starting with a tab read "starts with a space, \\tx" unquoted:
    white space at a name's edge is found as written, quoted, and said as "white space".
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

import dlperf
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

URL = "postgresql+psycopg://dlperf:dlperf@/db"
SPACE = "run store '{given}' does not exist: its path ends with a space"
HOW = "(give the store with --db or DLPERF_DB (by default: ./dlperf.db, in the current directory))"


# C2


@pytest.mark.parametrize(
    "query",
    [
        "host=127.0.0.1:0",
        "host=127.0.0.1:5432&host=127.0.0.1:0",
        "host=127.0.0.1&port=0",
        "host=127.0.0.1,127.0.0.1&port=5432,00",
    ],
)
def test_port_0_in_the_query_is_refused(query: str, cli: Cli) -> None:
    """Was the runs of the store on port 5432, exit 0 (`?host=127.0.0.1:1` was refused)."""
    result = cli("--db", f"{URL}?{query}", "runs", "list")
    assert result.code == 2, (result.out, result.err)
    assert result.err == (
        f"error: cannot open run store postgresql+psycopg://dlperf:***@/db?{query}: port 0 is "
        "not a port (leave it out for the server's default, 5432 for PostgreSQL)\n"
    )


# C4


@pytest.mark.parametrize(
    ("command", "code", "said"),
    [
        # since round 66 in doctor's one error line, as a reader of a run says it
        (("doctor",), 2, f"error: {SPACE} {HOW}\n"),
        (("runs", "list"), 0, f"warning: {SPACE}\n"),
    ],
)
def test_a_reader_of_a_missing_store_says_its_path_ends_with_a_space(
    command: tuple[str, ...], code: int, said: str, tmp_path: Path, cli: Cli
) -> None:
    """Was an empty table, exit 0, or "the run store holds no runs": the space unsaid."""
    given = f"{tmp_path}/f5.db "
    result = cli("--db", given, *command)
    assert result.code == code, (result.out, result.err)
    assert result.err == said.format(given=given)


# C5


def test_a_missing_tags_table_is_damage_where_meta_has_no_version(tmp_path: Path, cli: Cli) -> None:
    """Was `tags │ 0 copied │ 0 left out │ 0 damaged stretches`, as for a store of before
    versions, which has no meta table."""
    source = tmp_path / "renamed.db"
    with dlperf.track("p", store=str(source)) as run:
        run.log(1, loss=1.0)
    with closing(sqlite3.connect(source)) as conn, conn:
        conn.execute("ALTER TABLE tags RENAME TO tags_old")
        conn.execute("DELETE FROM meta WHERE key = 'schema_version'")
    result = cli("--db", str(source), "runs", "repair", str(tmp_path / "fixed.db"), "--json")
    assert result.code == 0, result.err
    tables = json.loads(result.out)["tables"]
    assert {name for name, counts in tables.items() if counts["missing"]} == {"tags"}


# C10


@pytest.mark.parametrize(
    ("directory", "where"),
    [
        ("\t", "starts with white space"),
        ("{tmp}/\u00a0sub", "has a name that starts with white space, '\u00a0sub'"),
        ("{tmp}/sub ", "has a name that ends with a space, 'sub '"),
    ],
)
def test_white_space_at_a_store_names_edge_is_quoted_and_said(
    directory: str, where: str, tmp_path: Path, cli: Cli
) -> None:
    """Was `run store directory \\t does not exist: ... starts with a space`, unquoted."""
    missing = directory.format(tmp=tmp_path)
    given = f"{missing}/x.db"
    shown = given.replace("\t", "\\t")
    result = cli("--db", given, "runs", "list")
    assert result.code == 2, (result.out, result.err)
    directory_shown = missing.replace("\t", "\\t")
    assert result.err == (
        f"error: run store directory '{directory_shown}' does not exist: the store path "
        f"'{shown}' {where}\n"
    )
