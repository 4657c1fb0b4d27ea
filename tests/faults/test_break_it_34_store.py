"""Break-it round 34, P3 (the run store), causes C1 and on, and their review.

C1. A project folder moved whole (store file and dlperf_runs/ together): `runs delete` found
    the run's files beside the store, but `runs show` said `exists: no`, `export N` "put the
    run's checkpoint back, or train the run again" and `runs trace` "its trace is gone". A run's
    recorded files are read where `runs delete` finds them (`RunStore.artifacts`).
"""

from __future__ import annotations

from pathlib import Path

from dlperf.engine.checkpoint import run_checkpoint
from dlperf.store import RunStore
from dlperf.store.query import show
from dlperf.traces import run_traces
from tests.faults.test_break_it_4_store import _closed


def test_a_project_moved_whole_reads_its_runs_files_where_they_are_now(tmp_path: Path) -> None:
    old, new = tmp_path / "w", tmp_path / "w2"
    old.mkdir()
    store = RunStore.open(str(old / "dlperf.db"))
    run_id = store.create_run("r", "run", {"a": 1})
    run_dir = store.artifact_dir(old / "dlperf_runs") / f"run-{run_id}"
    checkpoint, trace = run_dir / "checkpoint.pt", run_dir / "trace" / "rank0.pt.trace.json.gz"
    trace.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"weights")
    trace.write_bytes(b"{}")
    store.add_artifact(run_id, "trace", trace)
    store.add_artifact(run_id, "checkpoint", checkpoint)
    store.finish_run(run_id)
    _closed(store)
    old.rename(new)
    checkpoint_now, trace_now = (new / p.relative_to(old) for p in (checkpoint, trace))
    for create in (False, True):  # a reader (show, export, trace), a writer (run --resume)
        moved = RunStore.open(str(new / "dlperf.db"), create=create)
        assert moved.artifacts(run_id) == [
            {"kind": "trace", "path": str(trace_now)},
            {"kind": "checkpoint", "path": str(checkpoint_now)},
        ]
        assert all(a["exists"] for a in show(moved, run_id, values=False).artifacts)
        assert run_checkpoint(moved, run_id, "to export", "") == checkpoint_now
        assert run_traces(moved, run_id) == [trace_now]
        _closed(moved)
