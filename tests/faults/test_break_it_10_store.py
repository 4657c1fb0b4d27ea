"""What the tenth break-it round found in the run store, reproduced first: two `runs tag` of
one key at once on PostgreSQL a UniqueViolation traceback (and the loser's other tags lost);
PostgreSQL's "permission denied" a traceback; a store id edited by hand used as a path."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, text

from dlperf.store import RunStore
from tests.conftest import POSTGRES, CliResult, fresh_store_url
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]
WAIT_S = 60  # generous: each wait ends as soon as what it waits for is seen


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "bi10")


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url("postgresql", tmp_path, "bi10")


def _schema(url: str) -> str:
    return str(make_url(url).query["options"]).removeprefix("-csearch_path=")


def a_run(url: str) -> int:
    store = RunStore.open(url)
    run_id = store.create_run("r", "train", {})
    store.finish_run(run_id)
    store.engine.dispose()
    return run_id


# --- 1: two `runs tag` of one key at once ------------------------------------------------------


def test_tagging_a_key_again_keeps_the_last_value(cli: Cli, store_url: str) -> None:
    run_id = a_run(store_url)
    for i in range(3):
        result = cli("--db", store_url, "runs", "tag", str(run_id), f"k=v{i}", f"t{i}=x")
        assert result.code == 0, result.err
    tags = RunStore.open(store_url).get_run(run_id).tags
    assert tags == {"k": "v2", "t0": "x", "t1": "x", "t2": "x"}


def test_a_tag_written_meanwhile_by_another_process_is_overwritten(pg_url: str) -> None:
    """Under READ COMMITTED, set_tags' delete found no row (the other's insert was not yet
    committed), then its insert waited for the other's and failed: UniqueViolation on
    tags_pkey, a traceback, and its other tag lost. The interleaving is forced: the test's
    own transaction holds an uncommitted `k`, set_tags runs in a thread until PostgreSQL
    shows it waiting for that transaction's lock, and only then does the test commit."""
    run_id = a_run(pg_url)
    store = RunStore.open(pg_url)
    other = create_engine(pg_url)
    outcome: dict[str, object] = {}
    try:
        with other.connect() as conn:
            conn.execute(
                text("INSERT INTO tags (run_id, key, value) VALUES (:r, 'k', 'theirs')"),
                {"r": run_id},
            )
            mine = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()

            def tag() -> None:
                try:
                    outcome["tags"] = store.set_tags(run_id, {"k": "mine", "t": "x"})
                except BaseException as e:
                    outcome["error"] = e

            thread = threading.Thread(target=tag)
            thread.start()
            waiting = text(
                "SELECT count(*) FROM pg_stat_activity WHERE :mine = ANY(pg_blocking_pids(pid))"
            )
            deadline = time.monotonic() + WAIT_S
            with other.connect() as watcher:
                while not watcher.execute(waiting, {"mine": mine}).scalar_one():
                    assert time.monotonic() < deadline, "set_tags never waited for the lock"
                    assert thread.is_alive(), outcome
                    time.sleep(0.05)
            conn.commit()
            thread.join(WAIT_S)
            assert not thread.is_alive()
    finally:
        other.dispose()
    assert "error" not in outcome, repr(outcome.get("error"))
    assert outcome["tags"] == {"k": "mine", "t": "x"}
    assert store.get_run(run_id).tags == {"k": "mine", "t": "x"}


# --- 2: PostgreSQL's permission denied ---------------------------------------------------------


@pytest.fixture
def revoked(pg_url: str) -> Iterator[Callable[[str, str], None]]:
    """Revokes privileges on this test's own schema's tables (never the role's elsewhere);
    granted back after the test."""
    schema = _schema(pg_url)
    assert schema.startswith("dlperf_bi10_")
    admin = create_engine(POSTGRES or "")
    done: list[tuple[str, str]] = []

    def revoke(privileges: str, tables: str = "ALL TABLES IN SCHEMA") -> None:
        target = f"{tables} {schema}" if tables == "ALL TABLES IN SCHEMA" else f"{schema}.{tables}"
        with admin.begin() as conn:
            conn.execute(text(f"REVOKE {privileges} ON {target} FROM CURRENT_USER"))
        done.append((privileges, target))

    try:
        yield revoke
    finally:
        with admin.begin() as conn:
            for privileges, target in done:
                conn.execute(text(f"GRANT {privileges} ON {target} TO CURRENT_USER"))
        admin.dispose()


@pytest.mark.parametrize(
    "args",
    [("runs", "tag", "1", "a=b"), ("runs", "delete", "1", "--yes")],
)
def test_a_store_that_refuses_writes_is_one_line(
    cli: Cli, pg_url: str, revoked: Callable[..., None], args: tuple[str, ...]
) -> None:
    """It was an 86-line ProgrammingError traceback (InsufficientPrivilege), exit 1."""
    assert a_run(pg_url) == 1
    revoked("INSERT, UPDATE, DELETE")
    result = cli("--db", pg_url, *args)
    one_line(result, 2, "refuses writes: permission denied for table", "grant the role INSERT")
    assert "dlperf:dlperf@" not in result.err


def test_a_run_in_a_store_that_refuses_writes_is_one_line(
    cli: Cli, pg_url: str, revoked: Callable[..., None], tiny_exp: Callable[..., Path]
) -> None:
    a_run(pg_url)
    revoked("INSERT, UPDATE, DELETE")
    result = cli("--db", pg_url, "run", str(tiny_exp(epochs=1)))
    one_line(result, 2, "refuses writes: permission denied for table runs")


def test_a_run_whose_metrics_are_refused_ends_failed_in_one_line(
    cli: Cli, pg_url: str, revoked: Callable[..., None], tiny_exp: Callable[..., Path]
) -> None:
    """Refused mid-run: the run is marked failed, saying why, as a trigger's refusal is."""
    a_run(pg_url)
    revoked("INSERT", "metrics")
    result = cli("--db", pg_url, "run", str(tiny_exp(epochs=1)))
    one_line(result, 2, "refuses writes: permission denied for table metrics")
    run = RunStore.open(pg_url).get_run(2)
    assert run.status == "failed"
    assert "permission denied for table metrics" in (run.error or "")


def test_a_store_that_refuses_reads_is_one_line(
    cli: Cli, pg_url: str, revoked: Callable[..., None]
) -> None:
    a_run(pg_url)
    revoked("SELECT", "runs")
    result = cli("--db", pg_url, "runs", "show", "1")
    one_line(result, 2, "refuses reads: permission denied for table runs", "grant the role SELECT")


# --- 3: a store id edited by hand ---------------------------------------------------------------


def set_store_id(path: Path, value: str) -> None:
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'store_id'", (value,))


@pytest.mark.parametrize("bad", ["../../etc", "", "/tmp", "abc\x1b[31m", "ABCDEF012345"])
def test_a_store_id_edited_by_hand_is_refused(
    cli: Cli, tmp_path: Path, tiny_exp: Callable[..., Path], bad: str
) -> None:
    """`run` wrote its checkpoint to <out_dir>/../../etc/run-N/, outside run.out_dir."""
    db = tmp_path / "x.db"
    a_run(f"sqlite:///{db}")
    set_store_id(db, bad)
    out = tmp_path / "deep" / "od"
    result = cli("--db", str(db), "run", str(tiny_exp(epochs=1)), "--set", f"run.out_dir={out}")
    one_line(result, 2, "x.db", f"store id {bad!r}", "runs repair NEW.db")
    assert "\x1b" not in result.err
    assert [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix == ".pt"] == []
    for args in (("runs", "list"), ("runs", "tag", "1", "a=b")):
        one_line(cli("--db", str(db), *args), 2, f"store id {bad!r}")


def test_repair_gives_a_store_whose_id_was_edited_a_new_one(cli: Cli, tmp_path: Path) -> None:
    """`runs repair` copied the id as it was: the new store used it as a path too."""
    db = tmp_path / "x.db"
    a_run(f"sqlite:///{db}")
    set_store_id(db, "../../etc")
    result = cli("--db", str(db), "runs", "repair", str(tmp_path / "new.db"))
    assert result.code == 0, result.err
    with closing(sqlite3.connect(tmp_path / "new.db")) as conn:
        # The new store's own id, written by the repair (a store with no id row is refused).
        (kept,) = conn.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchall()
    new = RunStore.open(str(tmp_path / "new.db"))
    assert len(new.id) == 12 and new.id != "../../etc" and (new.id,) == kept
    assert new.artifact_dir(tmp_path / "od") == (tmp_path / "od" / new.id).resolve()
    assert [r.id for r in new.list_runs()] == [1]


def test_a_server_store_id_edited_by_hand_is_refused(cli: Cli, pg_url: str) -> None:
    a_run(pg_url)
    engine = create_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE meta SET value = '../../etc' WHERE key = 'store_id'"))
    engine.dispose()
    one_line(cli("--db", pg_url, "runs", "list"), 2, "store id '../../etc'", "set it back")
