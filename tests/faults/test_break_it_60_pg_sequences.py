"""Break-it round 60, T2's cause 2: a PostgreSQL store holding a SQLite store's tables, moved
by hand (docs/run.md counts it a copy of that store).

Before: dlperf moved runs.id's sequence past the copied runs (`_pg_next_id`), but the other
tables' ids (metrics' BIGSERIAL, artifacts' and studies' SERIAL) kept their sequences at 1.
The first metric a new run logged took id 1, a copied row's: `dlperf run` ended in a 60-line
psycopg UniqueViolation traceback and stored its run `failed` with the SQL as its error, and
`dlperf.track` raised IntegrityError; a new study, an artifact, or a metric of a copied run
resumed met the same. Now a writer that opens the store moves each such sequence past the
largest id its table holds, so new rows take ids above the copied ones, as new runs do.
PostgreSQL only: skips without DLPERF_TEST_POSTGRES_URL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select, text

import dlperf
from dlperf.store import RunStore
from dlperf.store.schema import Base
from tests.conftest import CliResult, fresh_store_url
from tests.faults.test_break_it_24_store import _option
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url("postgresql", tmp_path, "g1")


@pytest.fixture
def copied(tmp_path: Path, pg_url: str) -> str:
    """`pg_url` holding, copied table by table, a SQLite store of one study whose one run
    logged three metrics and recorded an artifact: every table's ids 1..n, its sequence at 1."""
    sqlite = RunStore.open(f"sqlite:///{tmp_path / 'a.db'}")
    study = sqlite.create_study("s", "sweep")
    run_id = sqlite.create_run("a", "run", {}, study_id=study)
    sqlite.log_metrics(run_id, [("loss", step, 1.0 / step) for step in (1, 2, 3)])
    sqlite.add_artifact(run_id, "checkpoint", tmp_path / "a.pt")
    sqlite.update_run(run_id, status="finished")
    source, target = sqlite.engine, create_engine(pg_url)
    try:
        Base.metadata.create_all(target)
        with source.connect() as s, target.begin() as t:
            for table in Base.metadata.sorted_tables:
                rows = [dict(row._mapping) for row in s.execute(select(table))]
                if rows:
                    t.execute(table.insert(), rows)
    finally:
        source.dispose()
        target.dispose()
    return pg_url


def _ids(url: str, table: str) -> list[int]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return list(conn.scalars(text(f"SELECT id FROM {table} ORDER BY id")))
    finally:
        engine.dispose()


def test_a_tracked_run_logs_its_metrics_above_the_copied_ones(cli: Cli, copied: str) -> None:
    with dlperf.track("b", store=copied) as run:  # raised IntegrityError: Key (id)=(1)
        for step in (1, 2):
            run.log(step, loss=1.0 / step)
    assert _ids(copied, "metrics") == [1, 2, 3, 4, 5]
    result = cli("--db", copied, "runs", "show", "2")
    assert result.code == 0, result.err
    assert "finished" in result.out
    store = RunStore.open(copied, create=False)
    assert store.metrics(2, "train/loss") == [(1, 1.0), (2, 0.5)]  # as track keys it
    assert store.metrics(1, "loss") == [(1, 1.0), (2, 0.5), (3, 1.0 / 3)]
    store.engine.dispose()


def test_a_new_study_and_artifact_take_ids_above_the_copied_ones(copied: str) -> None:
    store = RunStore.open(copied)
    study = store.create_study("t", "sweep")  # before any new run: no `_pg_next_id` yet
    run_id = store.create_run("b", "run", {}, study_id=study)
    store.add_artifact(run_id, "checkpoint", "/tmp/b.pt")
    store.engine.dispose()
    assert (study, run_id) == (2, 2)
    assert _ids(copied, "studies") == [1, 2]
    assert _ids(copied, "artifacts") == [1, 2]


def test_a_copied_run_takes_new_metrics_without_a_new_run(copied: str) -> None:
    # as `run --resume` of a copied run writes: no new run moves any sequence first
    store = RunStore.open(copied)
    store.log_metrics(1, [("loss", 4, 0.25)])
    assert store.metrics(1, "loss")[-1] == (4, 0.25)
    store.engine.dispose()
    assert _ids(copied, "metrics") == [1, 2, 3, 4]


def test_a_read_only_session_on_copied_tables_still_gets_its_fix(cli: Cli, copied: str) -> None:
    # the sequences cannot be moved in it: the open must not say the store is "older than
    # this dlperf", but its write what the session lacks, as of any store
    read_only = _option(copied, "-cdefault_transaction_read_only=on")
    result = cli("--db", read_only, "runs", "tag", "1", "a=b")
    one_line(result, 2, "read-only", "not default_transaction_read_only=on")
    assert "older" not in result.err
    assert _ids(copied, "metrics") == [1, 2, 3]
