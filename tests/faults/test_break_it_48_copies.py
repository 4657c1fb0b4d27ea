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

T2 C2 (message): a copy made while a sweep or a run trained took the original's live process
for its own writer: `sweep --resume` skipped the point ("pid N runs it") and `run --resume`
said "wait for it to end, or stop it" (stopping the original's run). A point's claim records
the store its process writes now, as a run's process does (`RunStore.writes_elsewhere`): a
copy takes a claim whose process writes another store (its sweep trains the point as a run of
its own), and the resume says whose the run is, without "stop it".

T2 C1 (message): `doctor` (and `report`) advised `run --resume N` in such a copy once the
original's process had ended (its row there reads as lost), a resume that is refused (its
checkpoint is then the original's, ahead): the fix now says whose the run is.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult, finished, python_child
from tests.faults.test_break_it_4_store import _closed, _run_with_checkpoint

# A sweep's process as a store sees it: it claims a point and trains it as a run (one epoch
# done, its checkpoint saved), until a line comes on stdin.
WRITER = """
import sys
from pathlib import Path

from dlperf import stopping
from dlperf.store import RunStore
from dlperf.store.query import EXPERIMENT_SECTIONS


def command() -> int:
    store = RunStore.open(sys.argv[1])
    config = {section: {} for section in EXPERIMENT_SECTIONS}
    config["train"]["epochs"] = 2
    study = store.create_study("lrs", "sweep")
    assert store.claim(study, "point-2") is None
    run_id = store.create_run("live", "run", config, study_id=study, system={})
    checkpoint = Path(sys.argv[2])
    checkpoint.write_bytes(b"weights")
    store.add_artifact(run_id, "checkpoint", checkpoint)
    store.log_metrics(run_id, [("epoch/train_loss", 1, 0.5)])
    with store.recording(run_id):
        print(study, run_id, flush=True)
        sys.stdin.readline()
    return 0


stopping.run(command, process=True)
"""


@pytest.fixture
def copied_live(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], int, int, Path, Path]]:
    """A store copied (sqlite3's backup) while a sweep's process trains a point of it: that
    process (a line on its stdin lets it finish), the study, the run, the original, the copy."""
    original, copy = tmp_path / "a.db", tmp_path / "b.db"
    with python_child(WRITER, str(original), str(tmp_path / "checkpoint.pt")) as writer:
        study, run_id = map(int, writer.stdout.readline().split())
        source, target = sqlite3.connect(original), sqlite3.connect(copy)
        with source, target:
            source.backup(target)
        source.close()
        target.close()
        yield writer, study, run_id, original, copy


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


def test_a_copys_sweep_takes_the_point_the_originals_process_holds(
    copied_live: tuple[subprocess.Popen[str], int, int, Path, Path],
) -> None:
    writer, study, _, original, copy = copied_live
    store = RunStore.open(str(copy))
    try:
        # before: that process's claim, "pid N runs it", and the point skipped for good
        assert store.claim(study, "point-2") is None
    finally:
        _closed(store)
    in_original = RunStore.open(str(original))
    try:
        assert in_original.claim(study, "point-2") is not None  # still the sweep's there
    finally:
        _closed(in_original)
    finished(writer)


def test_a_copys_resume_of_the_originals_live_run_says_whose_it_is(
    cli: Callable[..., CliResult],
    copied_live: tuple[subprocess.Popen[str], int, int, Path, Path],
) -> None:
    writer, _, run_id, original, copy = copied_live
    r = cli("--db", str(copy), "run", "--resume", str(run_id))
    assert r.code == 2, r.err
    said = " ".join(r.err.split())
    # before: "is running in pid N on HOST ... (wait for it to end, or stop it; ...)"
    assert f"run {run_id} runs in pid {writer.pid}" in said, r.err
    assert f"which writes {original} (this store is a copy of it)" in said, r.err
    assert "stop it" not in said and "wait for it" not in said, r.err
    finished(writer)


def test_doctor_in_a_copy_does_not_advise_resuming_the_originals_run(
    cli: Callable[..., CliResult],
    copied_live: tuple[subprocess.Popen[str], int, int, Path, Path],
) -> None:
    writer, _, run_id, original, copy = copied_live
    finished(writer)  # it went on in the original: the copy's row reads as lost
    assert RunStore.open(str(copy)).get_run(run_id).status == "lost"
    r = cli("--db", str(copy), "doctor", "--last", "5")
    said = " ".join(r.out.split())
    assert "unfinished" in said, r.out
    # before: "fix: continue it from its last checkpoint: dlperf --db b.db run --resume 1"
    assert "--resume" not in said, r.out
    assert f"its process wrote {original} (this store is a copy of it)" in said, r.out
