"""Break-it round 24, fix task H: the run store's waits and fixes, on SQLite and PostgreSQL.

H. PostgreSQL: a write waited for a row lock with no limit, and SIGINT/SIGTERM did nothing
   until the lock freed (writes are shielded). Now it waits in short attempts (lock_timeout),
   a stop lands between two, and after the busy timeout it says "locked by another process".
A. PostgreSQL: a privilege refused while a store opens (42501) pasted psycopg's "LINE 2:" and
   gave no fix: now its GRANT.
G. PostgreSQL read-only session: a write got SQLite's fix (lsattr, the mount).
B. --db DIR/ of a directory suggested --db DIR, itself refused as a directory.
C. ?mode=ro of a store in a read-only folder with a -wal and no -shm advised ?mode=ro.
I. Views (compare, doctor, ...) left an empty -wal and -shm beside a SQLite store.
F. A store gone under a run that cannot be resumed (dlperf.track's) offered `run --resume`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, make_url, text

from dlperf.errors import StoreGone
from dlperf.store import RunStore, runstore
from tests.conftest import REPO, CliResult, fresh_store_url
from tests.faults.test_break_it_4_store import _closed
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]
DLPERF = [sys.executable, "-m", "dlperf"]
EXPERIMENT = {"model": {"name": "smallcnn"}, "data": {}, "train": {}, "run": {}}


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    """A new PostgreSQL store's URL (a schema of its own); skips without a server."""
    yield from fresh_store_url("postgresql", tmp_path, "bk24")


def _with_run(url: str) -> int:
    """Make the store at `url` with one finished run; its id."""
    store = RunStore.open(url)
    run_id = store.create_run("r", "run", EXPERIMENT)
    store.finish_run(run_id, "finished", summary={})
    _closed(store)
    return run_id


def _option(url: str, option: str) -> str:
    """`url` with one more server option (-c NAME=VALUE) beside its search_path."""
    parsed = make_url(url)
    options = f"{parsed.query['options']} {option}"
    return parsed.update_query_dict({"options": options}).render_as_string(hide_password=False)


# H


def _waiting(admin: Engine, application: str, timeout_s: float = 60.0) -> None:
    """Wait until the server shows a session of `application` waiting on a lock."""
    query = text(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND application_name = :name"
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with admin.connect() as conn:
            if conn.execute(query, {"name": application}).scalar():
                return
        time.sleep(0.05)
    raise AssertionError(f"{application} never waited on the lock")


@pytest.fixture
def held_run(pg_url: str) -> Iterator[tuple[str, int]]:
    """A PostgreSQL store whose run 1's row another connection holds FOR UPDATE."""
    run_id = _with_run(pg_url)
    holder = create_engine(pg_url, connect_args={"application_name": "holder"})
    with holder.connect() as conn:
        conn.execute(text("SELECT id FROM runs WHERE id = :id FOR UPDATE"), {"id": run_id})
        yield pg_url, run_id
        conn.rollback()
    holder.dispose()


def test_a_postgresql_write_behind_a_row_lock_gives_up_as_sqlite_does(
    held_run: tuple[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, run_id = held_run
    monkeypatch.setattr(runstore, "BUSY_TIMEOUT_S", 1)
    store = RunStore.open(url, create=False, writes=True)
    raised: list[BaseException] = []

    def tag() -> None:
        try:
            store.set_tags(run_id, {"q": "w"})
        except BaseException as e:
            raised.append(e)

    # In a thread, so that a wait with no limit (as before) fails the test, not hangs it.
    waiter = threading.Thread(target=tag, daemon=True)
    waiter.start()
    waiter.join(60)
    assert not waiter.is_alive(), "the write still waits for the lock"
    assert len(raised) == 1 and isinstance(raised[0], runstore.StoreLocked), raised
    assert "is locked by another process: waited 1 s" in str(raised[0])
    store.engine.dispose()


def test_a_stop_ends_a_postgresql_write_waiting_for_a_row_lock(
    held_run: tuple[str, int],
) -> None:
    url, run_id = held_run
    application = f"bk24-waiter-{os.getpid()}"  # the child's sessions, told apart
    named = make_url(url).update_query_dict({"application_name": application})
    db = named.render_as_string(hide_password=False)
    child = subprocess.Popen(
        [*DLPERF, "--db", db, "runs", "tag", str(run_id), "q=w"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    admin = create_engine(url)
    try:
        _waiting(admin, application)
        child.send_signal(signal.SIGINT)
        # The lock is still held: the stop alone ends the command, well before the 30 s.
        _, err = child.communicate(timeout=20)
        assert child.returncode == 130, err
        assert "Traceback" not in err
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        admin.dispose()


# A


@pytest.mark.parametrize(
    ("revoke", "command", "fix"),
    [
        ("REVOKE CREATE ON SCHEMA {schema} FROM {user}", "run", "GRANT CREATE ON SCHEMA"),
        ("REVOKE SELECT ON meta FROM {user}", "list", "GRANT SELECT ON ALL TABLES IN SCHEMA"),
    ],
)
def test_a_privilege_refused_at_open_gives_its_grant(
    pg_url: str, cli: Cli, revoke: str, command: str, fix: str
) -> None:
    schema = make_url(pg_url).query["options"].split("=", 1)[1]
    if command == "list":
        _with_run(pg_url)
    admin = create_engine(pg_url)
    with admin.begin() as conn:
        user = conn.execute(text("SELECT current_user")).scalar()
        conn.execute(text(revoke.format(schema=schema, user=user)))
    admin.dispose()
    result = cli("--db", pg_url, "runs", "list") if command == "list" else _make(pg_url)
    one_line(result, 2, "permission denied", fix, f"TO {user}")
    assert "LINE" not in result.err


def _make(url: str) -> CliResult:
    """Open (make) the store at `url` as a command that writes does, as the CLI says it."""
    from dlperf.errors import UserError

    try:
        RunStore.open(url)
    except UserError as e:
        return CliResult(2, "", f"error: {e}\n")
    return CliResult(0, "", "")


# G


def test_a_write_in_a_read_only_postgresql_session_gets_the_session_fix(
    pg_url: str, cli: Cli
) -> None:
    run_id = _with_run(pg_url)
    read_only = _option(pg_url, "-cdefault_transaction_read_only=on")
    result = cli("--db", read_only, "runs", "tag", str(run_id), "a=b")
    one_line(result, 2, "read-only", "not default_transaction_read_only=on")
    assert "lsattr" not in result.err


# B


def test_a_directory_with_a_slash_suggests_a_file_in_it(tmp_path: Path, db: str, cli: Cli) -> None:
    folder = tmp_path / "stores"
    folder.mkdir()
    one_line(cli("--db", f"{folder}/", "runs", "list"), 2, f"--db {folder}/dlperf.db")
    _with_run(db)
    repaired = cli("runs", "repair", f"{folder}/")
    one_line(repaired, 2, f"runs repair {folder}/dlperf.db")
    assert "--db" not in repaired.err


# C


@pytest.mark.skipif(
    os.geteuid() == 0 and shutil.which("setpriv") is None, reason="root, and no setpriv"
)
def test_a_wal_without_its_shm_in_a_read_only_folder_says_to_copy_both(tmp_path: Path) -> None:
    made = tmp_path / "made.db"
    store = RunStore.open(str(made))
    store.create_run("r", "run", EXPERIMENT)
    # A -wal that holds the run, as a writer killed before its checkpoint leaves it.
    wal = made.with_name("made.db-wal")
    shutil.copyfile(made, tmp_path / "copy.db")
    shutil.copyfile(wal, tmp_path / "copy.db-wal")
    _closed(store)
    folder = tmp_path / "ro"
    folder.mkdir()
    for name in ("copy.db", "copy.db-wal"):
        (tmp_path / name).rename(folder / name.replace("copy", "s"))
    folder.chmod(0o555)
    # As root, the folder's mode binds only without the capabilities that override it.
    ro_url = f"sqlite:///{folder / 's.db'}?mode=ro"
    drop = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--inh-caps=-all"]
    try:
        done = subprocess.run(
            [*(drop if os.geteuid() == 0 else []), *DLPERF, "--db", ro_url, "runs", "list"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        folder.chmod(0o755)
    result = CliResult(done.returncode, done.stdout, done.stderr)
    one_line(result, 2, f"{folder / 's.db'}-wal", "copy the store with its -wal")
    assert "--db 'sqlite:///PATH?mode=ro'" not in result.err


# I


def test_a_view_leaves_a_sqlite_store_s_folder_as_it_found_it(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    store = RunStore.open(str(path))
    for _ in range(2):
        run_id = store.create_run("r", "run", EXPERIMENT)
        store.log_metrics(run_id, [("loss", 1, 0.5)])
        store.finish_run(run_id, "finished", summary={})
    _closed(store)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.db"]
    done = subprocess.run(
        [*DLPERF, "--db", str(path), "runs", "compare", "1", "2"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.db"]


# F


@pytest.mark.parametrize("kept", [True, False], ids=["sqlite-file-deleted", "server-gone"])
@pytest.mark.parametrize("tracked", [True, False], ids=["track", "experiment"])
def test_a_store_gone_offers_resume_only_for_a_run_that_resumes(
    tmp_path: Path, kept: bool, tracked: bool
) -> None:
    path = tmp_path / "t.db"
    # Without its file kept (writes=False), the store is as a server's: it cannot be rescued.
    store = RunStore.open(str(path), writes=None if kept else False)
    config = {"lr": 0.1} if tracked else EXPERIMENT
    with pytest.raises(StoreGone) as e, store.new_run("t", "run", config) as record:
        if kept:
            path.unlink()
            store.log_metrics(record.id, [("loss", 1, 0.5)])
        else:
            raise StoreGone("run store x went away (terminated)")
    said = str(e.value)
    assert ("--resume" in said) is not tracked, said
    _closed(store)
