"""Break-it round 48, fixer G2: copies of a store after the original is renamed.

T2 C5 (data-loss): `cp a.db backup.db; mv a.db lab.db`, then `runs delete 1` in the backup
removed lab.db's run 1 checkpoint, and from then on both stores took themselves for the owner
of `<out_dir>/<store id>/` and wrote one `run-<id>/`, the later overwriting the other's
checkpoint. The `home` a store records was a path only: gone, it was read as "the store was
moved" by any store with that id. The home's file is recorded too now (device and inode, meta
`home_file`): the moved original (that file) takes its home over as before; another store,
while a file of that identity with the same store id is still in the recorded path's folder
(the common `mv` in place) or in its own folder, is a copy of that one: its delete keeps the
original's files ("this store is a copy of .../lab.db, whose run it is too") and it writes its
new runs under a directory of its own.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_break_it_4_store import _closed, _run_with_checkpoint


def _backed_up_and_renamed(tmp_path: Path) -> tuple[int, Path, Path, Path]:
    """A store with one run and its checkpoint, backed up by `cp`, then renamed in place:
    the run's id, its checkpoint, the renamed original and the backup."""
    out = tmp_path / "dlperf_runs"
    run_id, checkpoint = _run_with_checkpoint(tmp_path / "a.db", out)
    shutil.copyfile(tmp_path / "a.db", tmp_path / "backup.db")
    (tmp_path / "a.db").rename(tmp_path / "lab.db")
    return run_id, checkpoint, tmp_path / "lab.db", tmp_path / "backup.db"


def test_a_backup_opened_after_its_original_was_renamed_keeps_the_originals_files(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    run_id, checkpoint, lab, backup = _backed_up_and_renamed(tmp_path)
    r = cli("--db", str(backup), "runs", "delete", str(run_id), "--yes")
    assert r.code == 0, r.err
    # before: "removed .../run-1", and lab.db's run had no checkpoint left
    assert checkpoint.read_bytes() == b"weights"
    said = " ".join(r.err.split())
    assert f"this store is a copy of {lab}, whose run it is too" in said, r.err
    # The renamed original is the owner: its own delete removes them.
    deleted = RunStore.open(str(lab)).delete_runs([run_id])
    assert deleted.removed == [str(checkpoint.parent)] and not checkpoint.exists()


@pytest.mark.parametrize("first", ["original", "backup"])
def test_a_renamed_original_and_its_backup_write_their_runs_apart(
    tmp_path: Path, first: str
) -> None:
    _, _, lab, backup = _backed_up_and_renamed(tmp_path)
    out = tmp_path / "dlperf_runs"
    order = [lab, backup] if first == "original" else [backup, lab]
    dirs = {}
    for path in order:  # whichever opens first after the rename, the same answer
        store = RunStore.open(str(path))
        dirs[path] = store.artifact_dir(out)
        _closed(store)
    # before: both `<store id>/`, one run-<id>/ for the two stores' next runs
    assert dirs[lab] != dirs[backup]
    assert dirs[lab].name == RunStore.open(str(lab)).id
    assert dirs[backup].name.startswith(f"{dirs[lab].name}-")


def test_the_renamed_original_owns_its_files_beside_a_backup(tmp_path: Path) -> None:
    run_id, checkpoint, lab, _ = _backed_up_and_renamed(tmp_path)
    deleted = RunStore.open(str(lab)).delete_runs([run_id])
    assert deleted.removed == [str(checkpoint.parent)] and deleted.kept == []
