"""Break-it round 17, part F, cause D: an image folder that lost images between a run's stop
and its resume trained on the changed data, exit 0, its stored steps (26) no longer 3 epochs
of its steps an epoch (8; epoch 1 had 10)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from dlperf.config import Experiment
from dlperf.engine import checkpoint
from dlperf.engine.build import prepare_run
from dlperf.engine.step import steps_per_epoch
from dlperf.engine.train_loop import Progress
from dlperf.progress import NullReporter
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


def test_a_training_split_that_changed_since_the_stop_is_refused(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    """The checkpoint trained 2 steps more in its epoch than the data gives now."""
    exp = Experiment.model_validate(
        {
            "model": {"name": "smallcnn"},
            "data": {"name": "digits", "limit": 128},
            "train": {"epochs": 3, "batch_size": 32, "lr": 0.05},
            "run": {"threads": 1, "warmup_steps": 1, "out_dir": str(tmp_path / "runs")},
        }
    )
    prepared = prepare_run(exp, store, NullReporter())
    now = steps_per_epoch(len(prepared.data.train), 32)
    digest = exp.config_hash()
    run_id = store.create_run("r", "run", exp.to_dict(), digest)
    store.log_metrics(run_id, [("epoch/train_loss", 1, 2.0)])
    where = store.artifact_dir(exp.run.out_dir) / f"run-{run_id}" / "checkpoint.pt"
    slot = checkpoint.Slot(where, checkpoint.Owner(store.id, run_id, digest))
    weights = prepared.model.state_dict()
    checkpoint.save(slot, {"model": weights, "progress": asdict(Progress(epoch=1, step=now + 2))})
    store.add_artifact(run_id, "checkpoint", where)
    store.finish_run(run_id, "killed", error="interrupted")
    result = cli("run", "--resume", str(run_id))
    one_line(
        result,
        2,
        f"run {run_id} trained {now + 2} steps in 1 epoch(s), but its training split now gives "
        f"{now} steps an epoch: the data changed since the run stopped",
    )
    assert store.get_run(run_id).status == "killed"
