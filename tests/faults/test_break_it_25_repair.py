"""Break-it round 25: a PostgreSQL store's runs moved into a SQLite file, and repaired.

Since round 25 a PostgreSQL store records where it lives (its `home`: the server's system
identifier, the database's and the schema's oids) to tell a copy from its original. Its tables
moved into a SQLite file (by hand or a migration tool) and `runs repair NEW.db` of that file
carry that place along. A SQLite store read the place as a path that is gone ("the original
was moved or deleted") and made itself the owner of `<out_dir>/<store id>/`: the repaired
file's `runs delete` removed the PostgreSQL store's checkpoints while that store still
records them, and its new runs wrote into the same directory as the PostgreSQL store's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import make_url

from dlperf.store import RunStore
from dlperf.store.schema import Artifact, Meta, Metric, Run, Study, Tag
from tests.conftest import POSTGRES, CliResult, fresh_store_url
from tests.faults.test_break_it_25_store import _checkpoint

Cli = Callable[..., CliResult]


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url("postgresql", tmp_path, "fx25m")


def _moved(source: RunStore, url: str) -> None:
    """Every row of the store `source` into the new store at `url`, as a table-by-table move
    of a store into another database leaves it (meta rows, its `home` too, included)."""
    target = RunStore.open(url)  # the tables, as dlperf makes them
    try:
        with source.engine.connect() as old, target.engine.begin() as new:
            new.execute(Meta.__table__.delete())
            for table in (Meta, Study, Run, Metric, Artifact, Tag):
                rows = [dict(r._mapping) for r in old.execute(table.__table__.select())]
                if rows:
                    new.execute(table.__table__.insert(), rows)
                if new.dialect.name == "postgresql" and "id" in table.__table__.c:
                    # Rows inserted with their ids leave a serial's sequence behind them.
                    name = table.__tablename__
                    new.exec_driver_sql(
                        f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), "
                        f"(SELECT max(id) FROM {name}))"
                    )
    finally:
        target.engine.dispose()


def test_a_postgresql_store_repaired_into_sqlite_keeps_its_files(
    cli: Cli, pg_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "runs"
    original = RunStore.open(pg_url)
    try:
        first = original.create_run("r", "run", {"lr": 0.02})
        kept = _checkpoint(original, out, first, b"postgresql's run")
        original.finish_run(first)
        with original.engine.connect() as conn:
            schema = str(conn.exec_driver_sql("SELECT current_schema()").scalar())
        moved = tmp_path / "moved.db"
        _moved(original, f"sqlite:///{moved}")
        repaired = tmp_path / "repaired.db"
        result = cli("--db", str(moved), "runs", "repair", str(repaired))
        assert result.code == 0, result.err
        copy = RunStore.open(f"sqlite:///{repaired}")
        try:
            assert copy.id == original.id
            # Its new runs go to a directory of its own, not the PostgreSQL store's.
            assert copy.artifact_dir(out) != original.artifact_dir(out)
            mine = copy.create_run("c", "run", {"lr": 0.03})
            ours = _checkpoint(copy, out, mine, b"repaired file's run")
            # Deleting the run in the repaired file keeps the PostgreSQL store's checkpoint
            # and says whose it is.
            database = make_url(POSTGRES or "").database
            deleted = copy.delete_runs([first])
            assert kept.read_bytes() == b"postgresql's run"
            assert deleted.removed == []
            assert [why for _, why in deleted.kept] == [
                f"this store is a copy of PostgreSQL database {database}, schema {schema}, "
                "whose run it is too"
            ]
            # Its own run's files are its own to delete.
            assert copy.delete_runs([mine]).removed == [str(ours.parent)]
        finally:
            copy.engine.dispose()
        # The PostgreSQL store still owns its directory, and deletes there.
        assert original.artifact_dir(out) == out.resolve() / original.id
        assert original.delete_runs([first]).removed == [str(kept.parent)]
    finally:
        original.engine.dispose()


def test_a_sqlite_store_moved_into_postgresql_keeps_its_files(pg_url: str, tmp_path: Path) -> None:
    """The other way: a SQLite store's tables moved into PostgreSQL carry its file's path as
    their home. While that file is there the server's store is its copy, as a byte copy is."""
    out = tmp_path / "runs"
    original = RunStore.open(f"sqlite:///{tmp_path / 'original.db'}")
    try:
        first = original.create_run("r", "run", {"lr": 0.02})
        kept = _checkpoint(original, out, first, b"sqlite's run")
        original.finish_run(first)
        _moved(original, pg_url)
        copy = RunStore.open(pg_url)
        try:
            assert copy.id == original.id
            assert copy.artifact_dir(out) != original.artifact_dir(out)
            mine = copy.create_run("c", "run", {"lr": 0.03})
            ours = _checkpoint(copy, out, mine, b"server's run")
            deleted = copy.delete_runs([first])
            assert kept.read_bytes() == b"sqlite's run"
            assert deleted.removed == []
            assert [why for _, why in deleted.kept] == [
                f"this store is a copy of {tmp_path / 'original.db'}, whose run it is too"
            ]
            assert copy.delete_runs([mine]).removed == [str(ours.parent)]
        finally:
            copy.engine.dispose()
        assert original.delete_runs([first]).removed == [str(kept.parent)]
    finally:
        original.engine.dispose()
