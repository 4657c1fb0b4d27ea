"""The store defects of the fourth break-it round (issue 41), each reproduced first: a write
behind another process's write lock, a stop while waiting for it, a store whose runs stay in
its -wal file after the command, and store paths and URLs that ended in a traceback."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest

from dlperf import stopping
from dlperf.errors import UserError
from dlperf.store import RunStore, migrations, runstore
from tests.conftest import TINY, CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

EVENT_S = 300  # how long a busy machine may take to get somewhere: a deadline, not a wait


@contextmanager
def write_locked(path: Path) -> Iterator[None]:
    """SQLite's write lock on `path`, held by a connection of this process (another process's
    as far as the store's own connections can tell) until the block ends."""
    with closing(sqlite3.connect(path, isolation_level=None)) as holder:
        holder.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            holder.execute("ROLLBACK")


def a_run(path: Path) -> int:
    store = RunStore.open(str(path))
    try:
        run_id = store.create_run("r", "exp", {"a": 1})
        store.finish_run(run_id)
        return run_id
    finally:
        store.engine.dispose()


def status_of(path: Path, run_id: int) -> str:
    with closing(sqlite3.connect(path)) as conn:
        [(status,)] = conn.execute("SELECT status FROM runs WHERE id = ?", (run_id,))
    return str(status)


# --- c04/c15: a write behind another process's write lock -----------------------------------


@pytest.mark.parametrize("command", ["tag", "delete"])
def test_write_behind_a_held_lock_is_one_line_exit_1(
    cli: Cli, tmp_path: Path, command: str
) -> None:
    path = tmp_path / "x.db"
    run_id = a_run(path)
    args = {"tag": ["runs", "tag", str(run_id), "a=b"], "delete": ["runs", "delete", "1", "--yes"]}
    with write_locked(path):
        result = cli("--db", f"sqlite:///{path}?timeout=0.2", *args[command])
    one_line(result, 1, f"run store sqlite:///{path}", "is locked by another process: waited 0 s")
    assert "try again" in result.err
    assert status_of(path, run_id) == "finished"  # nothing deleted
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM tags").fetchone() == (0,)


def test_run_behind_a_held_lock_is_one_line_exit_1(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    a_run(path)  # the store exists: the lock is met by the new run's insert
    (tmp_path / "exp.toml").write_text(TINY.format(epochs=1))
    with write_locked(path):
        result = cli(
            "--db", f"sqlite:///{path}?timeout=0.2", "run", str(tmp_path / "exp.toml"),
            "--set", "run.threads=1",
        )  # fmt: skip
    one_line(result, 1, "is locked by another process")
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (1,)  # no run made


def test_a_bad_busy_timeout_is_one_line_exit_2(cli: Cli, tmp_path: Path) -> None:
    one_line(
        cli("--db", f"sqlite:///{tmp_path}/x.db?timeout=soon", "runs", "list"), 2, "timeout=soon"
    )


# --- c16: a stop signal while waiting for the lock -------------------------------------------


def test_a_stop_while_waiting_for_the_write_lock_ends_the_command(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite's own busy handler waited out the whole timeout (30 s) in C with the SIGTERM
    held; the command now ends 143 between two attempts at the lock, the lock still held.
    The timeout is an hour: only the stop can end this wait."""
    path = tmp_path / "x.db"
    run_id = a_run(path)
    waiting, ended = threading.Event(), threading.Event()

    class Stopping:
        """dlperf.stopping as the store sees it, telling when the store asks whether a stop
        came (between two attempts at the lock, and nowhere else)."""

        def __getattr__(self, name: str) -> Any:
            return getattr(stopping, name)

        def requested(self) -> bool:
            waiting.set()
            return stopping.requested()

    monkeypatch.setattr(runstore, "stopping", Stopping())
    # The lock is held past any grace: the grace after the stop (5 s) only lengthens the wait.
    monkeypatch.setattr(runstore, "STOP_WAIT_S", 0.5)

    def stop_once_waiting() -> None:
        if waiting.wait(EVENT_S) and not ended.is_set():
            os.kill(os.getpid(), signal.SIGTERM)

    stopper = threading.Thread(target=stop_once_waiting, daemon=True)
    with write_locked(path):
        stopper.start()
        result = cli("--db", f"sqlite:///{path}?timeout=3600", "runs", "tag", str(run_id), "a=b")
    stopped_at_an_attempt = waiting.is_set()
    ended.set()
    waiting.set()  # the stopper leaves without a signal if none was asked for
    stopper.join()
    assert stopped_at_an_attempt, result.err
    assert result.code == 143, result.err
    assert "Traceback" not in result.err
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM tags").fetchone() == (0,)


# --- x16: the runs of a command are in the store file once it ends ---------------------------


@pytest.mark.faults  # over 10 s under load: make test-faults
def test_a_copy_of_the_store_file_alone_holds_the_run(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    (tmp_path / "exp.toml").write_text(TINY.format(epochs=1))
    done = subprocess.run(
        [
            sys.executable, "-m", "dlperf", "--db", str(path), "run", str(tmp_path / "exp.toml"),
            "--set", "data.limit=64", "--set", "run.threads=1",
            "--set", f"run.out_dir={tmp_path / 'out'}",
        ],
        capture_output=True, text=True, cwd=tmp_path, timeout=EVENT_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    wal = tmp_path / "x.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0
    shutil.copyfile(path, tmp_path / "copy.db")  # the file alone, as `cp x.db` copies it
    with closing(sqlite3.connect(tmp_path / "copy.db")) as conn:
        assert conn.execute("SELECT status FROM runs").fetchall() == [("finished",)]


# --- x07: a URL SQLAlchemy cannot parse ------------------------------------------------------


@pytest.mark.parametrize("url", ["postgresql://u:pw@host:abc/db", "postgresql://u:pw@[::1:5432/db"])
def test_a_url_whose_port_is_not_a_number_is_one_line_exit_2(cli: Cli, url: str) -> None:
    for args in (["runs", "list"], ["runs", "tag", "1", "a=b"]):
        result = cli("--db", url, *args)
        one_line(result, 2, "postgresql://u:***@", "port is not a number")
        assert "pw" not in result.err


# --- k06: psycopg's own log lines ------------------------------------------------------------


def test_opening_a_postgresql_store_quiets_psycopgs_warnings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """psycopg logs a warning ("error ignored terminating <psycopg.Pipeline ...>") when the
    server goes mid-run, before dlperf's own one line says so."""
    logger = logging.getLogger("psycopg")
    monkeypatch.setattr(logger, "level", logging.NOTSET)
    with pytest.raises(UserError):  # nothing listens on port 1
        RunStore.open("postgresql+psycopg://u:pw@127.0.0.1:1/db")
    assert logger.getEffectiveLevel() >= logging.ERROR


# --- x14: a run whose JSON column is not JSON ------------------------------------------------


@pytest.mark.parametrize("column", ["config", "summary", "system"])
@pytest.mark.parametrize("command", [["runs", "list"], ["runs", "show", "1"]])
def test_a_run_whose_json_is_garbled_is_one_line_naming_it(
    cli: Cli, tmp_path: Path, column: str, command: list[str]
) -> None:
    path = tmp_path / "x.db"
    a_run(path)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(f"UPDATE runs SET {column} = '{{not json' WHERE id = 1")
        conn.commit()
    result = cli("--db", str(path), *command)
    one_line(result, 2, f"run 1's {column} in run store", "is not JSON", "runs repair NEW.db")


@pytest.mark.parametrize("column", ["config", "summary"])
def test_the_stores_own_reads_name_a_garbled_run_too(tmp_path: Path, column: str) -> None:
    """What SQLAlchemy reads (resume, export, compare, report): its JSON type's json.loads."""
    path = tmp_path / "x.db"
    a_run(path)
    a_run(path)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(f"UPDATE runs SET {column} = 'nan{{' WHERE id = 2")
        conn.commit()
    store = RunStore.open(str(path), create=False)
    try:
        assert store.get_run(1).id == 1
        for read in (lambda: store.get_run(2), store.list_runs):
            with pytest.raises(UserError, match=f"run 2's {column} in run store .* is not JSON"):
                read()
    finally:
        store.engine.dispose()


# --- x13: runs repair onto a full disk -------------------------------------------------------


def test_a_repair_that_cannot_make_its_new_store_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new store's schema written, then the disk full (ENOSPC): NEW.db, -wal and -shm
    were left, and a retry said that NEW.db exists."""
    source = tmp_path / "x.db"
    a_run(source)
    out = tmp_path / "new.db"
    migrate = migrations.migrate

    def full_disk(*args: Any, **kwargs: Any) -> str | None:
        migrate(*args, **kwargs)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(out))

    monkeypatch.setattr(migrations, "migrate", full_disk)
    with pytest.raises(OSError, match="No space left"):
        runstore.repair(str(source), out)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("new.db")] == []
    monkeypatch.setattr(migrations, "migrate", migrate)
    assert runstore.repair(str(source), out).tables["runs"].copied == 1  # the retry


# --- c02, c09, x02: store paths that name no store file --------------------------------------


def test_a_store_path_that_is_a_directory_says_so(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    for args in (["runs", "tag", "1", "a=b"], ["runs", "list"]):
        result = cli("--db", str(tmp_path / "d"), *args)
        one_line(result, 2, f"run store {tmp_path / 'd'} is a directory", "d/dlperf.db")


def test_a_store_path_ending_in_a_slash_is_refused(cli: Cli, tmp_path: Path) -> None:
    """It used the file x.db, silently."""
    a_run(tmp_path / "x.db")
    result = cli("--db", f"{tmp_path}/x.db/", "runs", "tag", "1", "a=b")
    one_line(result, 2, "ends in /", "names a directory")
    with closing(sqlite3.connect(tmp_path / "x.db")) as conn:
        assert conn.execute("SELECT count(*) FROM tags").fetchone() == (0,)
    # runs list reads a plain store through sqlite3, not RunStore.open: the same answer, for
    # an existing store and for one not there (it listed nothing, exit 0)
    for path in (f"{tmp_path}/x.db/", f"{tmp_path}/new.db/"):
        one_line(cli("--db", path, "runs", "list"), 2, "ends in /", "names a directory")


def test_a_sqlite_uri_filename_is_refused_with_the_plain_form(cli: Cli, tmp_path: Path) -> None:
    result = cli("--db", f"sqlite:///file:{tmp_path}/x.db?uri=true", "runs", "list")
    one_line(
        result, 2, "SQLite URI filenames (file:...) are not supported", f"sqlite:///{tmp_path}/x.db"
    )


def _closed(store: RunStore) -> None:
    """Every connection of `store` closed: its WAL is in the file, which a byte copy takes."""
    store.engine.dispose()
    if store._keeper is not None:
        store._keeper.close()


def _run_with_checkpoint(path: Path, out: Path) -> tuple[int, Path]:
    """A finished run of the store at `path` whose checkpoint sits in its run directory."""
    store = RunStore.open(str(path))
    run_id = store.create_run("r", "exp", {"a": 1})
    checkpoint = store.artifact_dir(out) / f"run-{run_id}" / "checkpoint.pt"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"weights")
    store.add_artifact(run_id, "checkpoint", checkpoint)
    store.finish_run(run_id)
    _closed(store)
    return run_id, checkpoint


def test_deleting_a_run_in_a_copy_of_the_store_keeps_the_originals_files(tmp_path: Path) -> None:
    """x18: a byte copy carries the original's store id, so both name the same files under
    <out_dir>/<store id>/; `runs delete` in the copy removed the original's checkpoint."""
    original, copy = tmp_path / "a.db", tmp_path / "backup.db"
    run_id, checkpoint = _run_with_checkpoint(original, tmp_path / "out")
    shutil.copyfile(original, copy)
    in_copy = RunStore.open(str(copy))
    deleted = in_copy.delete_runs([run_id])
    assert in_copy.list_runs() == [] and deleted.removed == []
    assert checkpoint.read_bytes() == b"weights"  # the original's run still has its weights
    [(path, why)] = deleted.kept
    assert path == str(checkpoint) and f"a copy of {original.resolve()}" in why
    # The original deletes its own run's files.
    assert RunStore.open(str(original)).delete_runs([run_id]).removed == [str(checkpoint.parent)]
    assert not checkpoint.parent.exists()


def test_a_moved_store_still_deletes_its_own_files(tmp_path: Path) -> None:
    """A store moved (its old file gone) owns its files where it is now."""
    old, new = tmp_path / "old.db", tmp_path / "new.db"
    run_id, checkpoint = _run_with_checkpoint(old, tmp_path / "out")
    old.rename(new)
    deleted = RunStore.open(str(new)).delete_runs([run_id])
    assert deleted.removed == [str(checkpoint.parent)] and not checkpoint.exists()
