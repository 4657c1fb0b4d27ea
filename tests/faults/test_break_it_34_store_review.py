"""Break-it round 34, P3 (the run store): the review of its fixes.

R1. `runs delete` of a distill select run keeps its pseudo-labelled npz while the pretrain run
    trains on it (C2), but then deleting the pretrain run left the npz behind without a word:
    no run recorded it any more. The runs that train on a kept file record it now, so it goes
    with the last of them.
"""

from __future__ import annotations

from pathlib import Path

from dlperf.store import RunStore
from tests.faults.test_break_it_4_store import _closed


def test_a_file_kept_for_the_run_that_trains_on_it_goes_with_that_run(tmp_path: Path) -> None:
    store = RunStore.open(str(tmp_path / "dlperf.db"))
    pseudo = store.artifact_dir(tmp_path / "dlperf_runs") / "study-1" / "pseudo-0123.npz"
    pseudo.parent.mkdir(parents=True)
    pseudo.write_bytes(b"images")
    select = store.create_run("d-select-k10", "select", {"top_k": 10})
    store.add_artifact(select, "pseudo-labels", pseudo)
    config = {"data": {"root": str(pseudo)}}
    pretrain, other = (store.create_run(n, "run", config) for n in ("d-pretrain-k10", "again"))
    for run_id in (select, pretrain, other):
        store.finish_run(run_id)
    kept = store.delete_runs([select]).kept
    assert kept == [(str(pseudo), f"runs {pretrain}, {other} train on it (its data.root)")]
    assert store.artifacts(pretrain) == [{"kind": "pseudo-labels", "path": str(pseudo)}]
    deleted = store.delete_runs([pretrain])
    assert deleted.kept == [(str(pseudo), "another run records it too")] and pseudo.is_file()
    assert store.delete_runs([other]).removed == [str(pseudo)] and not pseudo.exists()
    _closed(store)
