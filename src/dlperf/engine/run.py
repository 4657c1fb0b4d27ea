"""A run's life: check the inputs, record the run, train, and store how it ended.

Everything that can be wrong with the input (data set, model, batch size, device) is
checked before the run is recorded, so bad input leaves nothing in the store.
"""

from __future__ import annotations

from typing import Any

import torch

from dlperf.config import Experiment, build_experiment
from dlperf.data import ImageData, load_data
from dlperf.engine import checkpoint
from dlperf.engine.checks import check_batch_fits, dry_forward
from dlperf.engine.train import Diverged, train
from dlperf.errors import UserError
from dlperf.models import create_model
from dlperf.progress import NullReporter, Reporter
from dlperf.store import Recording, Store
from dlperf.system import pick_device, set_threads, system_info


def _prepare(exp: Experiment) -> tuple[torch.device, int, ImageData, torch.nn.Module]:
    device = pick_device(exp.run.device)
    threads = set_threads(exp.run.threads)
    data = load_data(exp.data)
    check_batch_fits(exp.train.batch_size, data)
    return device, threads, data, build_model(exp, data, device)


def build_model(exp: Experiment, data: ImageData, device: torch.device) -> torch.nn.Module:
    """The experiment's model, seeded, on `device`, sized for `data` and materialized."""
    torch.manual_seed(exp.run.seed)
    model = create_model(
        exp.model.name, num_classes=data.num_classes, in_channels=data.shape[0], **exp.model.kwargs
    )
    rejects = f"the model rejects {data.name} images of shape {data.shape}"
    dry_forward(model.to(device), data.shape, rejects, device)
    torch.manual_seed(exp.run.seed)  # the dry forward must not shift the training RNG stream
    return model


def run_experiment(
    exp: Experiment,
    store: Store,
    reporter: Reporter | None = None,
    study_id: int | None = None,
) -> dict[str, Any]:
    """Train a new run of `exp`; returns its summary with `run_id` and `status`."""
    reporter = reporter or NullReporter()
    device, threads, data, model = _prepare(exp)
    digest = exp.config_hash()
    if exp.run.checkpoint:  # an unusable out_dir fails before the run is recorded
        store.artifact_dir(exp.run.out_dir).mkdir(parents=True, exist_ok=True)
    with store.new_run(
        name=exp.run.name or exp.model.name,
        kind="run",
        config=exp.to_dict(),
        config_hash=digest,
        system=system_info(device, threads),
        study_id=study_id,
    ) as record:
        where = store.artifact_dir(exp.run.out_dir) / f"run-{record.id}" / "checkpoint.pt"
        ckpt = checkpoint.Slot(where, checkpoint.Owner(store.id, record.id, digest))
        if exp.run.checkpoint:
            store.add_artifact(record.id, "checkpoint", where)
        return _execute(exp, store, record, ckpt, None, device, threads, data, model, reporter)


def resume_run(run_id: int, store: Store, reporter: Reporter | None = None) -> dict[str, Any]:
    """Continue a stopped run from its last checkpoint, with its stored config."""
    reporter = reporter or NullReporter()
    stored = store.get_run(run_id)
    if stored["status"] == "finished":
        raise UserError(f"run {run_id} already finished", "start a new run instead")
    exp = build_experiment(stored["config"], f"run {run_id}")
    path = checkpoint.run_checkpoint(
        store, run_id, "to resume from", "it stopped before its first epoch ended; start it again"
    )
    # The stored hash, not exp's: the run keeps its identity even if the config's defaults
    # have changed since it started.
    owner = checkpoint.Owner(store.id, run_id, stored["config_hash"])
    state = checkpoint.load(path, owner)
    device, threads, data, model = _prepare(exp)
    done = state["progress"]
    # A killed run may have logged steps past its last checkpoint: drop them, so the
    # resumed run's metrics continue without duplicates.
    store.delete_metrics_after(
        run_id,
        [("train/", done["step"])] + [(k, done["epoch"]) for k in ("epoch/", "val/", "phase/")],
    )
    store.set_running(run_id)
    with store.recording(run_id) as record:
        ckpt = checkpoint.Slot(path, owner)
        return _execute(exp, store, record, ckpt, state, device, threads, data, model, reporter)


def _execute(
    exp: Experiment,
    store: Store,
    record: Recording,
    ckpt: checkpoint.Slot,
    state: dict[str, Any] | None,
    device: torch.device,
    threads: int,
    data: ImageData,
    model: torch.nn.Module,
    reporter: Reporter,
) -> dict[str, Any]:
    """Train inside `record`: a diverged loss fails the run softly (the result says so),
    anything else is left to `Store.recording` to mark."""
    try:
        summary = train(exp, model, data, device, store, record.id, ckpt, state, reporter)
    except Diverged as e:
        record.fail(str(e))
        return {"run_id": record.id, "status": "failed", "error": str(e)}
    record.summary = {**summary, "device": str(device), "threads": threads}
    return {"run_id": record.id, "status": "finished", **record.summary}
