"""The run store on a real SQLite file and, in CI, a real PostgreSQL server."""

from __future__ import annotations

import contextlib
import gc
import json
import math
import multiprocessing
import os
import re
import sqlite3
import threading
import warnings
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, inspect, make_url, text

from dlperf.errors import NoSuchRun, UserError
from dlperf.procs import proc_stat, this_process
from dlperf.store import BUSY_TIMEOUT_S, RunStore, masked_url
from dlperf.store.migrations import MIGRATIONS, PG_SCHEMA_LOCK, SCHEMA_VERSION
from dlperf.store.schema import Base
from tests.conftest import fresh_store_url, interrupt_wrapped_by_a_class_body


@pytest.fixture(params=["sqlite", "postgresql"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunStore]:
    """A new store on each backend. On PostgreSQL a schema of the test's own
    (tests.conftest.fresh_store_url): the suite's parallel workers share one database, and
    dropping the default schema's tables pulled them from under another worker's test."""
    for url in fresh_store_url(request.param, tmp_path, "store"):
        store = RunStore.open(url)
        yield store
        store.engine.dispose()  # before the schema is dropped


def test_round_trip(any_store: RunStore) -> None:
    study = any_store.create_study("lr sweep", "sweep")
    run = any_store.create_run("a", "run", {"train": {"lr": 0.1}}, "abc", {"host": "h"}, study)
    any_store.log_metrics(run, [("train/loss", s, 1.0 / s) for s in range(1, 101)])
    any_store.log_metrics(run, [("train/loss", 101, math.nan), ("val/acc1", 1, 0.5)])
    any_store.add_artifact(run, "checkpoint", "/tmp/x.pt")
    any_store.finish_run(run, "finished", summary={"test_accuracy": 0.9, "bad": math.inf})

    record = any_store.get_run(run)
    assert record.status == "finished" and record.config == {"train": {"lr": 0.1}}
    assert record.summary == {"test_accuracy": 0.9, "bad": None}
    assert record.study_id == study and record.ended is not None
    loss = any_store.metrics(run, "train/loss")
    assert len(loss) == 101 and loss[0] == (1, 1.0) and math.isnan(loss[-1][1])
    assert any_store.metric_keys(run) == ["train/loss", "val/acc1"]
    assert any_store.last_step(run, "train/loss") == 101
    assert any_store.artifacts(run) == [{"kind": "checkpoint", "path": "/tmp/x.pt"}]
    assert [r.id for r in any_store.list_runs(study_id=study)] == [run]
    assert any_store.get_study(study)["kind"] == "sweep"


def test_failed_run_and_resume_cleanup(any_store: RunStore) -> None:
    run = any_store.create_run("b", "run", {})
    any_store.log_metrics(run, [("train/loss", s, 1.0) for s in range(1, 31)])
    any_store.log_metrics(run, [("val/acc1", e, 0.5) for e in (1, 2, 3)])
    any_store.finish_run(run, "killed", error="interrupted")
    assert any_store.get_run(run).error == "interrupted"
    any_store.delete_metrics_after(run, [("train/", 20), ("val/", 2)])
    assert any_store.last_step(run, "train/loss") == 20
    assert [s for s, _ in any_store.metrics(run, "val/acc1")] == [1, 2]
    any_store.take_over(run)
    assert any_store.get_run(run).status == "running"


def test_unknown_run_is_bad_input(any_store: RunStore) -> None:
    with pytest.raises(UserError, match="no run 999 in the store"):
        any_store.get_run(999)


def test_sqlite_is_in_wal_mode_and_readable_while_written(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = RunStore.open(str(path))
    run = store.create_run("c", "run", {})
    with sqlite3.connect(path) as reader:
        assert reader.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM metrics").fetchone()
        store.log_metrics(run, [("x", 1, 1.0)])  # a writer is not blocked by an open reader
    assert store.metrics(run, "x") == [(1, 1.0)]


def test_a_path_with_a_tilde_is_in_the_home_directory(
    cli: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DLPERF_DB='~/runs.db' (quoted, so no shell expanded it) is the home's runs.db, not a
    directory named ~ here."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    run = RunStore.open("~/runs.db").create_run("c", "run", {})
    assert (tmp_path / "home" / "runs.db").is_file()
    monkeypatch.setenv("DLPERF_DB", "~/runs.db")
    result = cli("runs", "list", "--json")
    assert result.code == 0, result.err
    assert [r["id"] for r in json.loads(result.out)] == [run]
    assert not (tmp_path / "~").exists()


def test_bad_urls_are_bad_input(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot open run store"):
        RunStore.open("nosuchdialect://x")
    with pytest.raises(UserError, match="does not exist"):
        RunStore.open(str(tmp_path / "missing" / "dir" / "runs.db"))


def test_a_training_run_lands_in_the_store(any_store: RunStore, tmp_path: Path) -> None:
    from dlperf.config import load_experiment
    from dlperf.experiment.run import run_experiment

    path = tmp_path / "exp.toml"  # one torch thread: more, on a busy machine, only cost CPU
    path.write_text(
        f'[train]\nepochs = 1\nbatch_size = 64\n[run]\nthreads = 1\nout_dir = "{tmp_path}"\n'
    )
    result = run_experiment(load_experiment(path), any_store)
    record = any_store.get_run(result["run_id"])
    assert record.status == "finished" and record.summary["steps"] == 20
    assert len(any_store.metrics(result["run_id"], "train/loss")) == 20


def test_recording_marks_how_the_run_ended(any_store: RunStore) -> None:
    with any_store.new_run("ok", "run", {}) as rec:
        rec.summary = {"x": 1.0}
    assert any_store.get_run(rec.id).status == "finished"
    assert any_store.get_run(rec.id).summary == {"x": 1.0}

    with any_store.new_run("soft", "run", {}) as rec:
        rec.fail("worker rank 1 failed", summary={"rows": 0})
    soft = any_store.get_run(rec.id)
    assert (soft.status, soft.error, soft.summary) == (
        "failed",
        "worker rank 1 failed",
        {"rows": 0},
    )

    with pytest.raises(KeyboardInterrupt), any_store.new_run("ctrl-c", "run", {}) as rec:
        raise KeyboardInterrupt
    killed = any_store.get_run(rec.id)
    assert (killed.status, killed.error) == ("killed", "interrupted")

    with pytest.raises(ValueError), any_store.new_run("crash", "run", {}) as rec:
        raise ValueError("bad value")
    crashed = any_store.get_run(rec.id)
    assert (crashed.status, crashed.error) == ("failed", "ValueError: bad value")
    assert crashed.ended is not None


def test_a_store_keeps_its_id_and_keys_artifacts_by_it(any_store: RunStore, tmp_path: Path) -> None:
    again = RunStore.open(any_store.engine.url.render_as_string(hide_password=False))
    other = RunStore.open(str(tmp_path / "other.db"))
    assert again.id == any_store.id and len(any_store.id) == 12 and other.id != any_store.id
    assert any_store.artifact_dir("runs") == Path("runs").resolve() / any_store.id


def test_a_store_made_before_store_ids_opens_with_its_runs(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    engine = create_engine(f"sqlite:///{path}")
    # As such a store was: no meta, nor what version 3 added later (claims, runs.owner).
    kept = [t for t in Base.metadata.sorted_tables if t.name not in ("meta", "claims")]
    Base.metadata.create_all(engine, kept)
    with engine.begin() as conn:
        conn.execute(text("ALTER TABLE runs DROP COLUMN owner"))
        conn.execute(
            text(
                "INSERT INTO runs (name, kind, status, config, started) "
                "VALUES ('old', 'run', 'finished', '{}', '2025-01-01 00:00:00')"
            )
        )
    engine.dispose()
    store = RunStore.open(str(path))
    assert store.get_run(1).name == "old"
    assert RunStore.open(str(path)).id == store.id


def test_tags_and_deleting_runs(any_store: RunStore, tmp_path: Path) -> None:
    keep = any_store.create_run("keep", "run", {}, None, {"host": "h"})
    gone = any_store.create_run("gone", "run", {}, None, {"host": "h"})
    assert any_store.get_run(gone).system["process"]["pid"] == os.getpid()
    assert any_store.set_tags(gone, {"b": "2", "a": "1"}) == {"a": "1", "b": "2"}
    assert any_store.set_tags(gone, {"b": None, "c": "x y"}) == {"a": "1", "c": "x y"}
    any_store.set_tags(keep, {"a": "k"})
    assert [r.tags for r in any_store.list_runs()] == [{"a": "1", "c": "x y"}, {"a": "k"}]
    with pytest.raises(UserError, match="no run 999 in the store"):
        any_store.set_tags(999, {"a": "1"})

    checkpoint = any_store.artifact_dir(tmp_path) / f"run-{gone}" / "checkpoint.pt"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"x")
    any_store.add_artifact(gone, "checkpoint", checkpoint)
    any_store.log_metrics(gone, [("train/loss", 1, 1.0)])
    with pytest.raises(UserError, match="no run 999 in the store; nothing deleted"):
        any_store.delete_runs([gone, 999])
    assert checkpoint.is_file() and any_store.get_run(gone).tags

    done = any_store.delete_runs([gone, gone])
    assert (done.runs, done.removed, done.kept) == ([gone], [str(checkpoint.parent)], [])
    assert [r.id for r in any_store.list_runs()] == [keep]
    assert any_store.metrics(gone, "train/loss") == [] and any_store.artifacts(gone) == []
    assert any_store.get_run(keep).tags == {"a": "k"}
    assert any_store.create_run("next", "run", {}) > gone


# --- run ids the database cannot hold ----------------------------------------------------------


@pytest.mark.parametrize("run_id", [2**63 - 1, 2**63, 10**20, 0, -(2**70)])
def test_any_integer_that_names_no_run_is_no_run(any_store: RunStore, run_id: int) -> None:
    """SQLite cannot bind an integer beyond 64 bits (OverflowError), PostgreSQL's integer
    column ends at 2^31: every lookup says "no run N" instead."""
    kept = any_store.create_run("kept", "run", {})
    for lookup in (
        lambda: any_store.get_run(run_id),
        lambda: any_store.set_tags(run_id, {"a": "1"}),
        lambda: any_store.delete_runs([kept, run_id]),
    ):
        with pytest.raises(NoSuchRun, match=f"no run {run_id} in the store"):
            lookup()
    assert [r.id for r in any_store.list_runs()] == [kept]


# --- passwords in URLs ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("mysql://u:secret@host/db", "mysql://u:***@host/db"),
        ("postgresql+psycopg://u:secret@host:5432/db", "postgresql+psycopg://u:***@host:5432/db"),
        ("http://u:secret@host:5000/x?y=1", "http://u:***@host:5000/x?y=1"),
        ("mysql://u:sec@ret@host/db", "mysql://u:***@host/db"),  # an unescaped @ in it
        ("no such ://u:secret@host", "no such ://u:***@host"),  # no URL SQLAlchemy reads
        ("sqlite:////tmp/runs.db", "sqlite:////tmp/runs.db"),
        ("./mlruns", "./mlruns"),
    ],
)
def test_masked_url_hides_any_password(url: str, shown: str) -> None:
    assert masked_url(url) == shown


def test_a_store_url_password_is_never_printed(cli: Any) -> None:
    """A MySQL URL (its driver not installed) used to print its password in the error."""
    result = cli("--db", "mysql://u:secret@host/db", "runs", "list")
    assert result.code == 2 and "secret" not in result.err
    assert result.err.startswith("error: cannot open run store 'mysql://u:***@host/db': ")


# --- schema versions ---------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty database (tests.conftest.fresh_store_url)."""
    yield from fresh_store_url(request.param, tmp_path, "test")


def _sql(url: str, *statements: str) -> list[Any]:
    """Run `statements` in one transaction; the rows of each (None for one that returns none)."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            results = [conn.execute(text(statement)) for statement in statements]
            return [r.all() if r.returns_rows else None for r in results]
    finally:
        engine.dispose()


def _version(url: str) -> int:
    [[(value,)]] = _sql(url, "SELECT value FROM meta WHERE key = 'schema_version'")
    return int(value)


def test_a_new_store_is_made_at_the_current_version(empty_url: str) -> None:
    RunStore.open(empty_url).engine.dispose()
    assert _version(empty_url) == SCHEMA_VERSION == len(MIGRATIONS) + 1


def test_a_store_of_the_first_release_is_migrated_once(empty_url: str) -> None:
    """Version 1 (no meta, no tags, no run owners or claims) gains them and its version; a
    second open finds it current."""
    engine = create_engine(empty_url)
    Base.metadata.create_all(
        engine,
        [t for t in Base.metadata.sorted_tables if t.name not in ("meta", "tags", "claims")],
    )
    with engine.begin() as conn:
        conn.execute(text("ALTER TABLE runs DROP COLUMN owner"))
        conn.execute(
            text(
                "INSERT INTO runs (name, kind, status, config, started) "
                "VALUES ('old', 'run', 'finished', '{}', '2025-01-01 00:00:00')"
            )
        )
    engine.dispose()
    store = RunStore.open(empty_url)
    assert store.get_run(1).name == "old" and _version(empty_url) == SCHEMA_VERSION
    assert store.set_tags(1, {"kept": "yes"}) == {"kept": "yes"}
    assert store.claim(store.create_study("s", "sweep"), "point") is None
    assert RunStore.open(empty_url).id == store.id
    store.engine.dispose()


def test_a_current_store_opens_while_another_process_holds_the_write_lock(empty_url: str) -> None:
    """Migrations run once: opening a store at the current version only reads, so workers
    that open the store while the parent writes (a sweep's, a report's) never wait on a lock.
    Before, every open began a write transaction under the schema lock."""
    RunStore.open(empty_url).engine.dispose()
    engine = create_engine(empty_url)
    holder = engine.connect()
    if engine.dialect.name == "sqlite":
        holder.exec_driver_sql("BEGIN IMMEDIATE")
    else:
        holder.execute(text("SELECT pg_advisory_lock(:key)"), {"key": PG_SCHEMA_LOCK})
    opened: list[RunStore] = []
    worker = threading.Thread(target=lambda: opened.append(RunStore.open(empty_url)), daemon=True)
    try:
        worker.start()
        worker.join(timeout=BUSY_TIMEOUT_S / 2)  # a write open would wait the busy timeout
        assert opened, "opening a current store waited for the write lock"
    finally:
        if engine.dialect.name == "sqlite":
            holder.rollback()
        else:
            holder.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": PG_SCHEMA_LOCK})
        holder.close()
        worker.join(timeout=BUSY_TIMEOUT_S * 2)
        engine.dispose()
    opened[0].engine.dispose()


def inspect_tables(url: str) -> list[str]:
    engine = create_engine(url)
    try:
        return inspect(engine).get_table_names()
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        (
            "CREATE TABLE experiments (experiment_id INTEGER PRIMARY KEY, name TEXT)",
            "holds tables that are not dlperf's: experiments",
        ),
        (  # MLflow's store has a `runs` table too
            "CREATE TABLE runs (run_uuid VARCHAR(32) PRIMARY KEY, name TEXT, status TEXT)",
            "table runs is not dlperf's (it has no column id, study_id, kind, config",
        ),
    ],
)
def test_a_foreign_schema_is_refused_untouched(
    empty_url: str, statement: str, message: str
) -> None:
    _sql(empty_url, statement)
    with pytest.raises(UserError, match=re.escape(message)) as refused:
        RunStore.open(empty_url)
    assert "a database of its own" in str(refused.value)
    assert set(inspect_tables(empty_url)) == {statement.split()[2]}  # nothing made beside it


def test_a_store_of_a_newer_dlperf_is_refused(empty_url: str) -> None:
    RunStore.open(empty_url).engine.dispose()
    newer = SCHEMA_VERSION + 1
    _sql(empty_url, f"UPDATE meta SET value = '{newer}' WHERE key = 'schema_version'")
    with pytest.raises(UserError, match=f"has schema version {newer}, newer than this dlperf's"):
        RunStore.open(empty_url)


def test_an_interrupt_wrapped_by_the_code_it_landed_in_still_kills_the_run(
    store: RunStore,
) -> None:
    run_id = store.create_run("r", "run", {})
    with pytest.raises(KeyboardInterrupt) as caught, store.recording(run_id):
        interrupt_wrapped_by_a_class_body()
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert (store.get_run(run_id).status, store.get_run(run_id).error) == ("killed", "interrupted")
    other = store.create_run("r", "run", {})
    with pytest.raises(RuntimeError), store.recording(other):
        raise RuntimeError("a plain failure")
    assert store.get_run(other).status == "failed"


# --- one writer per run -------------------------------------------------------------------------


def _take_over(url: str, run_id: int, conn: Connection) -> None:
    """A taker, in a forked child: it opens the store itself, reads the run and updates it
    when told to, at once with the others, and keeps its lease until the test has looked."""
    store = RunStore.open(url)
    conn.send("ready")
    conn.recv()  # "go": every taker reads the run, then updates it, at once
    try:
        store.take_over(run_id)
        conn.send("took it")
    except UserError as e:
        conn.send(f"refused: {e}")
    conn.recv()  # the winner keeps its lease until the test has looked


def _said(conn: Connection) -> str:
    assert conn.poll(60), "a taker said nothing in a minute"
    line = conn.recv()
    assert isinstance(line, str)
    return line


def test_of_processes_taking_over_a_stopped_run_at_once_one_wins(
    any_store: RunStore, tmp_path: Path
) -> None:
    """Four real processes take over one killed run at the same moment: the compare-and-set
    lets one through, and the others are refused in one line (the run is running in the
    winner, or was taken just now). The takers are forked (each opens the store anew, as a
    sweep's workers do): a fresh interpreter apiece cost seconds of imports and proved no more."""
    run_id = any_store.create_run("r", "run", {}, None, {"host": "h"})
    any_store.finish_run(run_id, "killed", error="interrupted")
    url = any_store.engine.url.render_as_string(hide_password=False)
    fork = multiprocessing.get_context("fork")
    pipes = [fork.Pipe() for _ in range(4)]
    takers = [
        fork.Process(target=_take_over, args=(url, run_id, child), daemon=True)
        for _, child in pipes
    ]
    try:
        for taker in takers:
            taker.start()
        for conn, _ in pipes:
            assert _said(conn) == "ready"
        for conn, _ in pipes:
            conn.send("go")
        said = [_said(conn) for conn, _ in pipes]
        winners = [t.pid for t, line in zip(takers, said, strict=True) if line == "took it"]
        assert len(winners) == 1, said
        assert winners[0] != os.getpid()
        refusals = [line for line in said if line != "took it"]
        assert all(
            re.fullmatch(
                rf"refused: run {run_id} (is running in pid {winners[0]} on .*"
                rf"|was taken over by another process just now.*)",
                line,
            )
            for line in refusals
        ), said
        run = any_store.get_run(run_id)
        assert (run.status, run.process["pid"]) == ("running", winners[0])
    finally:
        for (conn, child), taker in zip(pipes, takers, strict=True):
            with contextlib.suppress(OSError):
                conn.send("done")
            taker.join(timeout=60)
            if taker.is_alive():  # must not outlive the test
                taker.kill()
                taker.join()
            conn.close()
            child.close()
    assert [t.exitcode for t in takers] == [0, 0, 0, 0]
    assert any_store.get_run(run_id).status == "lost"  # the winner is gone: taken over again
    any_store.take_over(run_id)
    assert any_store.get_run(run_id).process["pid"] == os.getpid()


def test_a_finished_or_live_run_is_not_taken_over(any_store: RunStore) -> None:
    done = any_store.create_run("done", "run", {}, None, {"host": "h"})
    any_store.finish_run(done)
    with pytest.raises(UserError, match=f"run {done} already finished"):
        any_store.take_over(done)
    live = any_store.create_run("live", "run", {}, None, {"host": "h"})  # this process's
    with pytest.raises(UserError, match=f"run {live} is running in pid {os.getpid()} on "):
        any_store.take_over(live)


def test_a_point_is_claimed_by_one_process_until_it_is_gone(any_store: RunStore) -> None:
    study = any_store.create_study("s", "sweep")
    assert any_store.claim(study, "a") is None
    assert any_store.claim(study, "a") is None  # this process's already
    with any_store.engine.begin() as conn:  # as if claimed by another live process, then not
        other = json.dumps({**this_process(), "pid": 1, "start": proc_stat(1)[1]})
        conn.execute(text("UPDATE claims SET owner = :o"), {"o": other})
    assert any_store.claim(study, "a")["pid"] == 1
    with any_store.engine.begin() as conn:
        gone = json.dumps({**this_process(), "pid": 2**22 + 1})
        conn.execute(text("UPDATE claims SET owner = :o"), {"o": gone})
    assert any_store.claim(study, "a") is None
    assert any_store.claim(study, "b") is None


def test_a_store_that_cannot_be_written_refuses_writes_in_one_line(empty_url: str) -> None:
    """SQLite opened with ?mode=ro, a PostgreSQL session that is read-only: a write is a
    UserError (one line, exit 2 in the CLI), not a driver traceback; reading still works."""
    store = RunStore.open(empty_url)
    run_id = store.create_run("r", "run", {})
    store.finish_run(run_id)
    store.engine.dispose()
    url = make_url(empty_url)
    if url.get_backend_name() == "sqlite":
        read_only, message = f"{empty_url}?mode=ro", "is open read-only"
    else:
        options = f"{url.query.get('options', '')} -cdefault_transaction_read_only=on"
        read_only = url.update_query_dict({"options": options}).render_as_string(False)
        message = "cannot write run store .*read-only transaction"
    reopened = RunStore.open(read_only)
    try:
        assert reopened.get_run(run_id).status == "finished"
        with pytest.raises(UserError, match=message):
            reopened.set_tags(run_id, {"a": "b"})
    finally:
        reopened.engine.dispose()


def _leaked(*actions: Callable[[], object]) -> list[str]:
    """The connections `actions`, in turn, left open, by the warning each gives when
    collected (a full collection costs a good part of a second with torch loaded: one
    before, for what earlier tests left, and one after all of them)."""
    gc.collect()  # what earlier tests left is not this one's
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for action in actions:
            with contextlib.suppress(UserError):
                action()
        gc.collect()
    return [str(w.message) for w in caught if "still open" in str(w.message)]


def test_a_store_dropped_or_refused_leaves_no_connection_open(empty_url: str) -> None:
    """CI failed once on psycopg's "deleted while still open": stores dropped without
    `engine.dispose()`, and stores refused at open, left their pooled connections to the
    collector, which warned in whatever test it ran next."""
    newer = SCHEMA_VERSION + 1
    refused: list[str] = []  # the message only: the error's frames would keep the store

    def open_newer() -> None:
        try:
            RunStore.open(empty_url)
        except UserError as e:
            refused.append(str(e))

    assert (
        _leaked(
            lambda: RunStore.open(empty_url).list_runs(),  # dropped
            lambda: _sql(
                empty_url, f"UPDATE meta SET value = '{newer}' WHERE key = 'schema_version'"
            ),
            open_newer,  # refused: newer than this dlperf
        )
        == []
    )
    assert len(refused) == 1 and "newer than this dlperf's" in refused[0]
