"""dlperf.store.schema: the tables' contract (names, keys, nullability) that the migrations,
the repair and the standard-library reader all rely on."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import create_engine, insert, inspect, select

from dlperf.store import schema
from dlperf.store.schema import Artifact, Base, Claim, Meta, Metric, Run, Study, Tag


def test_the_tables_are_mlflows_plus_dlperfs_own() -> None:
    assert set(Base.metadata.tables) == {
        "meta", "studies", "runs", "metrics", "artifacts", "tags", "claims",
    }  # fmt: skip


def test_primary_keys_make_one_tag_per_key_and_one_claim_per_point() -> None:
    assert [c.name for c in Tag.__table__.primary_key] == ["run_id", "key"]
    assert [c.name for c in Claim.__table__.primary_key] == ["study_id", "key"]
    assert [c.name for c in Meta.__table__.primary_key] == ["key"]


def test_nullable_columns_are_those_a_reader_must_expect_empty() -> None:
    nullable = {
        (t.name, c.name) for t in Base.metadata.sorted_tables for c in t.columns if c.nullable
    }
    assert nullable == {
        ("runs", "study_id"), ("runs", "config_hash"), ("runs", "system"), ("runs", "summary"),
        ("runs", "ended"), ("runs", "error"), ("runs", "owner"),
        ("metrics", "value"),  # SQLite stores NaN as NULL
    }  # fmt: skip


def test_metrics_are_indexed_by_run_key_and_step() -> None:
    [index] = Metric.__table__.indexes
    assert [c.name for c in index.columns] == ["run_id", "key", "step"]


def test_meta_keys_are_the_ones_the_store_writes() -> None:
    assert (schema.STORE_ID, schema.VERSION_KEY, schema.DELETED_MAX, schema.HOME) == (
        "store_id", "schema_version", "deleted_max_run_id", "home",
    )  # fmt: skip


def test_the_tables_make_a_database_that_round_trips_a_run() -> None:
    engine = create_engine("sqlite://")
    Base.metadata.create_all(engine)
    assert set(inspect(engine).get_table_names()) == set(Base.metadata.tables)
    now = datetime(2026, 11, 26, 12, 0, 0)
    with engine.begin() as conn:
        conn.execute(insert(Study), [{"id": 1, "name": "s", "kind": "sweep", "created": now}])
        conn.execute(
            insert(Run),
            [{"id": 1, "study_id": 1, "name": "r", "kind": "train", "status": "finished",
              "config": {"train": {"lr": 0.1}}, "started": now}],
        )  # fmt: skip
        conn.execute(insert(Metric), [{"run_id": 1, "key": "k", "step": 0, "value": None,
                                       "wall_time": 1.0}])  # fmt: skip
        conn.execute(insert(Artifact), [{"run_id": 1, "kind": "ckpt", "path": "/x"}])
    with engine.connect() as conn:
        assert conn.execute(select(Run.config, Run.started)).one() == ({"train": {"lr": 0.1}}, now)
        assert conn.execute(select(Metric.value)).scalar_one() is None
    engine.dispose()
