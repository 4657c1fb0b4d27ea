"""What the 22nd break-it round found in `runs repair` and in reading a store's schema version,
reproduced first: `runs repair NEW` stopped by a file size limit (ulimit -f, and so a full
disk) printed the driver's 80-line "disk I/O error" traceback when the limit was met during
the copy, and named the hidden staging file `.NEW.repairing`, not NEW, when it was met as the
new store was made (P4 cause C); a stored schema version of '03' passed the isdecimal() check
and a read command rewrote it to '3' (a write by a read).

The file size limit is set with resource.setrlimit in a real child (preexec_fn), which runs
`python -m dlperf`; SIGXFSZ is ignored there as Python itself ignores it, so that a write past
the limit fails with EFBIG instead of killing the process."""

from __future__ import annotations

import os
import random
import resource
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from dlperf.store import RunStore
from dlperf.store.migrations import SCHEMA_VERSION
from tests.conftest import CliResult
from tests.faults.test_store_faults import mounted, one_line

Cli = Callable[..., CliResult]

LIMITED = (
    "File too large (a file size limit (ulimit -f) stopped the write: raise it, or write less)"
)


def _limited(cwd: Path, cap: int, *args: str) -> CliResult:
    """`python -m dlperf ARGS` in `cwd` under a file size limit of `cap` bytes."""

    def limit() -> None:  # in the child, between fork and exec
        resource.setrlimit(resource.RLIMIT_FSIZE, (cap, cap))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    done = subprocess.run(
        [sys.executable, "-m", "dlperf", *args],
        cwd=cwd,
        env={**os.environ, "DLPERF_DB": str(cwd / "dlperf.db"), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=240,
        preexec_fn=limit,
    )
    return CliResult(done.returncode, done.stdout, done.stderr)


def _source(path: Path) -> None:
    """A store file of about 300 KiB (one run of three noisy curves), closed: its -wal is
    checkpointed into it, so that opening it under the limit writes nothing to it."""
    store = RunStore.open(str(path))
    run_id = store.create_run("noisy", "run", {"n": 1})
    noise = random.Random(22)
    keys = ("train/loss", "train/lr", "val/acc1")
    store.log_metrics(run_id, [(k, s, noise.random()) for k in keys for s in range(1, 2001)])
    store.finish_run(run_id, "finished")
    store.engine.dispose()
    assert path.stat().st_size > 200 * 1024


# --- 1: runs repair under a file size limit --------------------------------------------------


# Each stage once, and each way of naming NEW once: the name is said as given at either stage.
@pytest.mark.parametrize(
    ("cap_kib", "where", "named"),
    [(60, "during the copy", "relative"), (10, "as the new store is made", "absolute")],
)
def test_runs_repair_stopped_by_a_file_size_limit_names_new(
    cli: Cli, tmp_path: Path, cap_kib: int, where: str, named: str
) -> None:
    """Before: at 60 KiB the driver's 80-line `sqlalchemy.exc.OperationalError: disk I/O
    error` traceback, exit 1; at 10 KiB `error: cannot use .rp.db.repairing: File too large`,
    the hidden staging file's name."""
    _source(tmp_path / "s.db")
    new = "rp.db" if named == "relative" else str(tmp_path / "rp.db")
    result = _limited(tmp_path, cap_kib * 1024, "--db", "s.db", "runs", "repair", new)
    one_line(result, 1)
    assert result.err.splitlines()[-1] == f"error: cannot use {new}: {LIMITED}", where
    # Nothing of the repair is left. (A copy leaves the source's empty -wal and its -shm: SQLite
    # makes them to read a WAL store, and a read-only connection cannot remove them.)
    assert not [name for name in os.listdir(tmp_path) if "rp.db" in name]
    # And with the limit lifted the same repair works: the source was only read. (In this
    # process, no limit set: the cli fixture works in tmp_path, as the limited run did.)
    again = cli("--db", "s.db", "runs", "repair", new)
    assert again.code == 0, again.err
    store = RunStore.open(str(tmp_path / "rp.db"))
    assert [r.status for r in store.list_runs()] == ["finished"]
    store.engine.dispose()


def test_runs_repair_on_a_disk_with_room_for_the_wal_only_says_so(cli: Cli, tmp_path: Path) -> None:
    """Before: on a disk with room for the copy in the new store's -wal but not for the file
    it is then checkpointed into, SQLite's checkpoint at close failed without a word, repair
    said `wrote NEW: 1 run(s)`, exit 0, and NEW held part of the copy beside a hidden
    `.NEW.repairing-wal` and -shm. The full disk is a small tmpfs (skipped where mounting
    is refused, always unmounted), sized 1.5 times the copy."""
    _source(tmp_path / "s.db")
    probe = cli("--db", str(tmp_path / "s.db"), "runs", "repair", str(tmp_path / "probe.db"))
    assert probe.code == 0, probe.err
    size = -(-(tmp_path / "probe.db").stat().st_size * 3 // 2 // 4096) * 4096
    with mounted("-t", "tmpfs", "-o", f"size={size}", "tmpfs", target=tmp_path / "small") as small:
        new = small / "rp.db"
        result = cli("--db", str(tmp_path / "s.db"), "runs", "repair", str(new))
        one_line(result, 1)
        assert result.err.splitlines()[-1] == f"error: cannot use {new}: No space left on device"
        assert os.listdir(small) == []  # nothing of the repair is left


# --- 3: a schema version not written as dlperf writes it ------------------------------------


def _version(url: str, value: str | None = None) -> str:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            if value is not None:
                conn.execute(
                    text("UPDATE meta SET value = :v WHERE key = 'schema_version'"), {"v": value}
                )
            return str(conn.scalar(text("SELECT value FROM meta WHERE key = 'schema_version'")))
    finally:
        engine.dispose()


@pytest.mark.parametrize("stored", ["03", "003", "\u0663", "+3", "1" * 5000])
def test_a_schema_version_not_written_as_dlperf_writes_it_is_refused_unwritten(
    cli: Cli, tmp_path: Path, stored: str
) -> None:
    """'03' passed isdecimal() and `runs list` rewrote it to '3'; '٣' (an Arabic-Indic
    three) passed too. As '3.0', ' 3' and '0' are: one line, exit 2, and the row left as
    it was."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = RunStore.open(url)
    run_id = store.create_run("r", "train", {})
    store.finish_run(run_id)
    store.engine.dispose()
    _version(url, stored)
    for args in (("runs", "list"), ("runs", "show", str(run_id)), ("runs", "tag", "1", "a=b")):
        one_line(
            cli("--db", url, *args),
            2,
            f"schema version {stored!r}, which no dlperf writes",
            "runs repair NEW.db",
        )
        assert _version(url) == stored, args


@pytest.mark.parametrize("stored", ["04", "4" * 5000])
def test_a_repair_copies_a_store_of_version_04_as_damaged_not_newer(
    cli: Cli, tmp_path: Path, stored: str
) -> None:
    """`--db` calls '04' a version no dlperf writes and says to repair the store: repair
    must not then refuse it as a newer store ('4' is one). 5000 digits were int()'s
    ValueError traceback."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = RunStore.open(url)
    store.finish_run(store.create_run("r", "train", {}))
    store.engine.dispose()
    _version(url, stored)
    result = cli("--db", url, "runs", "repair", str(tmp_path / "new.db"))
    assert result.code == 0, result.err
    assert _version(f"sqlite:///{tmp_path / 'new.db'}") == str(SCHEMA_VERSION)
    _version(url, "4")
    one_line(cli("--db", url, "runs", "repair", str(tmp_path / "new2.db")), 2, "newer than")
