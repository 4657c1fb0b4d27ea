"""What the 22nd break-it round found in the run store, reproduced first: a stored schema
version of '0' was read as an empty database, and a read command re-stamped the store and broke
it (1); on PostgreSQL, `runs tag` and `runs delete` checked a run's existence before locking its
row, so a tag racing a delete ended in a ForeignKeyViolation traceback and two deletes both said
"deleted run N" (2); a PostgreSQL schema without USAGE was called missing (3); a SQLite store
path that is a FIFO, a device or a /proc file read as an empty store (4); an old store opened in
a read-only PostgreSQL session said only "cannot execute ALTER TABLE in a read-only transaction"
(6); and a SQLite run read with a garbled JSON column blamed the first garbled run of the store,
not the run asked about (7). PostgreSQL cases skip without DLPERF_TEST_POSTGRES_URL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, text

from dlperf.store import RunStore
from tests.conftest import CliResult, fresh_store_url
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]
EVENT_S = 120  # generous: how long a test waits for another process to reach a point


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "bi22")


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url("postgresql", tmp_path, "bi22")


def _runs(url: str, count: int = 1) -> list[int]:
    store = RunStore.open(url)
    ids = []
    for i in range(count):
        run_id = store.create_run(f"r{i}", "train", {})
        store.finish_run(run_id)
        ids.append(run_id)
    store.engine.dispose()
    return ids


def _sql(url: str, *statements: str) -> list[object]:
    """Run `statements` on the store at `url` in one transaction (a hand edit); the first
    column of the last one's rows."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            rows: list[object] = []
            for statement in statements:
                result = conn.execute(text(statement))
                rows = list(result.scalars()) if result.returns_rows else []
            return rows
    finally:
        engine.dispose()


def _schema(url: str) -> str:
    return str(make_url(url).query["options"]).removeprefix("-csearch_path=")


def _with_options(url: str, options: str) -> str:
    changed = make_url(url).update_query_dict({"options": options})
    return changed.render_as_string(hide_password=False)


# --- 1: a stored schema version of '0' ----------------------------------------------------------


@pytest.mark.parametrize("shape", ["current", "old"])
def test_a_schema_version_of_0_is_refused_and_nothing_written(
    cli: Cli, store_url: str, shape: str
) -> None:
    """'0' passed the isdecimal() check and was taken for an empty database: `runs list`
    made the missing tables, stamped '3', and the old store then read as damaged."""
    (run_id,) = _runs(store_url)
    edits = ["ALTER TABLE runs DROP COLUMN owner", "DROP TABLE claims"] if shape == "old" else []
    _sql(store_url, *edits, "UPDATE meta SET value = '0' WHERE key = 'schema_version'")
    for args in (("runs", "list"), ("runs", "show", str(run_id)), ("runs", "tag", "1", "a=b")):
        one_line(cli("--db", store_url, *args), 2, "schema version '0', which no dlperf writes")
        version = _sql(store_url, "SELECT value FROM meta WHERE key = 'schema_version'")
        assert version == ["0"], args
    if shape == "old":
        assert "claims" not in _tables(store_url)


def _tables(url: str) -> set[str]:
    if url.startswith("sqlite"):
        return set(map(str, _sql(url, "SELECT name FROM sqlite_master WHERE type = 'table'")))
    query = f"SELECT tablename FROM pg_tables WHERE schemaname = '{_schema(url)}'"
    return set(map(str, _sql(url, query)))


def test_a_schema_version_of_0_names_the_version_to_set_on_postgresql(
    cli: Cli, pg_url: str
) -> None:
    _runs(pg_url)
    _sql(pg_url, "UPDATE meta SET value = '0' WHERE key = 'schema_version'")
    result = cli("--db", pg_url, "runs", "list")
    one_line(result, 2, "schema version '0'", "UPDATE meta SET value = '3'")
