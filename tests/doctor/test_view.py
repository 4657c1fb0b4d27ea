"""dlperf.doctor.view: how a rule reads a run (RunView over Stored), on runs stored by hand."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest

from dlperf.distributed.contracts import PointSummary
from dlperf.doctor.view import Issue, RunView, Stored
from dlperf.store import RunStore


def _summary(**figures: Any) -> dict[str, Any]:
    none = {f.name: None for f in fields(PointSummary)}
    return PointSummary(**none | {"ranks": ()} | figures).to_dict()


def _view(store: RunStore, run_id: int) -> RunView:
    stored = Stored(store)
    return RunView(stored, stored.run(run_id))


def _point(
    store: RunStore,
    study: int | None,
    workers: int,
    status: str = "finished",
    mode: str = "weak",
    batch: int = 32,
    **figures: Any,
) -> int:
    point = {"workers": workers, "mode": mode, "per_worker_batch": batch, "comm": "allreduce",
             "strategy": "ddp", "bucket_mb": None}  # fmt: skip
    config = {"experiment": {"train": {"lr": 0.2}, "scale": {"nnodes": 1}}, "point": point}
    run_id = store.create_run(f"p{workers}", "scale", config, system={"backend": "gloo"},
                              study_id=study)  # fmt: skip
    summary = _summary(workers=workers, **figures) if status == "finished" else None
    store.finish_run(run_id, status, summary)
    return run_id


def test_stored_reads_each_metric_once(store: RunStore, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = store.create_run("r", "run", {})
    store.log_metrics(run_id, [("train/loss", 0, 1.0)])
    reads: list[tuple[int, str]] = []
    real = store.metrics
    monkeypatch.setattr(store, "metrics", lambda r, k: reads.append((r, k)) or real(r, k))
    view = _view(store, run_id)
    assert view.metric("train/loss") == [(0, 1.0)]
    assert view.metric("train/loss") == [(0, 1.0)]
    assert reads == [(run_id, "train/loss")]


def test_find_is_none_for_a_run_that_is_gone(store: RunStore) -> None:
    run_id = store.create_run("r", "run", {})
    stored = Stored(store)
    found = stored.find(run_id)
    assert found is not None and found.id == run_id
    assert stored.find(run_id + 1) is None


def test_a_training_run_reads_its_own_config_system_and_summary(store: RunStore) -> None:
    config = {"train": {"lr": 0.1, "schedule": {"kind": "cosine"}}}
    run_id = store.create_run("r", "run", config, system={"device": "cpu", "threads": 4})
    store.finish_run(run_id, summary={"device": "cuda:0", "threads": 2})
    view = _view(store, run_id)
    assert view.experiment == config and view.point == {}
    assert view.key("train.lr") == 0.1 and view.key("train.schedule.kind") == "cosine"
    assert view.key("train.nothing") is None
    assert view.device() == "cuda:0"  # what the run trained on, before the system's device
    assert view.threads() == 2
    assert view.point_summary is None and view.workers_per_node() == 1
    assert view.scale_base() is None  # no study


def test_without_a_summary_the_system_record_answers(store: RunStore) -> None:
    run_id = store.create_run("r", "run", {}, system={"device": "cpu", "threads": 4})
    view = _view(store, run_id)
    assert view.device() == "cpu" and view.threads() == 4


def test_a_scale_point_reads_its_experiment_backend_and_threads_per_worker(
    store: RunStore,
) -> None:
    run_id = _point(store, None, 4, threads_per_worker=3, nodes=2)
    view = _view(store, run_id)
    assert view.experiment == {"train": {"lr": 0.2}, "scale": {"nnodes": 1}}
    assert view.key("train.lr") == 0.2 and view.point["workers"] == 4
    assert view.device() == "cpu"  # gloo's workers
    assert view.threads() == 3
    assert view.workers_per_node() == 2  # 4 workers over the summary's 2 nodes


def test_the_scale_base_is_the_fewest_workers_finished_in_the_same_series(
    store: RunStore,
) -> None:
    study = store.create_study("s", "scale")
    _point(store, study, 1, status="failed")  # not finished: no base
    two = _point(store, study, 2)
    _point(store, study, 1, batch=64)  # another series
    four = _point(store, study, 4)
    view = _view(store, four)
    base = view.scale_base()
    assert base is not None and base[0] == two and base[1].workers == 2
    other = _view(store, _point(store, study, 8, mode="strong"))
    strong_base = other.scale_base()
    assert strong_base is not None and strong_base[1].workers == 8  # alone in its series


def test_an_issue_carries_no_figures_unless_given() -> None:
    issue = Issue("warning", "evidence", "fix")
    assert issue.figures == {} and Issue("info", "e", "f", {"x": 1}).figures == {"x": 1}
