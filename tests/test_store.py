"""The run store on a real SQLite file and, in CI, a real PostgreSQL server."""

from __future__ import annotations

import math
import os
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from dlperf.errors import UserError
from dlperf.store import Store
from dlperf.store.schema import Base

POSTGRES = os.environ.get("DLPERF_TEST_POSTGRES_URL")


def _fresh_postgres() -> Store:
    engine = create_engine(POSTGRES)
    with engine.begin() as conn:
        conn.execute(
            text("DROP TABLE IF EXISTS tags, metrics, artifacts, runs, studies, meta CASCADE")
        )
    return Store.open(POSTGRES)


@pytest.fixture(params=["sqlite", "postgresql"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "sqlite":
        return Store.open(str(tmp_path / "runs.db"))
    if not POSTGRES:
        pytest.skip(
            "PostgreSQL store tests need a server: set DLPERF_TEST_POSTGRES_URL="
            "postgresql+psycopg://USER:PASS@127.0.0.1/DB (bash .ci/run starts one)"
        )
    return _fresh_postgres()


def test_round_trip(any_store: Store) -> None:
    study = any_store.create_study("lr sweep", "sweep")
    run = any_store.create_run("a", "run", {"train": {"lr": 0.1}}, "abc", {"host": "h"}, study)
    any_store.log_metrics(run, [("train/loss", s, 1.0 / s) for s in range(1, 101)])
    any_store.log_metrics(run, [("train/loss", 101, math.nan), ("val/acc1", 1, 0.5)])
    any_store.add_artifact(run, "checkpoint", "/tmp/x.pt")
    any_store.finish_run(run, "finished", summary={"test_accuracy": 0.9, "bad": math.inf})

    record = any_store.get_run(run)
    assert record["status"] == "finished" and record["config"] == {"train": {"lr": 0.1}}
    assert record["summary"] == {"test_accuracy": 0.9, "bad": None}
    assert record["study_id"] == study and record["ended"] is not None
    loss = any_store.metrics(run, "train/loss")
    assert len(loss) == 101 and loss[0] == (1, 1.0) and math.isnan(loss[-1][1])
    assert any_store.metric_keys(run) == ["train/loss", "val/acc1"]
    assert any_store.last_step(run, "train/loss") == 101
    assert any_store.artifacts(run) == [{"kind": "checkpoint", "path": "/tmp/x.pt"}]
    assert [r["id"] for r in any_store.list_runs(study_id=study)] == [run]
    assert any_store.get_study(study)["kind"] == "sweep"


def test_failed_run_and_resume_cleanup(any_store: Store) -> None:
    run = any_store.create_run("b", "run", {})
    any_store.log_metrics(run, [("train/loss", s, 1.0) for s in range(1, 31)])
    any_store.log_metrics(run, [("val/acc1", e, 0.5) for e in (1, 2, 3)])
    any_store.finish_run(run, "killed", error="interrupted")
    assert any_store.get_run(run)["error"] == "interrupted"
    any_store.delete_metrics_after(run, [("train/", 20), ("val/", 2)])
    assert any_store.last_step(run, "train/loss") == 20
    assert [s for s, _ in any_store.metrics(run, "val/acc1")] == [1, 2]
    any_store.set_running(run)
    assert any_store.get_run(run)["status"] == "running"


def test_unknown_run_is_bad_input(any_store: Store) -> None:
    with pytest.raises(UserError, match="no run 999 in the store"):
        any_store.get_run(999)


def test_sqlite_is_in_wal_mode_and_readable_while_written(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = Store.open(str(path))
    run = store.create_run("c", "run", {})
    with sqlite3.connect(path) as reader:
        assert reader.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM metrics").fetchone()
        store.log_metrics(run, [("x", 1, 1.0)])  # a writer is not blocked by an open reader
    assert store.metrics(run, "x") == [(1, 1.0)]


def test_bad_urls_are_bad_input(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot open run store"):
        Store.open("nosuchdialect://x")
    with pytest.raises(UserError, match="does not exist"):
        Store.open(str(tmp_path / "missing" / "dir" / "runs.db"))


def test_a_training_run_lands_in_the_store(any_store: Store, tmp_path: Path) -> None:
    from dlperf.config import load_experiment
    from dlperf.engine.run import run_experiment

    path = tmp_path / "exp.toml"
    path.write_text(f'[train]\nepochs = 1\nbatch_size = 64\n[run]\nout_dir = "{tmp_path}"\n')
    result = run_experiment(load_experiment(path), any_store)
    record = any_store.get_run(result["run_id"])
    assert record["status"] == "finished" and record["summary"]["steps"] == 20
    assert len(any_store.metrics(result["run_id"], "train/loss")) == 20


def test_recording_marks_how_the_run_ended(any_store: Store) -> None:
    with any_store.new_run("ok", "run", {}) as rec:
        rec.summary = {"x": 1.0}
    assert any_store.get_run(rec.id)["status"] == "finished"
    assert any_store.get_run(rec.id)["summary"] == {"x": 1.0}

    with any_store.new_run("soft", "run", {}) as rec:
        rec.fail("worker rank 1 failed", summary={"rows": 0})
    soft = any_store.get_run(rec.id)
    assert (soft["status"], soft["error"], soft["summary"]) == (
        "failed",
        "worker rank 1 failed",
        {"rows": 0},
    )

    with pytest.raises(KeyboardInterrupt), any_store.new_run("ctrl-c", "run", {}) as rec:
        raise KeyboardInterrupt
    killed = any_store.get_run(rec.id)
    assert (killed["status"], killed["error"]) == ("killed", "interrupted")

    with pytest.raises(ValueError), any_store.new_run("crash", "run", {}) as rec:
        raise ValueError("bad value")
    crashed = any_store.get_run(rec.id)
    assert (crashed["status"], crashed["error"]) == ("failed", "ValueError: bad value")
    assert crashed["ended"] is not None


def test_a_store_keeps_its_id_and_keys_artifacts_by_it(any_store: Store, tmp_path: Path) -> None:
    again = Store.open(any_store.engine.url.render_as_string(hide_password=False))
    other = Store.open(str(tmp_path / "other.db"))
    assert again.id == any_store.id and len(any_store.id) == 12 and other.id != any_store.id
    assert any_store.artifact_dir("runs") == Path("runs").resolve() / any_store.id


def test_a_store_made_before_store_ids_opens_with_its_runs(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    engine = create_engine(f"sqlite:///{path}")
    Base.metadata.create_all(engine, [t for t in Base.metadata.sorted_tables if t.name != "meta"])
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO runs (name, kind, status, config, started) "
                "VALUES ('old', 'run', 'finished', '{}', '2025-01-01 00:00:00')"
            )
        )
    engine.dispose()
    store = Store.open(str(path))
    assert store.get_run(1)["name"] == "old"
    assert Store.open(str(path)).id == store.id


def test_tags_and_deleting_runs(any_store: Store, tmp_path: Path) -> None:
    keep = any_store.create_run("keep", "run", {}, None, {"host": "h"})
    gone = any_store.create_run("gone", "run", {}, None, {"host": "h"})
    assert any_store.get_run(gone)["system"]["process"]["pid"] == os.getpid()
    assert any_store.set_tags(gone, {"b": "2", "a": "1"}) == {"a": "1", "b": "2"}
    assert any_store.set_tags(gone, {"b": None, "c": "x y"}) == {"a": "1", "c": "x y"}
    any_store.set_tags(keep, {"a": "k"})
    assert [r["tags"] for r in any_store.list_runs()] == [{"a": "1", "c": "x y"}, {"a": "k"}]
    with pytest.raises(UserError, match="no run 999 in the store"):
        any_store.set_tags(999, {"a": "1"})

    checkpoint = any_store.artifact_dir(tmp_path) / f"run-{gone}" / "checkpoint.pt"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"x")
    any_store.add_artifact(gone, "checkpoint", checkpoint)
    any_store.log_metrics(gone, [("train/loss", 1, 1.0)])
    with pytest.raises(UserError, match="no run 999 in the store; nothing deleted"):
        any_store.delete_runs([gone, 999])
    assert checkpoint.is_file() and any_store.get_run(gone)["tags"]

    done = any_store.delete_runs([gone, gone])
    assert (done.runs, done.removed, done.kept) == ([gone], [str(checkpoint.parent)], [])
    assert [r["id"] for r in any_store.list_runs()] == [keep]
    assert any_store.metrics(gone, "train/loss") == [] and any_store.artifacts(gone) == []
    assert any_store.get_run(keep)["tags"] == {"a": "k"}
    assert any_store.create_run("next", "run", {}) > gone
