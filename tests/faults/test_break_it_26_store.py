"""Break-it round 26, part P3, fixer B2: the run store's connections and files.

C5. A PostgreSQL server (or a proxy) that closes idle sessions (idle_session_timeout): the
    store's pooled connection, closed while it sat idle between two writes of a run, was met
    by the next write, and `dlperf run`, `dlperf.track` and `dlperf sweep` stopped with "run
    store ... went away (terminating connection due to idle-session timeout)", leaving the
    run lost. A connection is now checked before each use and replaced if closed; one closed
    while dlperf held it is said as the idle timeout it is, not as the store going away.
C10. A SQLite store's folder renamed while a run wrote it: "run store sub1/x.db was deleted
    or replaced ... saved in x.rescued-run1.db (move it back to sub1/x.db ...)", a folder that
    no longer exists, and a second store with the same id. Now: moved, to where, with
    everything in it, and how to resume there.
C12. Two `runs repair X NEW.db` at once shared one staging name and unlinked and renamed each
    other's: the loser said "disk I/O error" or "No such file or directory", and the winner
    could rename the other's half-written copy to NEW. Each repair now stages under a name
    of its own and claims NEW only once its copy is whole (a hard link, which never replaces
    a file): the loser says NEW exists.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

import dlperf
from dlperf.errors import StoreGone, UserError
from dlperf.store import RunStore, integrity
from dlperf.store.runstore import repair
from tests.conftest import POSTGRES, fresh_store_url
from tests.faults.test_break_it_5_store import files_in
from tests.faults.test_break_it_10_store import a_run
from tests.faults.test_break_it_26_pg import _with_options

WAIT_S = 120.0  # a deadline for what another session or thread makes happen, not a wait


def _wait_for(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"no {what} within {WAIT_S} s"
        time.sleep(0.05)


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url("postgresql", tmp_path, "fx26b2")


def test_a_connection_the_server_closed_while_idle_is_replaced(pg_url: str) -> None:
    """C5: idle_session_timeout (here the URL's, as a role's or a database's) closes the
    pooled connections between two flushes of a run; the run goes on and finishes."""
    app = f"dlperf_idle_{uuid.uuid4().hex[:8]}"
    url = _with_options(pg_url, "idle_session_timeout=300", f"application_name={app}")
    assert POSTGRES is not None
    admin = create_engine(POSTGRES)

    def sessions() -> int:
        with admin.connect() as conn:
            query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = :app"
            return int(conn.execute(text(query), {"app": app}).scalar() or 0)

    try:
        with dlperf.track("idle", store=url) as r:
            r.log(1, loss=0.5)
            r.flush()
            _wait_for(lambda: sessions() == 0, "idle session closed by the server")
            r.log(2, loss=0.25)
            r.flush()
        store = RunStore.open(url, create=False)
        try:
            assert store.get_run(r.id).status == "finished"
            assert store.metrics(r.id, "train/loss") == [(1, 0.5), (2, 0.25)]
            # A connection held (not in the pool) while the server closed it: the one line
            # names the idle timeout and its fix, not a store that went away.
            with store.engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
                conn.commit()
                _wait_for(lambda: sessions() == 0, "held session closed by the server")
                with pytest.raises(UserError) as closed:
                    conn.exec_driver_sql("SELECT 1")
        finally:
            store.engine.dispose()
    finally:
        admin.dispose()
    said = str(closed.value)
    assert not isinstance(closed.value, StoreGone), said
    assert "went away" not in said and "idle_session_timeout" in said, said
    assert "\n" not in said


def test_a_store_whose_folder_is_renamed_mid_run_says_where_it_went(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """C10: the file is whole at its new path (every write before the move: the one that
    met it is refused, so that a retry does not write its rows twice), the line says moved
    and where, and no rescue copy (a second store with the same id) is made."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub1").mkdir()
    old, new = tmp_path / "sub1" / "x.db", tmp_path / "sub2" / "x.db"
    with pytest.raises(StoreGone) as gone, dlperf.track("moved", store=str(old)) as r:
        r.log(1, loss=0.5)
        r.flush()
        (tmp_path / "sub1").rename(tmp_path / "sub2")
        r.log(2, loss=0.25)
        r.flush()
    said = str(gone.value)
    assert "deleted" not in said and "rescued" not in said, said
    assert f"{old} was moved to {new}" in said, said
    assert f"--db {new}" in said or f"store={new}" in said, said
    # Its -wal and -shm (still open here) aside, the store is the one file, where it went.
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert [p for p in files if not p.name.endswith(("-wal", "-shm"))] == [new]
    store = RunStore.open(str(new), create=False)
    try:
        assert store.metrics(r.id, "train/loss") == [(1, 0.5)]
        # Left unmarked, as a killed run's: lost once its process (this one) has ended.
        assert store.get_run(r.id).status == "running"
    finally:
        store.engine.dispose()


def test_a_store_deleted_mid_track_is_rescued_with_each_row_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """C10's neighbour: the write that met a deleted store went into its old file (for the
    rescue copy) and was said to have failed; dlperf.track's flush at the end of its block
    wrote the same rows again, and the rescued store held step 2 twice."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "x.db"
    with pytest.raises(StoreGone), dlperf.track("deleted", store=str(path)) as r:
        r.log(1, loss=0.5)
        r.flush()
        path.unlink()
        r.log(2, loss=0.25)
        r.flush()
    store = RunStore.open(str(tmp_path / "x.rescued-run1.db"), create=False)
    try:
        assert store.metrics(r.id, "train/loss") == [(1, 0.5), (2, 0.25)]
    finally:
        store.engine.dispose()


def test_two_repairs_into_one_new_store_one_wins_the_other_says_it_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """C12: the first repair is held mid-copy while a second runs whole; once let go, the
    first says NEW exists (it replaced nothing), and NEW is the second's whole copy."""
    source, out = tmp_path / "x.db", tmp_path / "n.db"
    run_id = a_run(str(source))
    copy_readable = integrity.copy_readable
    parked, go = threading.Event(), threading.Event()
    first = threading.current_thread()

    def copying(*args: object) -> integrity.Repaired:
        if threading.current_thread() is not first and not parked.is_set():
            parked.set()
            assert go.wait(WAIT_S)
        return copy_readable(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(integrity, "copy_readable", copying)
    outcome: list[BaseException | None] = []

    def held() -> None:
        try:
            repair(str(source), str(out))
            outcome.append(None)
        except BaseException as e:
            outcome.append(e)

    thread = threading.Thread(target=held)
    thread.start()
    try:
        assert parked.wait(WAIT_S)
        repair(str(source), str(out))
    finally:
        go.set()
        thread.join(WAIT_S)
    assert not thread.is_alive()
    [lost] = outcome
    assert isinstance(lost, UserError), lost
    assert str(lost) == f"{out} exists (repair writes a new store: give a new file name)"
    assert files_in(tmp_path) == ["n.db", "x.db"]
    assert not list(tmp_path.glob(".n.db.repairing*"))  # neither copy's staging, nor its WAL
    store = RunStore.open(str(out), create=False)
    try:
        assert [run.id for run in store.list_runs()] == [run_id]
    finally:
        store.engine.dispose()
