"""A run's life: check the inputs, record the run, train, and store how it ended.

Everything that can be wrong with the input (data set, model, batch size, device) is
checked before the run is recorded, so bad input leaves nothing in the store.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from dlperf import contention
from dlperf.config import Experiment, ModelConfig, build_experiment
from dlperf.data import ImageData, load_data
from dlperf.engine import checkpoint, pretrained
from dlperf.engine.checks import check_batch_fits, check_classes, check_classifier, dry_forward
from dlperf.engine.loop import Diverged, Row
from dlperf.engine.train import train
from dlperf.models import create_model, transfer
from dlperf.progress import NullReporter, Reporter
from dlperf.store import Recording, RunStore, writer_refusal
from dlperf.system import auto_threads, crowding, pick_device, set_threads, system_info


@dataclass
class StoreSink:
    """The training loop's metric sink for run `run_id` of `store`."""

    store: RunStore
    run_id: int

    def log_metrics(self, rows: list[Row]) -> None:
        self.store.log_metrics(self.run_id, rows)

    def add_artifact(self, kind: str, path: Path) -> None:
        self.store.add_artifact(self.run_id, kind, path)


@dataclass
class Prepared:
    """What a run trains, checked before it is recorded."""

    device: torch.device
    threads: int
    free_cores: float | None  # measured as it started, on a CPU or with run.threads "auto"
    crowded: str | None  # the warning when fewer cores are free than threads: said once the
    # run is checked and about to train, so that a mistake in it still reads as one line
    data: ImageData
    model: torch.nn.Module
    transfer: dict[str, Any] | None  # where the weights came from and what was adapted


def prepare_run(
    exp: Experiment, store: RunStore, reporter: Reporter, fresh: bool = True
) -> Prepared:
    """Device, data and model of `exp`; a `fresh` run starts from model.weights (a resumed
    one from its own checkpoint)."""
    device = pick_device(exp.run.device)
    want = exp.run.threads
    free = contention.free_cores() if device.type == "cpu" or want == "auto" else None
    threads = set_threads(auto_threads(free) if want == "auto" else want)
    crowded = crowding(threads, free) if device.type == "cpu" else None
    start = pretrained.resolve(exp.model, store)
    # Read (or downloaded) first: a download that fails is over before the data loads.
    weights = start.fetch() if start and fresh and exp.model.transfer != "scratch" else None
    data, warnings = load_run_data(exp, start)
    for warning in warnings:
        reporter.log(f"warning: {warning}")
    check_batch_fits(exp.train.batch_size, data)
    check_classes(data)
    model = build_model(exp, data, device)
    if start is None:
        return Prepared(device, threads, free, crowded, data, model, None)
    notes = start_weights(model, exp.model, start.source, weights)
    # What the weights expect of the images, for `dlperf doctor` to hold the data against.
    expects = {"image_size": start.image_size, "mean": start.mean, "std": start.std}
    origin: dict[str, Any] = {"weights": start.source, "mode": exp.model.transfer, "notes": notes}
    origin["expects"] = {k: list(v) if isinstance(v, tuple) else v for k, v in expects.items()}
    return Prepared(device, threads, free, crowded, data, model, origin | {"warnings": warnings})


def load_run_data(
    exp: Experiment, start: pretrained.Pretrained | None
) -> tuple[ImageData, list[str]]:
    """The experiment's data as its runs see it: at the resolution and with the statistics of
    its starting weights `start`, where the config does not set them; and warnings."""
    data = load_data(pretrained.data_config(exp.data, start))
    return data, pretrained.apply_statistics(data, exp.data, start)


def as_run(exp: Experiment, store: RunStore) -> tuple[Experiment, ImageData, list[str]]:
    """`exp` with the resolution and statistics its model.weights imply written into its data
    section where the config leaves them unset (so that runs derived from it see the same
    images without the weights: scale workers, which have no store to resolve run:ID with,
    and a distill study's students); its data, loaded once, and warnings."""
    start = pretrained.resolve(exp.model, store)
    data, warnings = load_run_data(exp, start)
    if start is None:
        return exp, data, warnings
    update: dict[str, object] = {}
    if exp.data.image_size is None and start.image_size is not None:
        update["image_size"] = data.shape[-1]
    for key in ("mean", "std"):
        if getattr(exp.data, key) is None and getattr(start, key) is not None:
            update[key] = list(getattr(data, key))
    if not update:
        return exp, data, warnings
    config = exp.to_dict()
    config["data"].update(update)
    return Experiment.model_validate(config), data, warnings


def start_weights(
    model: torch.nn.Module, cfg: ModelConfig, source: str, weights: pretrained.StateDict | None
) -> list[str]:
    """Load `weights` (if any) and freeze the backbone for feature extraction; notes on what
    was adapted."""
    keep = cfg.head == "keep"
    notes = transfer.load_weights(model, weights, source, keep) if weights is not None else []
    if cfg.transfer == "feature-extract":
        transfer.freeze_backbone(model)
        notes.append("backbone frozen: only the head trains")
    return notes


def build_model(exp: Experiment, data: ImageData, device: torch.device) -> torch.nn.Module:
    """The experiment's model, seeded, on `device`, sized for `data` and materialized."""
    torch.manual_seed(exp.run.seed)
    model = create_model(
        exp.model.name, num_classes=data.num_classes, in_channels=data.shape[0], **exp.model.kwargs
    )
    rejects = f"the model rejects {data.name} images of shape {data.shape}"
    name = f"'{exp.model.name}'"
    output = dry_forward(model.to(device), data.shape, rejects, device)
    check_classifier(model, output, data.num_classes, name)
    # What the training step sees: some models (torchvision's googlenet and inception_v3)
    # return more than their scores in training mode only.
    output = dry_forward(model, data.shape, rejects, device, training=True)
    check_classifier(model, output, data.num_classes, name, "in training mode")
    torch.manual_seed(exp.run.seed)  # the dry forward must not shift the training RNG stream
    return model


def run_experiment(
    exp: Experiment,
    store: RunStore,
    reporter: Reporter | None = None,
    study_id: int | None = None,
    keep_weights: bool = False,
) -> dict[str, Any]:
    """Train a new run of `exp`; returns its summary with `run_id` and `status`. With
    `keep_weights`, a run without run.checkpoint still saves its final weights as its
    checkpoint (what exporting it needs, not resuming it): a sweep's points, of which the
    sweep keeps its winner's."""
    reporter = reporter or NullReporter()
    prepared = prepare_run(exp, store, reporter)
    digest = exp.config_hash()
    final_only = keep_weights and not exp.run.checkpoint
    if exp.run.checkpoint or final_only:  # an unusable out_dir fails before the run is recorded
        store.artifact_dir(exp.run.out_dir).mkdir(parents=True, exist_ok=True)
    with store.new_run(
        name=exp.run.name or exp.model.name,
        kind="run",
        config=exp.to_dict(),
        config_hash=digest,
        system=system_info(prepared.device, prepared.threads) | {"free_cores": prepared.free_cores},
        study_id=study_id,
    ) as record:
        where = store.artifact_dir(exp.run.out_dir) / f"run-{record.id}" / "checkpoint.pt"
        ckpt = checkpoint.Slot(where, checkpoint.Owner(store.id, record.id, digest))
        if exp.run.checkpoint:
            store.add_artifact(record.id, "checkpoint", where)
        ran = _execute(exp, store, record, ckpt, None, prepared, reporter)
        if final_only and ran["status"] == "finished":  # saved after the clocks stopped
            checkpoint.save(ckpt, {"model": prepared.model.state_dict()})
            store.add_artifact(record.id, "checkpoint", where)
        return ran


def resume_run(run_id: int, store: RunStore, reporter: Reporter | None = None) -> dict[str, Any]:
    """Continue a stopped run from its last checkpoint, with its stored config."""
    reporter = reporter or NullReporter()
    stored = store.get_run(run_id)
    refusal = writer_refusal(stored)  # at once, before the data loads; again when taking over
    if refusal is not None:
        raise refusal
    exp = build_experiment(stored.config, f"run {run_id}")
    path = checkpoint.run_checkpoint(
        store, run_id, "to resume from", "it stopped before its first epoch ended; start it again"
    )
    # The stored hash, not exp's: the run keeps its identity even if the config's defaults
    # have changed since it started.
    owner = checkpoint.Owner(store.id, run_id, stored.config_hash)
    state = checkpoint.load(path, owner)
    prepared = prepare_run(exp, store, reporter, fresh=False)
    done = state["progress"]
    # One process writes a run: of two resuming it at once, the other stops here.
    store.take_over(run_id)
    with store.recording(run_id) as record:
        # A killed run may have logged steps past its last checkpoint: drop them, so the
        # resumed run's metrics continue without duplicates.
        store.delete_metrics_after(
            run_id,
            [("train/", done["step"])]
            + [(k, done["epoch"]) for k in ("epoch/", "val/", "phase/", "gpu/")],
        )
        ckpt = checkpoint.Slot(path, owner)
        return _execute(exp, store, record, ckpt, state, prepared, reporter)


def _execute(
    exp: Experiment,
    store: RunStore,
    record: Recording,
    ckpt: checkpoint.Slot,
    state: dict[str, Any] | None,
    prepared: Prepared,
    reporter: Reporter,
) -> dict[str, Any]:
    """Train inside `record`: a diverged loss fails the run softly (the result says so),
    anything else is left to `RunStore.recording` to mark."""
    p = prepared
    sink = StoreSink(store, record.id)
    try:
        crowded = [p.crowded] if p.crowded else []
        summary = train(
            exp, p.model, p.data, p.device, sink, ckpt, state, reporter, warnings=crowded
        )
    except Diverged as e:
        record.fail(str(e))
        return {"run_id": record.id, "status": "failed", "error": str(e)}
    # The data's resolution and statistics as trained: what a transfer from this run expects.
    data = {"shape": list(p.data.shape), "mean": list(p.data.mean), "std": list(p.data.std)}
    data["classes"] = p.data.num_classes
    summary = replace(
        summary, device=str(p.device), threads=p.threads, data=data, transfer=p.transfer
    )
    record.summary = summary.to_dict()
    if p.transfer is None:  # stored summaries of runs from scratch have never had the key
        del record.summary["transfer"]
    return {"run_id": record.id, "status": "finished", **record.summary}
