"""What the sixteenth break-it round found in opening and writing the run store, reproduced
first: a PostgreSQL store ran SQLite's integrity check on a file or directory in the current
directory named like its database (`syntax error at or near "PRAGMA"` from every command), and
failed from a deleted current directory (C1); a SQLite store name of 248-255 bytes, whose
-journal, -wal or -shm names do not fit, blamed the directory and left an empty store file (C2);
a SQLite write stopped by a file size limit (ulimit -f) said "disk I/O error", exit 2 from
`runs repair` and a traceback from `sweep` (C3)."""

from __future__ import annotations

import os
import resource
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import make_url

from dlperf.store import RunStore
from tests.conftest import TINY, CliResult, fresh_store_url
from tests.faults.test_break_it_10_store import a_run
from tests.faults.test_break_it_13_limits import _limited
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

LIMITED = (
    "File too large (a file size limit (ulimit -f) stopped the write: raise it, or write less)"
)


# --- C1: a PostgreSQL store looked at local files ------------------------------------------------


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url("postgresql", tmp_path, "bi16")


@pytest.mark.parametrize("named", ["directory", "file"])
def test_a_postgresql_store_ignores_what_the_cwd_holds_under_its_name(
    cli: Cli, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, named: str
) -> None:
    """Before: `error: cannot open run store postgresql+psycopg://...: syntax error at or
    near "PRAGMA"; LINE 1: PRAGMA quick_check(1); ^`, exit 2, from every command."""
    run_id = a_run(pg_url)
    here = tmp_path / "checkout"
    database = here / str(make_url(pg_url).database)
    if named == "directory":
        database.mkdir(parents=True)
    else:
        here.mkdir()
        database.write_bytes(b"not a database" * 1000)
    monkeypatch.chdir(here)
    tagged = cli("--db", pg_url, "runs", "tag", str(run_id), "a=b")
    assert tagged.code == 0, tagged.err
    listed = cli("--db", pg_url, "runs", "list")
    assert listed.code == 0 and listed.err == "", listed.err


def test_a_postgresql_store_opens_from_a_deleted_cwd(
    cli: Cli, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: `error: cannot use: No such file or directory`, exit 2."""
    run_id = a_run(pg_url)
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    tagged = cli("--db", pg_url, "runs", "tag", str(run_id), "a=b")
    assert tagged.code == 0, tagged.err
    store = RunStore.open(pg_url)
    assert store.get_run(run_id).tags == {"a": "b"}
    store.engine.dispose()


# --- C2: a SQLite store name with no room for -wal and -shm --------------------------------------


@pytest.mark.parametrize("length", [248, 252, 255])
def test_a_new_store_name_too_long_for_its_journal_is_one_line_and_makes_no_file(
    cli: Cli, tmp_path: Path, length: int
) -> None:
    """Before: `unable to open database file (SQLite writes -wal and -shm files beside the
    store: is its directory writable? ...)`, exit 2, and a 0-byte store file left. A new
    store needs NAME-journal too: SQLite writes its first page so, then switches to WAL."""
    name = "c" * length
    result = cli("--db", name, "runs", "tag", "1", "a=b")
    assert result.err.splitlines()[-1] == (
        f"error: run store sqlite:///{name}: its file name is {length} bytes, too long for the "
        "-journal, -wal and -shm files SQLite writes beside it (at most 247 bytes) (give a "
        "shorter name)"
    )
    one_line(result, 2)
    assert os.listdir(tmp_path) == []


def test_a_store_name_of_247_bytes_is_a_store(tmp_path: Path) -> None:
    path = tmp_path / ("c" * 244 + ".db")
    run_id = a_run(str(path))
    store = RunStore.open(str(path))
    assert store.get_run(run_id).status == "finished"
    store.engine.dispose()


def test_an_existing_store_needs_room_for_its_wal_only(cli: Cli, tmp_path: Path) -> None:
    """A store copied to a name of 251 bytes opens (it is in WAL mode already: no -journal);
    one of 252 cannot, and says why."""
    run_id = a_run(str(tmp_path / "s.db"))
    for length in (251, 252):
        copy = tmp_path / ("c" * length)
        shutil.copy(tmp_path / "s.db", copy)
        result = cli("--db", copy.name, "runs", "tag", str(run_id), "a=b")
        if length == 251:
            assert result.code == 0, result.err
            continue
        one_line(result, 2)
        assert result.err.splitlines()[-1] == (
            f"error: run store sqlite:///{copy.name}: its file name is 252 bytes, too long for "
            "the -wal and -shm files SQLite writes beside it (at most 251 bytes) (give a "
            "shorter name)"
        )


# --- C3: a SQLite write stopped by a file size limit ---------------------------------------------


def test_a_store_write_stopped_by_a_file_size_limit_says_so(tmp_path: Path) -> None:
    """Before: the driver's "disk I/O error" as a traceback, exit 1. Tags of 50 KB in one
    write: the store opens under 40 KiB (its -shm is 32 KiB), its -wal outgrows it."""
    run_id = a_run(str(tmp_path / "dlperf.db"))
    tags = [f"k{i}={'v' * 5000}" for i in range(10)]
    result = _limited(tmp_path, resource.RLIMIT_FSIZE, 40 * 1024, "runs", "tag", str(run_id), *tags)
    one_line(result, 1)
    assert result.err.splitlines()[-1] == f"error: cannot use {tmp_path / 'dlperf.db'}: {LIMITED}"
    store = RunStore.open(str(tmp_path / "dlperf.db"))
    assert store.get_run(run_id).tags == {}  # the write was all or nothing
    store.engine.dispose()


def test_runs_repair_stopped_by_a_file_size_limit_says_so(tmp_path: Path) -> None:
    """Before: `error: cannot open run store sqlite:///.rp.db.repairing: disk I/O error`,
    exit 2 (bad input)."""
    a_run(str(tmp_path / "s.db"))
    result = _limited(
        tmp_path, resource.RLIMIT_FSIZE, 10 * 1024, "--db", "s.db", "runs", "repair", "rp.db"
    )
    one_line(result, 1)
    assert result.err.splitlines()[-1] == f"error: cannot use rp.db: {LIMITED}"  # round 22: NEW
    assert sorted(os.listdir(tmp_path)) == ["s.db"]  # nothing of the repair is left


@pytest.mark.faults
def test_a_sweep_stopped_by_a_file_size_limit_says_so(tmp_path: Path) -> None:
    """Before: point 1 failed (its checkpoint too large), then point 2's claim ended the
    sweep with a 40-line traceback of sqlite3's "disk I/O error", exit 1. Point 1 marked
    failed fits under the limit: 256 samples, one epoch."""
    base = TINY.format(epochs=1).replace('name = "digits"', 'name = "digits"\nlimit = 256')
    (tmp_path / "base.toml").write_text(base)
    (tmp_path / "sw.toml").write_text(
        'base = "base.toml"\nname = "twin"\n[grid]\n"train.lr" = [0.05, 0.02]\n'
    )
    result = _limited(tmp_path, resource.RLIMIT_FSIZE, 100 * 1024, "sweep", "sw.toml")
    one_line(result, 1)
    assert result.err.splitlines()[-1] == f"error: cannot use {tmp_path / 'dlperf.db'}: {LIMITED}"
    store = RunStore.open(str(tmp_path / "dlperf.db"))
    assert [r.status for r in store.list_runs()] == ["failed"]  # and none left running
    store.engine.dispose()
