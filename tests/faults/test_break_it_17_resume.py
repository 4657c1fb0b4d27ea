"""Break-it round 17, part F, cause B: resuming runs whose world changed.

B. `dlperf doctor` told a killed run whose checkpoint file is gone to `dlperf run --resume N`,
   which then failed "run N's checkpoint ... is missing". It now advises the resume only while
   the checkpoint is there, and otherwise says the run cannot be resumed and to run it again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from dlperf import doctor
from dlperf.config import Experiment
from dlperf.engine import checkpoint
from dlperf.engine.build import prepare_run
from dlperf.engine.train_loop import Progress
from dlperf.progress import NullReporter
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


def _killed_run(store: RunStore, tmp_path: Path, model: str, data: dict[str, Any]) -> int:
    """A 3-epoch run of `model` on `data` killed after its first epoch, its epoch-1 checkpoint
    written as `dlperf run` writes it."""
    exp = Experiment.model_validate(
        {
            "model": {"name": model},
            "data": data,
            "train": {"epochs": 3, "batch_size": 8, "lr": 0.05},
            "run": {"threads": 1, "warmup_steps": 1, "out_dir": str(tmp_path / "runs")},
        }
    )
    weights = prepare_run(exp, store, NullReporter()).model.state_dict()
    digest = exp.config_hash()
    run_id = store.create_run("r", "run", exp.to_dict(), digest)
    store.log_metrics(run_id, [("epoch/train_loss", 1, 2.0), ("train/loss", 3, 2.0)])
    where = store.artifact_dir(exp.run.out_dir) / f"run-{run_id}" / "checkpoint.pt"
    slot = checkpoint.Slot(where, checkpoint.Owner(store.id, run_id, digest))
    checkpoint.save(slot, {"model": weights, "progress": asdict(Progress(epoch=1, step=3))})
    store.add_artifact(run_id, "checkpoint", where)
    store.finish_run(run_id, "killed", error="interrupted")
    return run_id


def _unfinished_fix(store: RunStore, run_id: int) -> str:
    (finding,) = [f for f in doctor.examine(store, [run_id]) if f.rule == "unfinished"]
    return finding.fix


# B


def test_doctor_advises_a_resume_only_while_the_checkpoint_is_there(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    digits = {"name": "digits", "limit": 64}
    run_id = _killed_run(store, tmp_path, "smallcnn", digits)
    assert _unfinished_fix(store, run_id) == (
        f"continue it from its last checkpoint: dlperf run --resume {run_id}"
    )
    (path,) = [Path(a["path"]) for a in store.artifacts(run_id) if a["kind"] == "checkpoint"]
    path.unlink()
    assert _unfinished_fix(store, run_id) == (
        f"run it again: its checkpoint {path} is gone, so it cannot be resumed"
    )
    # What the advice no longer sends the user to.
    said = f"error: run {run_id}'s checkpoint {path} is missing"
    one_line(cli("run", "--resume", str(run_id)), 2, said)
    # A directory where the file was (the whole run directory moved, a path reused).
    path.mkdir()
    assert _unfinished_fix(store, run_id) == (
        f"run it again: its checkpoint {path} is not a regular file, so it cannot be resumed"
    )
