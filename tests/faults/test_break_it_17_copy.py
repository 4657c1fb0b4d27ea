"""Break-it round 17, part F, cause A: a run resumed in a byte copy of its store (cp, or
`runs repair`, which keeps the store id) trains on and rewrites the checkpoint both stores
name; the original's resume then started past the epochs it stores, exit 0, `finished`, with
epochs 2 and 3 missing (21 metric rows of 63)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from dlperf.config import Experiment
from dlperf.engine import checkpoint
from dlperf.engine.build import prepare_run
from dlperf.engine.train_loop import Progress
from dlperf.progress import NullReporter
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


def _killed_run(store: RunStore, tmp_path: Path, checkpoint_epoch: int) -> int:
    """A 3-epoch run killed after its first epoch (epoch 1 stored), whose checkpoint says
    `checkpoint_epoch` epochs were trained."""
    exp = Experiment.model_validate(
        {
            "model": {"name": "smallcnn"},
            "data": {"name": "digits", "limit": 128},
            "train": {"epochs": 3, "batch_size": 32, "lr": 0.05},
            "run": {"threads": 1, "warmup_steps": 1, "out_dir": str(tmp_path / "runs")},
        }
    )
    weights = prepare_run(exp, store, NullReporter()).model.state_dict()
    digest = exp.config_hash()
    run_id = store.create_run("r", "run", exp.to_dict(), digest)
    store.log_metrics(run_id, [("epoch/train_loss", 1, 2.0), ("train/loss", 4, 2.0)])
    where = store.artifact_dir(exp.run.out_dir) / f"run-{run_id}" / "checkpoint.pt"
    slot = checkpoint.Slot(where, checkpoint.Owner(store.id, run_id, digest))
    progress = Progress(epoch=checkpoint_epoch, step=4 * checkpoint_epoch)
    checkpoint.save(slot, {"model": weights, "progress": asdict(progress)})
    store.add_artifact(run_id, "checkpoint", where)
    store.finish_run(run_id, "killed", error="interrupted")
    return run_id


def test_a_checkpoint_past_the_stored_epochs_is_refused(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    run_id = _killed_run(store, tmp_path, checkpoint_epoch=2)
    result = cli("run", "--resume", str(run_id))
    one_line(
        result,
        2,
        f"run {run_id}'s checkpoint holds 2 trained epochs, but this store has 1 of them: "
        "another store that names the same files (a copy made by cp or runs repair, or the "
        "original this store is a copy of) trained it on",
    )
    assert store.get_run(run_id).status == "killed"
    assert store.last_step(run_id, "epoch/train_loss") == 1
