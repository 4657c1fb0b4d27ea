"""Break-it round 19, fix L1: store copies and moved stores must not lose files.

A1: `runs repair NEW.db` copied the store id but not the `home` meta row, so `runs delete` in
the repaired copy removed the original's files. A2: a live copy and its original both wrote
their next run to `<out_dir>/<store id>/run-<id>/`, one overwriting the other's checkpoint.
G: a project folder moved whole left a deleted run's files on disk without a word."""

from __future__ import annotations

from pathlib import Path

from dlperf.store import RunStore, repair
from tests.faults.test_break_it_4_store import _run_with_checkpoint


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
