"""Break-it round 57, fixer G10: points trained from `run:` weights.

T1's C1 (sweep). A sweep whose `model.weights` is "run:last:NAME" reused its points after a
new run of that name had finished ("1 finished before, 0 to run"): only a weights FILE's bytes
were recorded, a `run:` value was hashed as its text, so the points trained from the old run's
weights passed for points of the new one. Now a run trained from `run:` weights records the
run they resolved to and its checkpoint's sha256 (`weights_run`, `weights_run_checkpoint_sha256`
in its system), and a sweep point or a distill stage whose weights now resolve to another run,
or to other checkpoint bytes, trains again: "its model.weights run (run 1 then, run 3 now)
changed since they trained". Runs stored before (nothing recorded) are taken as they were.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from dlperf.config.experiment import WEIGHTS_RUN, WEIGHTS_RUN_DIGEST, changed_source
from dlperf.config.loading import load_experiment
from dlperf.experiment.run import run_experiment
from dlperf.store import RunStore
from dlperf.sweep import load_sweep, run_sweep
from tests.faults.test_break_it_29_weights import experiment
from tests.sweep.test_runner import Log


def _pretrain(store: RunStore, exp: Path) -> int:
    pre = load_experiment(exp, ["run.name=pre", "run.checkpoint=true"])
    return run_experiment(pre, store).run_id


def test_c1_a_sweep_point_trained_from_an_older_run_last_trains_again(
    store: RunStore, tmp_path: Path
) -> None:
    exp = experiment(tmp_path)
    first = _pretrain(store, exp)
    path = tmp_path / "sw.toml"
    path.write_text(
        f'base = "{exp}"\nname = "w"\n[grid]\n"train.lr" = [0.05]\n'
        '[set]\n"model.weights" = "run:last:pre"\n'
    )

    def swept() -> list[str]:
        log = Log()
        assert run_sweep(load_sweep(path), store, reporter=log).points[0].status == "finished"
        return log.lines

    assert "sweep 'w', study 1: 1 points, 0 finished before, 1 to run" in swept()
    point = store.list_runs(study_id=1)[0]
    assert point.system[WEIGHTS_RUN] == first
    assert len(point.system[WEIGHTS_RUN_DIGEST]) == 64
    assert "sweep 'w', study 1: 1 points, 1 finished before, 0 to run" in swept()  # same run
    second = _pretrain(store, exp)
    said = swept()
    assert said[:2] == [
        f"sweep 'w': its points differ from those of study 1 (its model.weights run (run "
        f"{first} then, run {second} now) changed since they trained): starting a new study "
        "(--resume ID joins one anyway)",
        "sweep 'w', study 2: 1 points, 0 finished before, 1 to run",
    ]
    assert store.list_runs(study_id=2)[0].system[WEIGHTS_RUN] == second


def test_c1_a_run_trained_from_a_checkpoint_rewritten_since_is_changed(
    store: RunStore, tmp_path: Path
) -> None:
    exp = experiment(tmp_path)
    pre = _pretrain(store, exp)
    run = run_experiment(load_experiment(exp, [f"model.weights=run:{pre}"]), store).run_id
    stored = store.get_run(run)
    assert changed_source(stored.config, stored.system, store) is None
    assert changed_source(stored.config, {}, store) is None  # stored before: taken as it was
    checkpoint = next(Path(a["path"]) for a in store.artifacts(pre) if a["kind"] == "checkpoint")
    saved = torch.load(checkpoint, weights_only=False)
    saved["model"] = {k: v + 1 for k, v in saved["model"].items()}
    torch.save(saved, checkpoint)
    assert changed_source(stored.config, stored.system, store) == (
        f"its model.weights run's checkpoint (run {pre}'s)"
    )


def test_a_run_records_the_run_its_weights_were_read_from(
    store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A newer run of the name finishing between the load of `run:last:NAME` weights and the
    run's record: the record names the run the weights were read from (resolved once)."""
    import dlperf.experiment.run as running

    exp = experiment(tmp_path)
    first = _pretrain(store, exp)
    real, newer = running.prepare_run, []

    def prepare_then_finish_a_newer(*args: Any, **kwargs: Any) -> Any:
        prepared = real(*args, **kwargs)
        if not newer:
            newer.append(0)
            newer[0] = _pretrain(store, exp)  # prepares by this very function: once only
        return prepared

    monkeypatch.setattr(running, "prepare_run", prepare_then_finish_a_newer)
    run = run_experiment(load_experiment(exp, ["model.weights=run:last:pre"]), store).run_id
    assert newer[0] > first
    assert store.get_run(run).system[WEIGHTS_RUN] == first


def test_a_sweep_lists_the_store_once_to_check_its_points_run_weights(
    store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rerun of a sweep of points trained from `run:last:NAME` weights checks each stored
    point against the run the name resolves to now: one listing of the store's runs for all
    of them (`ListedOnce`), not one per point."""
    exp = experiment(tmp_path)
    _pretrain(store, exp)
    path = tmp_path / "sw.toml"
    path.write_text(
        f'base = "{exp}"\nname = "w"\n[grid]\n"train.lr" = [0.05, 0.04, 0.03, 0.02]\n'
        '[set]\n"model.weights" = "run:last:pre"\n"train.epochs" = 1\n'
    )
    run_sweep(load_sweep(path), store, reporter=Log())
    listings: list[str | None] = []
    real = store.list_runs

    def counted(*args: Any, **kwargs: Any) -> Any:
        listings.append(kwargs.get("kind"))
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "list_runs", counted)
    log = Log()
    run_sweep(load_sweep(path), store, reporter=log)
    assert "sweep 'w', study 1: 4 points, 4 finished before, 0 to run" in log.lines
    # one per pass over the study (its choice, its finished points before and after the
    # points' run), not one per point in each pass
    assert listings.count("run") == 3
