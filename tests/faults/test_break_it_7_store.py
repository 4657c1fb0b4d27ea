"""What the seventh break-it round (issue 41, half B) found in what a run stores, reproduced
first: a profile window longer than the run stored as a failed run (E05), commands that only
read creating a store at a mistyped --db (R04), and a checkpoint recorded before it was
written (R14)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import pytest

from dlperf.config import Experiment
from dlperf.engine import checkpoint
from dlperf.engine.build import prepare_run
from dlperf.engine.train_loop import Progress
from dlperf.progress import NullReporter
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

# run.warmup_steps 2 and the default window (1 + 3 steps): steps 3..6 recorded, 7 timed.
WINDOW = "run.profile records steps 3..6 and throughput is timed after them"


# --- E05: a profile window longer than the run, caught inside the recorded run ------------


def test_a_profile_window_longer_than_the_run_stores_nothing(
    cli: Cli, tiny_exp: Callable[..., Path], store: RunStore
) -> None:
    """200 images at batch 32 are 6 steps: the line was right, but the run was stored
    `failed` (the check ran inside the recorded run)."""
    exp = tiny_exp(epochs=1)
    result = cli("run", str(exp), "--profile", "--set", "data.limit=200")
    one_line(result, 2, WINDOW, "but this run trains 6 steps")
    assert store.list_runs() == []


def test_a_sweep_refuses_a_point_whose_profile_window_does_not_fit_up_front(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path, store: RunStore
) -> None:
    """The sweep's up-front check (build.first_refused) agrees with the run's: point 1 was
    started and stored failed."""
    tiny_exp(epochs=1)
    (tmp_path / "sw.toml").write_text(
        'base = "tiny.toml"\n[set]\n"data.limit" = 200\n"run.profile.enabled" = true\n'
        '[grid]\n"train.batch_size" = [32, 64]\n'
    )
    result = cli("sweep", "sw.toml")
    one_line(result, 2, "sw.toml point 1 (train.batch_size=32): " + WINDOW)
    assert store.list_runs() == []


def test_a_resume_whose_profile_window_no_longer_fits_leaves_the_run_killed(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    """A run of 2 epochs of 6 steps with a profile window (it fits 12 steps), killed after
    its first epoch: the 6 steps left cannot hold the window. Refused before the run is
    taken over, as a new run is: it was marked `failed` by the resume."""
    exp = Experiment.model_validate(
        {
            "model": {"name": "smallcnn"},
            "data": {"name": "digits", "limit": 200},
            "train": {"epochs": 2, "batch_size": 32, "lr": 0.05},
            "run": {
                "threads": 1,
                "warmup_steps": 2,
                "profile": {"enabled": True},
                "out_dir": str(tmp_path / "runs"),
            },
        }
    )
    weights = prepare_run(exp, store, NullReporter()).model.state_dict()
    digest = exp.config_hash()
    run_id = store.create_run("r", "run", exp.to_dict(), digest)
    where = store.artifact_dir(exp.run.out_dir) / f"run-{run_id}" / "checkpoint.pt"
    slot = checkpoint.Slot(where, checkpoint.Owner(store.id, run_id, digest))
    checkpoint.save(slot, {"model": weights, "progress": asdict(Progress(epoch=1, step=6))})
    store.add_artifact(run_id, "checkpoint", where)
    store.log_metrics(run_id, [("epoch/train_loss", 1, 2.0)])  # stored before its checkpoint
    store.finish_run(run_id, "killed", error="interrupted")
    result = cli("run", "--resume", str(run_id))
    one_line(result, 2, WINDOW, "but this run trains 6 steps")
    assert store.get_run(run_id).status == "killed"


# --- R04: commands that only read, at a mistyped --db ---------------------------------------

NO_RUN_1 = "typo.db does not exist (give the store with --db or DLPERF_DB"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["runs", "list"], None),  # what the others now do: an empty store, no file
        (["runs", "show", "1"], NO_RUN_1),
        (["doctor"], NO_RUN_1),  # since round 66, as the readers of a run say it
        (["report", "--out", "site"], NO_RUN_1),
        (["runs", "plot", "1", "--out", "p.png"], NO_RUN_1),
        (["runs", "trace", "1"], NO_RUN_1),
        (["runs", "export", "1", "--to", "tensorboard", "--out", "tb"], NO_RUN_1),
        (["export", "1", "--out", "x.onnx"], NO_RUN_1),
        (["converge", "fit", "1"], NO_RUN_1),
        (["converge", "predict", "1", "--target", "0.9"], NO_RUN_1),
        (["converge", "regress", "1", "2", "--features", "depth"], NO_RUN_1),
        (["converge", "speed", "fit", "1", "--model", "pollux"], None),
    ],
)
def test_a_command_that_only_reads_creates_no_store_at_a_mistyped_path(
    cli: Cli, tmp_path: Path, args: list[str], said: str | None
) -> None:
    """`doctor`, `report`, `runs plot|trace|export`, `export` and `converge` wrote a store
    with dlperf's schema at typo.db; `runs list` and `runs show` read it as empty."""
    result = cli("--db", str(tmp_path / "typo.db"), *args)
    if said is None:
        assert result.code in (0, 2), result.err
    else:
        one_line(result, 2, said)
    assert not list(tmp_path.glob("typo.db*"))


# --- R14: a checkpoint recorded before it was written --------------------------------------


def test_a_run_that_diverges_before_its_first_checkpoint_records_none(
    cli: Cli, tiny_exp: Callable[..., Path], store: RunStore
) -> None:
    """Diverged at step 3, before epoch 1 ended: `runs show` listed a checkpoint that does not
    exist (exists = no), and `runs export` said it "no longer exists"."""
    exp = tiny_exp(epochs=1)
    result = cli("run", str(exp), "--set", "train.lr=1e10", "--set", "data.limit=200")
    assert result.code == 1, result.err
    [run] = store.list_runs()
    assert run.status == "failed" and "loss became nan at step 3" in (run.error or "")
    assert store.artifacts(run.id) == []
    one_line(cli("run", "--resume", str(run.id)), 2, f"run {run.id} has no checkpoint to resume")


def test_a_run_that_checkpoints_records_it_once(
    cli: Cli, tiny_exp: Callable[..., Path], store: RunStore
) -> None:
    """Recorded at the first save, not at each epoch's."""
    exp = tiny_exp(epochs=2)
    result = cli("run", str(exp), "--set", "data.limit=64")
    assert result.code == 0, result.err
    [run] = store.list_runs()
    [artifact] = store.artifacts(run.id)
    assert artifact["kind"] == "checkpoint" and Path(artifact["path"]).is_file()


@pytest.mark.faults  # over 10 s under load: make test-faults
def test_the_mlflow_export_says_why_a_recorded_checkpoint_is_missing(
    cli: Cli, tmp_path: Path, store: RunStore, mlflow_uri: str
) -> None:
    """A dlperf before this round recorded a run's checkpoint as the run started. Of a run
    that ended no epoch it was never written; of a finished one it was written and is gone;
    of a killed one that ended an epoch the store cannot tell (the save may have failed)."""
    exp = Experiment.model_validate(
        {"model": {"name": "smallcnn"}, "data": {"name": "digits"}, "run": {"checkpoint": True}}
    )
    ends = {"failed": None, "finished": 1, "killed": 1}
    ids = {}
    for status, epoch in ends.items():
        run_id = store.create_run(status, "run", exp.to_dict(), exp.config_hash())
        if epoch is not None:
            store.log_metrics(run_id, [(checkpoint.EPOCH_ENDED, epoch, 0.5)])
        store.add_artifact(run_id, "checkpoint", tmp_path / f"run-{run_id}" / "checkpoint.pt")
        store.finish_run(run_id, status)
        ids[status] = run_id
    uri = mlflow_uri  # a copy of a made store: the messages, not MLflow's set-up, are the point
    result = cli("runs", "export", *map(str, ids.values()), "--to", "mlflow", "--uri", uri)
    assert result.code == 0, result.err
    said = {
        "failed": "was never written, skipped",
        "finished": "no longer exists, skipped",
        "killed": "is not there, skipped",
    }
    for status, run_id in ids.items():
        path = tmp_path / f"run-{run_id}" / "checkpoint.pt"
        assert f"run {run_id}: checkpoint {path} {said[status]}" in result.err
