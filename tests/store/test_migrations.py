"""dlperf.store.migrations: versions, the migration from the first release, and the stores
refused (a newer dlperf's, another program's, an id set by hand), on small SQLite files."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, inspect, text

from dlperf.errors import UserError
from dlperf.store import migrations
from dlperf.store.ids import made_store_id
from dlperf.store.migrations import SCHEMA_VERSION, migrate, refuse_foreign, refuse_foreign_file
from dlperf.store.runstore import read_begun
from dlperf.store.schema import Base

# The runs table of the first release: no owner column, and no tags, meta or claims tables.
FIRST_RELEASE = """
CREATE TABLE studies (id INTEGER PRIMARY KEY, name VARCHAR(200), kind VARCHAR(40), created DATETIME);
CREATE TABLE runs (id INTEGER PRIMARY KEY, study_id INTEGER, name VARCHAR(200), kind VARCHAR(40),
  status VARCHAR(20), config JSON, config_hash VARCHAR(64), system JSON, summary JSON,
  started DATETIME, ended DATETIME, error TEXT);
CREATE TABLE metrics (id INTEGER PRIMARY KEY, run_id INTEGER, key VARCHAR(100), step INTEGER,
  value FLOAT, wall_time FLOAT);
CREATE TABLE artifacts (id INTEGER PRIMARY KEY, run_id INTEGER, kind VARCHAR(40), path TEXT);
INSERT INTO runs (id, name, kind, status, config, started)
  VALUES (1, 'old', 'train', 'finished', '{}', '2025-01-01 00:00:00');
"""  # noqa: E501


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    made = create_engine(f"sqlite:///{tmp_path / 's.db'}")
    yield made
    made.dispose()


def _meta(engine: Engine) -> dict[str, str]:
    with engine.connect() as conn:
        return {k: v for k, v in conn.execute(text("SELECT key, value FROM meta"))}


def test_an_empty_database_becomes_a_current_store_with_an_id_of_dlperfs(engine: Engine) -> None:
    store_id = migrate(engine, engine, "s.db")
    assert store_id is not None and made_store_id(store_id)
    assert set(inspect(engine).get_table_names()) == set(Base.metadata.tables)
    assert _meta(engine) == {"store_id": store_id, "schema_version": str(SCHEMA_VERSION)}
    assert migrate(engine, engine, "s.db") == store_id  # then only read: the same id


def test_without_create_an_empty_database_is_left_empty(engine: Engine) -> None:
    assert migrate(engine, engine, "s.db", create=False) is None
    assert inspect(engine).get_table_names() == []


def test_a_first_release_store_gains_owners_tags_and_claims_and_keeps_its_runs(
    tmp_path: Path, engine: Engine
) -> None:
    with closing(sqlite3.connect(tmp_path / "s.db")) as conn:
        conn.executescript(FIRST_RELEASE)
    assert SCHEMA_VERSION == len(migrations.MIGRATIONS) + 1 == 3
    store_id = migrate(engine, engine, "s.db")
    assert store_id is not None and made_store_id(store_id)
    assert {"tags", "meta", "claims"} <= set(inspect(engine).get_table_names())
    assert "owner" in {c["name"] for c in inspect(engine).get_columns("runs")}
    with engine.connect() as conn:
        assert conn.execute(text("SELECT id, name, owner FROM runs")).all() == [(1, "old", None)]
    assert _meta(engine)["schema_version"] == str(SCHEMA_VERSION)


@pytest.mark.parametrize(
    ("version", "text_"),
    [
        (str(SCHEMA_VERSION + 1), f"has schema version {SCHEMA_VERSION + 1}, newer than"),
        ("two", "has schema version 'two', which no dlperf writes"),
    ],
)
def test_a_version_this_dlperf_cannot_take_is_refused(
    engine: Engine, version: str, text_: str
) -> None:
    migrate(engine, engine, "s.db")
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE meta SET value = :v WHERE key = 'schema_version'"), {"v": version}
        )
    with pytest.raises(UserError, match=r"run store s\.db ") as e:
        migrate(engine, engine, "s.db")
    assert text_ in str(e.value)


@pytest.mark.parametrize(
    ("store_id", "fix"),
    [("../../etc", "runs repair NEW.db"), ("x" * 30, "runs repair NEW.db")],
)
def test_a_store_id_set_by_hand_is_refused_in_one_line(
    engine: Engine, store_id: str, fix: str
) -> None:
    migrate(engine, engine, "s.db")
    with engine.begin() as conn:
        conn.execute(text("UPDATE meta SET value = :v WHERE key = 'store_id'"), {"v": store_id})
    with pytest.raises(UserError, match="which dlperf does not make") as e:
        migrate(engine, engine, "s.db")
    assert "\n" not in str(e.value) and e.value.hint is not None and fix in e.value.hint
    shown = repr(store_id) if len(store_id) <= 24 else f"{store_id[:20]!r}..."
    assert f"store id {shown}," in str(e.value)


def test_another_programs_tables_are_refused_naming_four_and_counting_the_rest() -> None:
    tables = {"runs", *(f"t{i}" for i in range(6))}
    with pytest.raises(UserError) as e:
        refuse_foreign(tables, lambda name: set(), "x.db")
    assert e.value.message.endswith("not dlperf's: t0, t1, t2, t3 and 2 more")
    assert e.value.hint == migrations.OWN_SPACE


def test_a_dlperf_table_name_with_other_columns_is_refused_but_an_old_runs_table_is_not() -> None:
    runs = {c.name for c in Base.metadata.tables["runs"].columns}
    refuse_foreign({"runs"}, lambda name: runs - {"owner"}, "x.db")  # added by a migration
    with pytest.raises(UserError, match=r"table tags is not dlperf's \(it has no column run_id"):
        refuse_foreign({"tags"}, lambda name: {"key", "value"}, "x.db")


def test_refuse_foreign_file_reads_only_and_lets_a_non_database_through(tmp_path: Path) -> None:
    foreign = tmp_path / "mlflow.db"
    with closing(sqlite3.connect(foreign)) as conn:
        conn.execute("CREATE TABLE experiments (id INTEGER)")
        conn.commit()
    with pytest.raises(UserError, match="holds tables that are not dlperf's: experiments"):
        refuse_foreign_file(foreign, "mlflow.db", 1.0, read_begun)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]  # no -wal, no -shm
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 100)
    refuse_foreign_file(junk, "junk.db", 1.0, read_begun)  # left to the store's own opening to name
