"""Break-it round 26, part P4, causes 2, 3 and 8: `runs delete` stopped or killed midway.

2. `runs delete` deleted and committed the rows first, then removed the files: a SIGKILL (an
   OOM kill, a power cut) between the two left the files for good, and a second delete said
   "no run N in the store; nothing deleted". The files to remove are now recorded in the same
   transaction that deletes the rows, and the next `runs delete` finishes the removal.
3. A run that recorded no file (a SIGKILL during its first checkpoint write left only a
   `checkpoint.part.pt`) kept its own `<out_dir>/<store id>/run-N/` after its deletion.
8. A Ctrl-C that landed once the rows were committed exited 130 with nothing said, though the
   run and its files were gone: the removal now finishes, the deletion is reported, then 130.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from dlperf.store import RunStore
from tests.conftest import REPO, CliResult, fresh_store_url

Cli = Callable[..., CliResult]


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "fx26del")


def _run(store: RunStore, out: Path, checkpoint: str | None, part: bool = False) -> Path:
    """A finished run whose config's run.out_dir is `out`, with a checkpoint recorded (named
    `checkpoint`), or only a `checkpoint.part.pt` left in its directory (`part`); its run
    directory."""
    config: dict[str, Any] = {"run": {"out_dir": str(out)}}
    run_id = store.create_run("r", "run", config=config)
    where = store.artifact_dir(out) / f"run-{run_id}"
    where.mkdir(parents=True)
    if checkpoint is not None:
        (where / checkpoint).write_bytes(b"weights")
        store.add_artifact(run_id, "checkpoint", where / checkpoint)
    if part:
        (where / "checkpoint.part.pt").write_bytes(b"half")
    store.finish_run(run_id)
    return where


# The `runs delete` process, killed (SIGKILL) as it starts to remove the run's directory: after
# the rows went in the old order, before them now.
KILLED = """
import os, shutil, signal, sys
from dlperf.cli import main

def killed(path, *args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

shutil.rmtree = killed
sys.argv = ["dlperf", "--db", sys.argv[1], "runs", "delete", sys.argv[2], "--yes"]
main()
"""


def test_a_delete_killed_before_the_files_went_is_finished_by_the_next(
    url: str, tmp_path: Path, cli: Cli
) -> None:
    store = RunStore.open(url)
    where = _run(store, tmp_path / "runs", "checkpoint.pt")
    run_id = where.name.removeprefix("run-")
    killed = subprocess.run(
        [sys.executable, "-c", KILLED, url, run_id],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert (where / "checkpoint.pt").exists()  # the kill came before any file went
    again = cli("--db", url, "runs", "delete", run_id, "--yes")
    assert again.code == 0, again.err
    assert f"deleted run {run_id}\n" in again.out
    assert f"removed {where}\n" in again.out
    assert not where.exists()
    assert [r.id for r in store.list_runs()] == []
    nothing = cli("--db", url, "runs", "delete", run_id, "--yes")  # finished: no run now
    assert nothing.code != 0 and f"no run {run_id} in the store" in nothing.err


def test_a_run_that_recorded_no_file_leaves_no_run_directory(tmp_path: Path, cli: Cli) -> None:
    db = tmp_path / "dlperf.db"
    store = RunStore.open(f"sqlite:///{db}")
    out = tmp_path / "runs"
    where = _run(store, out, None, part=True)
    other = _run(store, out, "checkpoint.pt")  # another run's directory is left alone
    run_id = where.name.removeprefix("run-")
    # A byte copy (a backup) of the store while the original is there: the directory is the
    # original's, and deleting the run in the copy keeps it.
    copy = tmp_path / "copy.db"
    with closing(sqlite3.connect(db)) as source, closing(sqlite3.connect(copy)) as to:
        source.backup(to)  # the write-ahead log too
    in_copy = cli("--db", f"sqlite:///{copy}", "runs", "delete", run_id, "--yes")
    assert in_copy.code == 0, in_copy.err
    assert (where / "checkpoint.part.pt").exists()
    done = cli("runs", "delete", run_id, "--yes")
    assert done.code == 0, done.err
    assert f"removed {where}\n" in done.out
    assert not where.exists()
    assert (other / "checkpoint.pt").exists()


def test_ctrl_c_once_the_rows_went_still_says_what_was_deleted(
    tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RunStore.open(f"sqlite:///{tmp_path / 'dlperf.db'}")
    where = _run(store, tmp_path / "runs", "checkpoint.pt")
    run_id = where.name.removeprefix("run-")
    rmtree = shutil.rmtree

    def interrupted(path: Any, *args: Any, **kwargs: Any) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C as the files start to go
        rmtree(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", interrupted)
    stopped = cli("runs", "delete", run_id, "--yes")
    assert stopped.code == 130, stopped.err
    assert f"deleted run {run_id}\n" in stopped.out
    assert f"removed {where}\n" in stopped.out
    assert not where.exists()
    assert [r.id for r in store.list_runs()] == []
