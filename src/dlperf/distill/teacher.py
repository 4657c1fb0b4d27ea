"""The teacher: a finished stored run, and its batched scoring of the unlabelled images."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from dlperf.config import Experiment, ModelConfig, stored_experiment
from dlperf.engine import checkpoint, pretrained
from dlperf.engine.checks import check_float, check_rows, check_run_batch
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


def named(teacher: Teacher) -> str:
    """How a check names the teacher's model: "'smallcnn' of teacher run 3"."""
    return f"'{teacher.exp.model.name}' of teacher run {teacher.run_id}"


def scoring_batches(images: int, batch: int) -> dict[int, str]:
    """The batch sizes `score` gives the teacher for a pool of `images` at distill.score_batch
    `batch`, and what each is, in the words the checks say it in: `batch` (the whole pool
    where it is smaller) and the pool's last batch, which is kept whole."""
    if images <= batch:
        whole = f"the {images} unlabelled image{'s' * (images != 1)} in one batch"
        return {images: f"distill's scoring: {whole}"}
    sizes = {batch: "distill's scoring, distill.score_batch"}
    if images % batch:
        last = f"distill's scoring: the last batch of the {images} unlabelled images"
        sizes[images % batch] = last
    return sizes


def check_scoring_batches(
    model: nn.Module, what: str, shape: Sequence[int], images: int, batch: int
) -> None:
    """`model` (`what`, as `run` names a model: "'smallcnn'") must return one dense row of
    scores per image at the batch sizes it scores a pool of `images` at (`scoring_batches`),
    tried on the CPU before anything is stored, as `run` tries its batch sizes: no check had
    tried them, and scoring is after the teacher (and the baseline) trained."""
    for size, where in scoring_batches(images, batch).items():
        check_run_batch(model, size, shape, what, torch.device("cpu"), where)


def build(teacher: Teacher, store: RunStore, device: torch.device) -> nn.Module:
    """The teacher's model with its trained weights and buffers, in eval mode on `device`."""
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
    return model.to(device).eval()


def _checked(output: object, images: int, classes: int, what: str, where: str) -> torch.Tensor:
    """The teacher's (`what`'s) `output` for a batch of `images` (`where`), refused as a
    run's scores are unless it is one dense row of `classes` float scores per image: a
    sparse one failed in the softmax's traceback, and rows short of the images were taken as
    they came, each image's scores another's. Read for its kind and shape only (no value,
    which would wait for the device inside the timed passes)."""
    if not isinstance(output, torch.Tensor):
        raise UserError(
            f"model {what} for a batch of {images} images ({where}) returns a "
            f"{type(output).__name__}; expected one row of scores per image, [{images}, "
            f"{classes}]",
            "return the class scores alone",
        )
    check_rows(output, images, what, where, classes)
    check_float(output, f"model {what} for a batch of {images} images ({where}) returns")
    return output


def _check_finite(teacher: Teacher, scores: torch.Tensor, batch: int) -> None:
    """Refuse `scores` of which a row is NaN or inf (a NaN or inf score makes its softmax
    row NaN): the selection read a NaN row as class 0's best, silently."""
    bad = int((~torch.isfinite(scores).all(dim=1)).sum())
    if bad:
        raise UserError(
            f"teacher run {teacher.run_id} (model '{teacher.exp.model.name}') gives NaN or "
            f"inf scores for {bad} of the {len(scores)} unlabelled images: there is no "
            "selection to make from them",
            f"look at its forward for these images at distill.score_batch {batch}, or give "
            "--teacher another run",
        )


def score(
    teacher: Teacher, store: RunStore, images: torch.Tensor, device: torch.device, batch: int
) -> Scores:
    """The teacher's softmax scores of `images` (uint8), preprocessed as it was trained; each
    batch's output checked as a run's scores are, and every score finite."""
    model = build(teacher, store, device)
    mean = torch.tensor(teacher.mean, device=device).view(-1, 1, 1)
    std = torch.tensor(teacher.std, device=device).view(-1, 1, 1)
    sizes = scoring_batches(len(images), batch)
    what = named(teacher)

    def forward(chunk: torch.Tensor) -> torch.Tensor:
        x = (chunk.to(device, non_blocking=True).float() / 255 - mean) / std
        output = _checked(model(x), len(chunk), teacher.classes, what, sizes[len(chunk)])
        return torch.softmax(output.float(), dim=1)

    chunks = torch.split(images, batch)
    with torch.inference_mode():
        forward(chunks[0])  # lazy initialisation and allocator warm-up, untimed
        timer = Timer(device)
        timer.start()
        out = [forward(chunk) for chunk in chunks]
        seconds = timer.stop()
    scores = torch.cat(out).cpu()
    _check_finite(teacher, scores, batch)
    return Scores(scores, seconds, len(images) / seconds, device)
