"""Break-it round 36, the run store (fixer F2), and its review.

C1. A PostgreSQL store in a schema of its own (`?options=-csearch_path=s1`) was told its repair
    SQL with bare table names: `UPDATE meta SET value = '3' ...` for a garbled schema version,
    `INSERT INTO meta ...` for a lost version row or store id, `UPDATE runs SET config = '{}'
    ...` for a run's JSON column that is no object. In psql, without the URL's search_path,
    each was "relation does not exist" (or edited another store's table). They name the
    store's schema, quoted as SQL needs, as round 33's ALTER advice does; SQLite's fixes are
    `runs repair` as before.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import make_url

import dlperf
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import POSTGRES
from tests.faults.test_break_it_29_store import edit


@pytest.fixture(params=["bk36_store", "Bk36 Store"])
def schema_url(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """A new PostgreSQL schema, the store URL whose search_path names it, and the schema as
    SQL names it: plain, and one that needs quoting (capitals, a space)."""
    if not POSTGRES:
        pytest.skip("PostgreSQL store tests need a server: set DLPERF_TEST_POSTGRES_URL")
    name = f"{request.param}_{uuid.uuid4().hex[:8]}"
    quoted = name if name.islower() and " " not in name else f'"{name}"'
    edit(POSTGRES, f"CREATE SCHEMA {quoted}")
    # libpq's options: a backslash keeps the space in the value
    path = quoted.replace(" ", "\\ ")
    url = make_url(POSTGRES).update_query_dict({"options": f"-csearch_path={path}"})
    try:
        yield url.render_as_string(hide_password=False), quoted
    finally:
        edit(POSTGRES, f"DROP SCHEMA {quoted} CASCADE")


def _refused(url: str) -> Any:
    with pytest.raises(UserError) as e:
        RunStore.open(url).engine.dispose()
    return e.value


def test_every_fix_named_for_a_store_in_a_schema_of_its_own_works_as_given_in_psql(
    schema_url: tuple[str, str],
) -> None:
    url, schema = schema_url
    with dlperf.track("x", store=url) as run:
        run.log(step=0, loss=1.0)
    store_id = RunStore.open(url).id

    # A garbled schema version
    edit(POSTGRES or "", f"UPDATE {schema}.meta SET value = 'abc' WHERE key = 'schema_version'")
    hint = _refused(url).hint
    assert hint == f"set it back: UPDATE {schema}.meta SET value = '3' WHERE key = 'schema_version'"
    edit(POSTGRES or "", hint.partition(": ")[2])  # in psql: no search_path

    # A lost version row
    edit(POSTGRES or "", f"DELETE FROM {schema}.meta WHERE key = 'schema_version'")
    hint = _refused(url).hint
    assert hint.startswith(f"put the row back: INSERT INTO {schema}.meta (key, value) VALUES")
    edit(POSTGRES or "", hint.partition(": ")[2])

    # A lost store id
    edit(POSTGRES or "", f"DELETE FROM {schema}.meta WHERE key = 'store_id'")
    hint = _refused(url).hint
    insert = hint.partition(": ")[2].split(", ID ")[0]
    assert insert.startswith(f"INSERT INTO {schema}.meta (key, value) VALUES")
    edit(POSTGRES or "", insert.replace("'ID'", f"'{store_id}'"))

    # A run's config that is no JSON object
    edit(POSTGRES or "", f"UPDATE {schema}.runs SET config = '[1]'::json")
    store = RunStore.open(url)
    assert store.id == store_id
    with pytest.raises(UserError) as e:
        store.get_run(1)
    assert (
        e.value.hint
        == f"set it to an object again: UPDATE {schema}.runs SET config = '{{}}' WHERE id = 1"
    )
    edit(POSTGRES or "", e.value.hint.partition(": ")[2])
    assert store.get_run(1).config == {}
    store.engine.dispose()


def test_a_sqlite_store_is_still_told_to_repair(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    RunStore.open(url).engine.dispose()
    edit(url, "UPDATE meta SET value = 'abc' WHERE key = 'schema_version'")
    assert _refused(url).hint == (
        f"copy what is readable into a new store: dlperf --db {url} runs repair NEW.db"
    )
