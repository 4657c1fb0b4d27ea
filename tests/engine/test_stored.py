"""dlperf.engine.stored: the protocols through which the engine reads stored runs. The
contract: dlperf.store's RunStore and RunRecord have every member the engine reads, and a
run read back through them answers each."""

from __future__ import annotations

import inspect
from typing import Any

from dlperf.engine.stored import StoredRun, StoredRuns
from dlperf.records import RunSummary
from dlperf.store import RunStore
from dlperf.store.record import RunRecord


def members(protocol: type) -> set[str]:
    return {
        name
        for name, _ in inspect.getmembers(protocol)
        if not name.startswith("_") and name in vars(protocol)
    }


def test_the_protocols_name_what_the_engine_reads() -> None:
    assert members(StoredRuns) == {"id", "get_run", "list_runs", "artifacts", "last_step"}
    assert members(StoredRun) == {
        "id", "name", "kind", "status", "config", "config_hash", "trained"
    }  # fmt: skip


def test_the_store_has_every_method_and_a_record_every_field() -> None:
    methods = {m for m in members(StoredRuns) if inspect.isfunction(getattr(StoredRuns, m))}
    assert methods == {"get_run", "list_runs", "artifacts", "last_step"}
    assert all(callable(getattr(RunStore, m, None)) for m in methods)
    # The store's own id is set per store (checked on a real one below).
    assert all(hasattr(RunRecord, m) or m in RunRecord.__dataclass_fields__
               for m in members(StoredRun))  # fmt: skip


def test_a_stored_run_answers_through_the_protocols(store: RunStore) -> None:
    runs: StoredRuns = store
    with store.new_run(name="r", kind="train", config={"run": {"checkpoint": True}}) as rec:
        store.log_metrics(rec.id, [("epoch/train_loss", 4, 0.5)])
    run: StoredRun = runs.get_run(rec.id)
    assert (run.id, run.name, run.kind, run.status) == (rec.id, "r", "train", "finished")
    assert run.config["run"] == {"checkpoint": True}
    assert isinstance(run.trained, RunSummary)
    assert runs.last_step(rec.id, "epoch/train_loss") == 4
    assert runs.last_step(rec.id, "no/such_key") is None
    assert runs.artifacts(rec.id) == []
    assert [r.id for r in runs.list_runs()] == [rec.id]
    stamp: Any = runs.id
    assert isinstance(stamp, str) and stamp
