"""The teacher: a finished stored run, and its batched scoring of the unlabelled images."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dlperf.config import Experiment, ModelConfig, stored_experiment
from dlperf.engine import checkpoint, pretrained
from dlperf.errors import UserError
from dlperf.experiment.run import model_file_kept
from dlperf.models import create_model
from dlperf.models.registry import without_automatic
from dlperf.store import RunStore
from dlperf.timing import Timer


@dataclass
class Teacher:
    run_id: int
    exp: Experiment
    shape: tuple[int, int, int]  # what its model takes
    mean: tuple[float, ...]  # the normalisation it trained with
    std: tuple[float, ...]
    classes: int
    test_accuracy: float | None
    # Its model file is the one it was trained from (the stored sha256): weights that do not
    # fit the network rebuilt from it come from a factory building another one on each call.
    same_file: bool = False
    # Its classes' names, in its outputs' order (none in an older dlperf's run): held to the
    # labelled data's, whose names its scores are taken for by position.
    class_names: tuple[str, ...] = ()


def stored(store: RunStore, run_id: int) -> Teacher:
    """Run `run_id` as a teacher: a finished training run with a checkpoint."""
    run = store.get_run(run_id)
    if run.kind != "run":
        raise UserError(f"teacher run {run_id} is a {run.kind} run, not a training run")
    if run.status != "finished":
        raise UserError(
            f"teacher run {run_id} did not finish (status {run.status})",
            f"resume it with `dlperf run --resume {run_id}` or give a finished run",
        )
    data = run.trained.data
    if not data:
        raise UserError(f"teacher run {run_id} recorded no data shape (an older dlperf's run)")
    checkpoint.run_checkpoint(
        store, run_id, "to score with", "train the teacher with run.checkpoint = true"
    )
    return Teacher(
        run_id,
        stored_experiment(run.config, f"run {run_id}"),
        tuple(data["shape"]),
        tuple(data["mean"]),
        tuple(data["std"]),
        data["classes"],
        run.trained.test_accuracy,
        model_file_kept(run),
        tuple(data.get("class_names") or ()),
    )


@dataclass
class Scores:
    scores: torch.Tensor  # images x classes, softmax (on the CPU)
    seconds: float  # the timed passes, one untimed warm-up batch before them
    images_per_s: float
    device: torch.device  # where the teacher ran


def score(
    teacher: Teacher, store: RunStore, images: torch.Tensor, device: torch.device, batch: int
) -> Scores:
    """The teacher's softmax scores of `images` (uint8), preprocessed as it was trained."""
    cfg = teacher.exp.model
    model = create_model(
        cfg.name,
        num_classes=teacher.classes,
        in_channels=teacher.shape[0],
        # As `dlperf run` built it (engine.build): what its state_dict leaves out (a random
        # non-persistent buffer) is the one it trained with, whatever its file seeds at import
        factory_seed=teacher.exp.run.seed,
        **without_automatic(cfg.kwargs),  # a run's own num_classes agreed with its data
    )
    weights = pretrained.resolve(ModelConfig(name=cfg.name, weights=f"run:{teacher.run_id}"), store)
    assert weights is not None
    checkpoint.fit_weights(
        model, weights.fetch(), teacher.run_id, cfg.name, same_file=teacher.same_file
    )
    # The model as it trained: a forward reading a non-persistent buffer training changed
    # (a count of steps) scored the pool with its starting value.
    checkpoint.restore_buffers(model, weights.buffers)
    model.to(device).eval()
    mean = torch.tensor(teacher.mean, device=device).view(-1, 1, 1)
    std = torch.tensor(teacher.std, device=device).view(-1, 1, 1)

    def forward(chunk: torch.Tensor) -> torch.Tensor:
        x = (chunk.to(device, non_blocking=True).float() / 255 - mean) / std
        return torch.softmax(model(x).float(), dim=1)

    chunks = torch.split(images, batch)
    with torch.inference_mode():
        forward(chunks[0])  # lazy initialisation and allocator warm-up, untimed
        timer = Timer(device)
        timer.start()
        out = [forward(chunk) for chunk in chunks]
        seconds = timer.stop()
    return Scores(torch.cat(out).cpu(), seconds, len(images) / seconds, device)
