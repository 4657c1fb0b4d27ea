"""dlperf.sweep.runner with a fake trainer: which study a sweep continues, which points it
skips, how it splits cores between jobs, records failures and keeps the winner's weights.
A point "trains" by storing a finished run whose test accuracy is its learning rate, so no
model runs here (tests/sweep/test_sweep.py runs real points, in-process and in workers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dlperf.errors import UserError
from dlperf.progress import NullReporter
from dlperf.store import RunStore
from dlperf.store.studies import studies_named
from dlperf.sweep import load_sweep, runner
from dlperf.sweep.runner import (
    finished_runs,
    keep_winner_weights,
    point_key,
    record_failure,
    run_sweep,
    sweep_study,
    threads_per_job,
    weights_hint,
)
from dlperf.sweep.spec import Sweep
from dlperf.sweep.summary import SweepPointResult, SweepRow

BASE = """
[model]
name = "smallcnn"
[data]
name = "digits"
[train]
epochs = 1
lr = 0.05
[run]
checkpoint = false
out_dir = "{out}"
"""


class Log(NullReporter):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, message: str) -> None:
        self.lines.append(message)


def sweep_of(root: Path, lrs: str = "[0.1, 0.3, 0.2]", extra: str = "", base: str = BASE) -> Sweep:
    (root / "base.toml").write_text(base.format(out=root / "runs") + extra)
    path = root / "lr.toml"
    path.write_text(f'base = "base.toml"\n[grid]\n"train.lr" = {lrs}\n')
    return load_sweep(path)


class FakeTrainer:
    """`runner.run_point` without a model: a finished run whose test accuracy is its lr,
    with a checkpoint file, or a failed run for an lr in `failing`; `lrs` in the order
    trained."""

    def __init__(self) -> None:
        self.lrs: list[float] = []
        self.failing: set[float] = set()

    def __call__(
        self, exp: Any, store: RunStore, study_id: int, since: int, reporter: Any
    ) -> SweepPointResult:
        lr = exp.train.lr
        self.lrs.append(lr)
        if lr in self.failing:
            return record_failure(store, exp, study_id, since, "Diverged: loss is nan")
        run = store.create_run(
            exp.run.name, "run", exp.to_dict(), exp.config_hash(), None, study_id
        )
        weights = Path(exp.run.out_dir) / f"w{run}.pt"
        weights.parent.mkdir(parents=True, exist_ok=True)
        weights.write_text("weights")
        store.add_artifact(run, "checkpoint", weights)
        summary = {"test_accuracy": lr}
        store.finish_run(run, "finished", summary)
        return SweepPointResult.of_run(run, "finished", summary)


@pytest.fixture
def trainer(monkeypatch: pytest.MonkeyPatch) -> FakeTrainer:
    fake = FakeTrainer()
    monkeypatch.setattr(runner, "run_point", fake)
    return fake


# --- identity of a point, cores per job -----------------------------------------------------


def test_a_point_key_leaves_out_the_threads_only_when_the_sweep_sets_them_not() -> None:
    one = {"model": {"name": "smallcnn"}, "data": {"name": "digits"}, "run": {"threads": 1}}
    two = {**one, "run": {"threads": 2}}
    assert point_key(one, free_threads=True) == point_key(two, free_threads=True)
    assert point_key(one, free_threads=False) != point_key(two, free_threads=False)
    assert one["run"] == {"threads": 1}  # the stored config is not changed
    assert point_key({"model": {"name": "smallcnn"}, "nonsense": 1}, True) is None


def test_jobs_split_the_cores_and_never_oversubscribe_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "usable_cores", lambda: 4)
    sweep = sweep_of(tmp_path)
    assert threads_per_job(sweep, 1, 3) is None  # in-process: the config's own
    assert threads_per_job(sweep, 2, 3) == 2
    assert threads_per_job(sweep, 3, 3) == 1
    assert threads_per_job(sweep, 4, 1) == 4  # one point left: it gets every core
    assert threads_per_job(sweep, 2, 0) == 4
    for jobs, message in ((0, "at least 1"), (5, "more than the 4 usable cores")):
        with pytest.raises(UserError, match=message):
            threads_per_job(sweep, jobs, 3)
    threads = sweep_of(tmp_path, extra="threads = 2\n")
    assert threads.threads_set
    assert threads_per_job(threads, 2, 3) is None  # 2 x 2 fit: the sweep's own
    with pytest.raises(UserError, match=r"--jobs 3 x run.threads 2 is more than the 4"):
        threads_per_job(threads, 3, 3)


# --- running, resuming ----------------------------------------------------------------------


def test_a_sweep_runs_its_points_ranks_them_and_a_rerun_skips_them(
    tmp_path: Path, store: RunStore, trainer: FakeTrainer
) -> None:
    sweep = sweep_of(tmp_path)
    log = Log()
    first = run_sweep(sweep, store, reporter=log)
    assert trainer.lrs == [0.1, 0.3, 0.2]
    assert [row.test_accuracy for row in first.points] == [0.1, 0.3, 0.2]  # the sweep's order
    assert first.winner == first.points[1].run_id
    assert first.axis_winners["train.lr"]["winner"] == 0.3
    assert log.lines[0] == "sweep 'lr', study 1: 3 points, 0 finished before, 3 to run"
    assert "point 2/3 finished: run 2, test accuracy 0.3000" in log.lines
    # only the winner keeps its weights (run.checkpoint = false)
    kept = [r.id for r in store.list_runs() if Path(store.artifacts(r.id)[0]["path"]).exists()]
    assert kept == [first.winner]
    again = run_sweep(sweep, store, reporter=log)
    assert trainer.lrs == [0.1, 0.3, 0.2]  # nothing trained again
    assert again.study_id == first.study_id
    assert [(r.run_id, r.skipped) for r in again.points] == [(r.run_id, True) for r in first.points]


def test_a_failed_point_goes_on_or_stops_the_sweep(
    tmp_path: Path, store: RunStore, trainer: FakeTrainer
) -> None:
    trainer.failing.add(0.3)
    sweep = sweep_of(tmp_path)
    went_on = run_sweep(sweep, store, on_failure="continue")
    assert [r.status for r in went_on.points] == ["finished", "failed", "finished"]
    assert store.get_run(went_on.points[1].run_id).error == "Diverged: loss is nan"
    trainer.lrs.clear()
    stopped = run_sweep(sweep, store, on_failure="stop", new=True)
    assert trainer.lrs == [0.1, 0.3]  # stopped at the failure
    assert [r.status for r in stopped.points] == ["finished", "failed"]
    with pytest.raises(UserError, match="--on-failure 'later'"):
        run_sweep(sweep, store, on_failure="later")


def test_a_sweep_continues_the_newest_study_of_its_own_points(
    tmp_path: Path, store: RunStore, trainer: FakeTrainer
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = run_sweep(sweep_of(tmp_path / "a"), store)
    other = sweep_of(tmp_path / "b", "[0.5, 0.6]")  # same name, other points
    log = Log()
    assert (
        sweep_study(
            store,
            other,
            [point_key(p.exp.to_dict(), True) for p in other.points],
            True,
            None,
            False,
            log,
        )
        is None
    )
    assert "its points differ from those of study 1" in log.lines[0]
    second = run_sweep(other, store)
    assert second.study_id != first.study_id
    # the first sweep, rerun, passes over the newer study that ran other points
    mine = sweep_of(tmp_path / "a")
    keys = [point_key(p.exp.to_dict(), True) for p in mine.points]
    log = Log()
    assert sweep_study(store, mine, keys, True, None, False, log) == first.study_id
    assert log.lines == [
        f"sweep 'lr': resuming study {first.study_id}, the newest whose runs are all points "
        f"of this sweep (study {second.study_id} ran other points)"
    ]
    assert sweep_study(store, mine, keys, True, None, True, log) is None  # --new
    assert sweep_study(store, mine, keys, True, second.study_id, False, log) == second.study_id


def test_finished_runs_are_the_newest_finished_of_each_point(
    tmp_path: Path, store: RunStore
) -> None:
    sweep = sweep_of(tmp_path, "[0.1, 0.2]")
    study = store.create_study("lr", "sweep")
    ids = {}
    for point, status in zip(
        sweep.points * 2, ["finished", "finished", "failed", "finished"], strict=True
    ):
        exp = point.exp
        run = store.create_run("p", "run", exp.to_dict(), exp.config_hash(), None, study)
        store.finish_run(run, status)
        ids.setdefault(exp.train.lr, []).append(run)
    found = finished_runs(store, study, free_threads=True)
    by_lr = {run.config["train"]["lr"]: run.id for run in found.values()}
    assert by_lr == {0.1: ids[0.1][0], 0.2: ids[0.2][1]}  # 0.1's newer run failed
    assert finished_runs(store, None, True) == {}


# --- failures, weights ----------------------------------------------------------------------


def test_a_point_the_checks_before_a_run_refuse_refuses_the_sweep_storing_nothing(
    tmp_path: Path, store: RunStore, trainer: FakeTrainer
) -> None:
    # Points 2 and 4 (16 training images) do not fit a batch of 64; 1 and 3 share one load of
    # the 256 images, checked before them: the first refused in the sweep's order is named.
    (tmp_path / "base.toml").write_text(BASE.format(out=tmp_path / "runs") + "threads = 1\n")
    path = tmp_path / "limit.toml"
    path.write_text(
        'base = "base.toml"\n[grid]\n"train.lr" = [0.1, 0.2]\n"data.limit" = [256, 16]\n'
    )
    with pytest.raises(UserError) as refused:
        run_sweep(load_sweep(path), store)
    assert str(refused.value) == (
        f"{path} point 2 (train.lr=0.1 data.limit=16): train.batch_size 64 is larger than the "
        "16 training images of digits (use train.batch_size <= 16)"
    )
    assert trainer.lrs == [] and store.list_runs() == []
    assert studies_named(store, "limit", "sweep") == []  # no study made either


def test_a_failure_marks_the_point_s_own_run_or_records_one(
    tmp_path: Path, store: RunStore
) -> None:
    exp = sweep_of(tmp_path).points[0].exp
    study = store.create_study("lr", "sweep")
    older = store.create_run("old", "run", exp.to_dict(), exp.config_hash(), None, study)
    store.finish_run(older, "finished")
    made = record_failure(store, exp, study, since=older, error="no batch fits")
    assert made.run_id != older and (made.status, made.error) == ("failed", "no batch fits")
    stored = store.get_run(made.run_id)
    assert (stored.status, stored.study_id, stored.name) == ("failed", study, exp.run.name)
    assert store.get_run(older).status == "finished"  # older than the sweep: not its run
    marked = record_failure(store, exp, study, since=older, error="again")
    assert marked.run_id == made.run_id  # its own run, already ended: left as it was
    assert store.get_run(made.run_id).error == "no batch fits"
    running = store.create_run("p", "run", exp.to_dict(), exp.config_hash(), None, study)
    assert record_failure(store, exp, study, since=made.run_id, error="boom").run_id == running
    assert (store.get_run(running).status, store.get_run(running).error) == ("failed", "boom")


def test_run_point_records_what_training_raised(
    tmp_path: Path, store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dlperf.experiment.run

    exp = sweep_of(tmp_path).points[0].exp
    for raised, error in (
        (UserError("bad batch"), "bad batch"),
        (RuntimeError("oom"), "RuntimeError: oom"),
    ):
        study = store.create_study("lr", "sweep")  # of its own: a failed run is not marked again

        def boom(*args: Any, raised: Exception = raised, **kwargs: Any) -> dict[str, Any]:
            raise raised

        monkeypatch.setattr(dlperf.experiment.run, "run_experiment", boom)
        result = runner.run_point(exp, store, study, 0, NullReporter())
        assert (result.status, result.error) == ("failed", error)
        assert (store.get_run(result.run_id).status, store.get_run(result.run_id).error) == (
            "failed",
            error,
        )


def row(run_id: int) -> SweepRow:
    return SweepRow.of(SweepPointResult(run_id, "finished"), {})


def test_the_winner_keeps_its_weights_and_runs_that_keep_theirs_keep_them(
    tmp_path: Path, store: RunStore
) -> None:
    files = []
    for checkpoint in (False, False, True):
        run = store.create_run("p", "run", {"run": {"checkpoint": checkpoint}})
        files.append(tmp_path / f"{run}.pt")
        files[-1].write_text("w")
        store.add_artifact(run, "checkpoint", files[-1])
        store.add_artifact(run, "trace", files[-1].with_suffix(".json"))
    log = Log()
    keep_winner_weights(store, [row(1), row(2), row(3)], None, log)
    assert all(f.exists() for f in files) and log.lines == []  # no winner: nothing goes
    keep_winner_weights(store, [row(1), row(2), row(3)], 2, log)
    assert [f.exists() for f in files] == [False, True, True]
    assert log.lines == [
        "kept the weights of the winner, run 2 (`dlperf export 2`); deleted those of run 1 "
        "(run.checkpoint = false)"
    ]


def test_the_weights_hint_names_the_run_that_kept_them(tmp_path: Path, store: RunStore) -> None:
    sweep_study_id = store.create_study("lr", "sweep")
    other_study = store.create_study("x", "distill")
    config = {"run": {"checkpoint": False}}
    runs = [store.create_run("p", "run", config, None, None, sweep_study_id) for _ in range(2)]
    records = [store.get_run(r) for r in runs]
    assert "has no point's weights; sweep again with --new" in str(weights_hint(store, records[0]))
    kept = tmp_path / "w.pt"
    kept.write_text("w")
    store.add_artifact(runs[1], "checkpoint", kept)
    assert f"`dlperf export {runs[1]}`" in str(weights_hint(store, records[0]))
    alone = store.get_run(store.create_run("p", "run", config))
    elsewhere = store.get_run(store.create_run("p", "run", config, None, None, other_study))
    keeps = store.get_run(
        store.create_run("p", "run", {"run": {"checkpoint": True}}, None, None, sweep_study_id)
    )
    assert [weights_hint(store, r) for r in (alone, elsewhere, keeps)] == [None, None, None]
