"""Break-it round 19, fix L1: store copies and moved stores must not lose files.

A1: `runs repair NEW.db` copied the store id but not the `home` meta row, so `runs delete` in
the repaired copy removed the original's files. A2: a live copy and its original both wrote
their next run to `<out_dir>/<store id>/run-<id>/`, one overwriting the other's checkpoint.
G: a project folder moved whole left a deleted run's files on disk without a word."""

from __future__ import annotations

import shutil
from pathlib import Path

from dlperf.store import RunStore, repair
from tests.faults.test_break_it_4_store import _closed, _run_with_checkpoint


def _new_run(store: RunStore, out: Path) -> tuple[int, Path]:
    """A finished run of `store` with a checkpoint where a run writes it."""
    run_id = store.create_run("r", "exp", {"a": 1})
    checkpoint = store.artifact_dir(out) / f"run-{run_id}" / "checkpoint.pt"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(f"weights of {store.engine.url.database}".encode())
    store.add_artifact(run_id, "checkpoint", checkpoint)
    store.finish_run(run_id)
    return run_id, checkpoint


def test_a_repaired_copy_keeps_the_originals_files(tmp_path: Path) -> None:
    original, repaired = tmp_path / "x" / "dlperf.db", tmp_path / "r" / "rep.db"
    original.parent.mkdir()
    repaired.parent.mkdir()
    run_id, checkpoint = _run_with_checkpoint(original, tmp_path / "x" / "out")
    repair(str(original), str(repaired))
    deleted = RunStore.open(str(repaired)).delete_runs([run_id])
    assert deleted.removed == [] and checkpoint.read_bytes() == b"weights"
    [(path, why)] = deleted.kept
    assert path == str(checkpoint) and f"a copy of {original.resolve()}" in why


def test_a_repaired_store_moved_into_place_owns_its_files(tmp_path: Path) -> None:
    original, repaired = tmp_path / "dlperf.db", tmp_path / "rep.db"
    run_id, checkpoint = _run_with_checkpoint(original, tmp_path / "out")
    repair(str(original), str(repaired))
    original.rename(tmp_path / "dlperf.db.bad")  # kept aside, as `runs repair` says
    repaired.rename(original)
    deleted = RunStore.open(str(original)).delete_runs([run_id])
    assert deleted.removed == [str(checkpoint.parent)] and not checkpoint.exists()
    assert deleted.kept == []


def test_a_copy_writes_its_new_runs_apart_from_the_original(tmp_path: Path) -> None:
    out = tmp_path / "out"
    original, copy = tmp_path / "dlperf.db", tmp_path / "cpy.db"
    _run_with_checkpoint(original, out)
    shutil.copyfile(original, copy)
    in_copy, in_original = RunStore.open(str(copy)), RunStore.open(str(original))
    copy_run, copy_checkpoint = _new_run(in_copy, out)
    original_run, original_checkpoint = _new_run(in_original, out)
    assert copy_run == original_run  # both hand out the next id
    assert copy_checkpoint != original_checkpoint
    assert copy_checkpoint.read_bytes() == f"weights of {copy}".encode()
    assert original_checkpoint.parent.parent == out.resolve() / in_original.id
    # The copy's directory is its own for good: reopened, or moved, it writes there again.
    mine = copy_checkpoint.parent.parent
    assert mine.name.startswith(f"{in_copy.id}-")
    _closed(in_copy)
    assert RunStore.open(str(copy)).artifact_dir(out) == mine
    moved = tmp_path / "moved.db"
    copy.rename(moved)
    in_moved = RunStore.open(str(moved))
    assert in_moved.artifact_dir(out) == mine
    # Deleting in the copy removes its own run's files, not the original's.
    deleted = in_moved.delete_runs([copy_run])
    assert deleted.removed == [str(copy_checkpoint.parent)] and not copy_checkpoint.exists()
    assert original_checkpoint.read_bytes() == f"weights of {original}".encode()


def test_a_copy_of_a_copy_gets_a_directory_of_its_own(tmp_path: Path) -> None:
    out = tmp_path / "out"
    original, copy, second = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "c.db"
    _run_with_checkpoint(original, out)
    shutil.copyfile(original, copy)
    in_copy = RunStore.open(str(copy))
    _new_run(in_copy, out)
    _closed(in_copy)
    shutil.copyfile(copy, second)
    dirs = {RunStore.open(str(p)).artifact_dir(out) for p in (original, copy, second)}
    assert len(dirs) == 3


def test_a_project_moved_whole_deletes_the_runs_files_where_they_are_now(
    tmp_path: Path,
) -> None:
    old, new = tmp_path / "w", tmp_path / "w2"
    old.mkdir()
    run_id, checkpoint = _run_with_checkpoint(old / "dlperf.db", old / "dlperf_runs")
    old.rename(new)
    deleted = RunStore.open(str(new / "dlperf.db")).delete_runs([run_id])
    moved = new / checkpoint.relative_to(old)
    assert deleted.removed == [str(moved.parent)] and not moved.parent.exists()
    assert deleted.kept == []


def test_a_runs_files_found_nowhere_are_named(tmp_path: Path) -> None:
    old, new = tmp_path / "w", tmp_path / "w2"
    old.mkdir()
    run_id, checkpoint = _run_with_checkpoint(old / "dlperf.db", tmp_path / "elsewhere")
    shutil.move(tmp_path / "elsewhere", tmp_path / "moved_too")
    old.rename(new)
    deleted = RunStore.open(str(new / "dlperf.db")).delete_runs([run_id])
    assert deleted.removed == []
    [(path, why)] = deleted.kept
    assert path == str(checkpoint) and "not found" in why and "left" in why


def test_a_moved_runs_files_go_once_with_its_directory(tmp_path: Path) -> None:
    old, new = tmp_path / "w", tmp_path / "w2"
    old.mkdir()
    store = RunStore.open(str(old / "dlperf.db"))
    run_id, checkpoint = _new_run(store, old / "dlperf_runs")
    trace = checkpoint.parent / "trace.json"
    trace.write_text("{}")
    store.add_artifact(run_id, "trace", trace)
    _closed(store)
    old.rename(new)
    deleted = RunStore.open(str(new / "dlperf.db")).delete_runs([run_id])
    assert deleted.removed == [str(new / checkpoint.parent.relative_to(old))]
    assert deleted.kept == []
