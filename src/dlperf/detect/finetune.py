"""Fine-tune a torchvision SSD on a VOC-layout data set and measure AP@0.5 before and after.

Training is torchvision's detection recipe reduced to what a CPU can afford: in train mode
`model(images, targets)` returns the SSD loss terms (box regression + classification with
hard-negative mining), summed and minimised by the engine's training step, built by
`dlperf.engine.step.prepare` as for every trainer from the experiment's [train] and [run]
sections, whose defaults for detection are its preset (dlperf.config.detect.PRESET): AdamW
(SGD as in torchvision's SSDlite reference is train.optimizer = "sgd") under a cosine
schedule. A horizontal flip is the only augmentation. Without weights the detector
runs at about its images' own side (`default_size`): 96 px for the make-shapes set, which
enlarged to SSDlite's 320 would cost (320 / 96)^2, about 11 times the arithmetic per step,
and show it no more detail. `finetune_recorded` is the whole `dlperf detect finetune`:
data, detector, AP before and after, the weights and the run in the store, its losses
stored as the loop logs them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from dlperf.config import DetectConfig, DetectJob, RunConfig, TrainConfig
from dlperf.detect import ssd, voc
from dlperf.detect.ssd import Detector
from dlperf.detect.voc import VocDataset, evaluate
from dlperf.engine.loop import Diverged, EpochClock, Progress, Row, fit
from dlperf.engine.step import prepare, steps_per_epoch
from dlperf.engine.timers import PhaseTimer
from dlperf.errors import UserError
from dlperf.experiment.sink import failed_softly
from dlperf.parsing import one_line
from dlperf.progress import NullReporter, Reporter
from dlperf.records import RunResult
from dlperf.store.deleting import telling_deleted
from dlperf.system import pick_device, set_threads, system_info

if TYPE_CHECKING:
    from dlperf.store import Recording, RunStore

Target = dict[str, torch.Tensor]  # an image's boxes and labels


class FinetuneDiverged(UserError):
    """A fine-tuning whose loss diverged: its run is stored failed with the training loop's
    line (dlperf.engine.loop.Diverged, its advice from dlperf.engine.divergence), as `dlperf
    run` stores one, and the command says that line, exit 1 as for any diverged run."""

    exit_code = 1


@dataclass
class TrainResult:
    steps: int
    losses: list[float] = field(default_factory=list)  # summed loss per step
    train_s: float = 0.0
    images_per_s: float = 0.0


def _batches(order: list[int], batch: int) -> Iterator[list[int]]:
    for start in range(0, len(order), batch):
        yield order[start : start + batch]


def train_batches(order: list[int], batch: int) -> Iterator[list[int]]:
    """An epoch's training steps over `order`, `batch` images each with the last partial one,
    except that a last step of one image joins the step before it (`batch` + 1 images): batch
    norm in training mode cannot normalise one value per channel (SSDlite's 1x1 feature map at
    96 px), and every image is still trained on. `train_steps` counts them."""
    starts = list(range(0, len(order), batch))
    if batch > 1 and len(starts) > 1 and len(order) - starts[-1] == 1:
        starts.pop()
    for start, end in zip(starts, [*starts[1:], len(order)], strict=True):
        yield order[start:end]


def train_steps(samples: int, batch: int) -> int:
    """The steps of `train_batches` over `samples` images, as the schedule counts an epoch."""
    steps = steps_per_epoch(samples, batch, partial=True)
    return steps - 1 if batch > 1 and steps > 1 and samples % batch == 1 else steps


def _trains_on_one_image(det: Detector) -> bool:
    """Whether `det` can take a training step on a single image: not where it has batch norm
    and a feature map of 1x1 at its size, one value per channel, which batch norm refuses.
    Found with the backbone in eval mode (its running statistics untouched)."""
    model = det.model
    if not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        return True
    backbone, was_training = model.backbone, model.backbone.training
    device = next(model.parameters()).device
    backbone.eval()
    try:
        with torch.no_grad():
            features = backbone(torch.zeros(1, 3, det.size, det.size, device=device))
    finally:
        backbone.train(was_training)
    maps = features.values() if isinstance(features, dict) else [features]
    return all(f.shape[-1] * f.shape[-2] > 1 for f in maps)


def check_step_of_one(det: Detector, split: str, images: int, batch: int) -> None:
    """Refuse, before the run is recorded, a fine-tuning whose every step holds one image
    (a `split` of one image, or train.batch_size 1) where `det` cannot train on one."""
    if min(images, batch) > 1 or _trains_on_one_image(det):
        return
    why = f"{det.name}'s batch norm cannot train at {det.size} px on one image a step"
    if images == 1:
        raise UserError(
            f"the {split} split holds 1 image: {why}", "add training images to the split"
        )
    raise UserError(f"train.batch_size 1: {why}", "use --batch 2 or more")


def predict(
    det: Detector,
    dataset: VocDataset,
    batch: int = 8,
    device: torch.device | None = None,
    reporter: Reporter | None = None,
) -> list[dict[str, np.ndarray]]:
    """The detector's output for every image of the data set, boxes in image pixels."""
    rep = reporter or NullReporter()
    device = device or torch.device("cpu")
    det.model.eval().to(device)
    rep.task("detecting", total=len(dataset))
    out = []
    with torch.no_grad():
        for idx in _batches(list(range(len(dataset))), batch):
            images = [dataset[i][0].to(device) for i in idx]
            for d in det.model(images):
                out.append({k: d[k].cpu().numpy() for k in ("boxes", "scores", "labels")})
            rep.advance(len(idx))
    return out


def measure_ap(
    det: Detector,
    dataset: VocDataset,
    batch: int = 8,
    method: str = "area",
    device: torch.device | None = None,
    reporter: Reporter | None = None,
) -> dict[str, Any]:
    predictions = predict(det, dataset, batch, device, reporter)
    return evaluate(dataset.annotations, predictions, det.labels, method=method)


def default_size(name: str, annotations: list[voc.VocAnnotation]) -> int:
    """The input side of a detector trained from random weights on these images: their
    longer side rounded up to a multiple of 32, at least 96 and at most the model's own
    (the SSD300s run at 300 only)."""
    ssd.check_model_name(name)
    native = ssd.MODELS[name]
    if name in ssd.NATIVE_SIZE_ONLY or not annotations:
        return native
    longest = max(max(a.width, a.height) for a in annotations)
    return min(native, max(96, math.ceil(longest / 32) * 32))


def _flip(
    image: torch.Tensor, target: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    width = image.shape[-1]
    boxes = target["boxes"].clone()
    boxes[:, [0, 2]] = width - target["boxes"][:, [2, 0]]
    return image.flip(-1), {**target, "boxes": boxes}


def _summed_losses(
    call: Callable[[list[Target]], dict[str, torch.Tensor]], targets: list[Target]
) -> torch.Tensor:
    """The detector's loss terms on `targets`, summed: `call` is its forward pass, which in
    train mode takes the targets and returns the loss terms."""
    return torch.stack(list(call(targets).values())).sum()


@dataclass
class LossSink:
    """The loop's metric sink of a detection run: it keeps the training losses, and with a
    store writes them to run `run_id` as the loop flushes them (a crash loses only the
    steps since the last flush). Only train/loss is stored, as detection always has."""

    store: RunStore | None = None
    run_id: int = 0
    losses: list[float] = field(default_factory=list)

    def log_metrics(self, rows: list[Row]) -> None:
        kept = [row for row in rows if row[0] == "train/loss"]
        self.losses += [row[2] for row in kept]
        if self.store is not None and kept:
            self.store.log_metrics(self.run_id, kept)

    def add_artifact(self, kind: str, path: Path) -> None:
        pass  # the loop's only artifact is a profiled trace, which detection refuses


def train(
    det: Detector,
    dataset: VocDataset,
    train_cfg: TrainConfig,
    run: RunConfig,
    max_steps: int | None = None,
    device: torch.device | None = None,
    reporter: Reporter | None = None,
    sink: LossSink | None = None,
) -> TrainResult:
    """The engine's step of `train_cfg` and `run` on the SSD loss for train.epochs;
    `max_steps` stops early (tests take one step). The losses go to `sink` as the loop
    logs them. Images/s counts the steps after run.warmup_steps."""
    rep = reporter or NullReporter()
    device = device or torch.device("cpu")
    sink = sink if sink is not None else LossSink()
    model, batch = det.model, train_cfg.batch_size
    per_epoch = train_steps(len(dataset), batch)
    step = prepare(
        model,
        train_cfg,
        run,
        device,
        per_epoch,
        # The detector's forward pass waits for the targets, which the loss hands it.
        wrap=lambda detector: lambda images: partial(detector, images),
        loss_fn=_summed_losses,
    )
    rng = np.random.default_rng(run.seed)

    def epoch_batches(epoch: int) -> list[tuple[list[int], None]]:
        order = [int(i) for i in rng.permutation(len(dataset))]
        return [(idx, None) for idx in train_batches(order, batch)]

    def collate(idx: list[int], _: None) -> tuple[list[torch.Tensor], list[Target]]:
        """The images of `idx`, each flipped at random, and their targets, on the device."""
        pairs = [dataset[i] for i in idx]
        pairs = [_flip(*p) if rng.random() < 0.5 else p for p in pairs]
        targets = [{k: v.to(device) for k, v in p[1].items()} for p in pairs]
        return [p[0].to(device) for p in pairs], targets

    clock = EpochClock(device, run.warmup_steps, PhaseTimer(device, enabled=False))
    state = fit(
        step,
        model=model,
        batches=epoch_batches,
        state=Progress(),
        clock=clock,
        sink=sink,
        reporter=rep,
        run=run,
        trainer="detect",
        epochs=train_cfg.epochs,
        max_steps=max_steps,
        collate=collate,
    )
    model.eval()
    images_per_s = state.samples / state.train_time_s if state.samples else math.nan
    return TrainResult(state.step, sink.losses, state.elapsed_s, images_per_s)


def stored_keys(job: DetectJob) -> dict[str, Any]:
    """What a finetune run stores as its [detect] config: the section, and the recipe's
    [train] and [run] keys under the names [detect] gave them before it had none (readers of
    stored runs see the same keys), with the schedule, Nesterov and clipping it honours."""
    train, run = job.experiment.train, job.experiment.run
    return {
        **job.detect.model_dump(mode="json"),
        "epochs": train.epochs,
        "batch": train.batch_size,
        "optimizer": train.optimizer,
        "lr": train.lr,
        "momentum": train.momentum,
        "weight_decay": train.weight_decay,
        "seed": run.seed,
        "threads": run.threads,
        "precision": run.precision,
        "nesterov": train.nesterov,
        "grad_clip": train.grad_clip,
        "schedule": train.schedule.model_dump(mode="json"),
    }


@contextmanager
def detect_run(
    store: RunStore,
    verb: str,
    root: Path,
    det: Detector,
    detect: dict[str, Any],
    weights: Path | None,
    device: torch.device,
    threads: int,
    name: str | None = None,
    reporter: Reporter | None = None,
    **extra: Any,
) -> Iterator[Recording]:
    """The run of `dlperf detect VERB`, its config the [detect] keys that apply (`detect`)
    and the weights, recorded (killed or failed if it stops) as `store.new_run` does; named
    `name` (run.name) where given, else by the verb, the model and the data. A stop by `runs
    delete --force` is told to `reporter` as `run` tells it: it ended with no word at all."""
    config = {
        "model": {"name": det.name},  # where `dlperf runs list` and `runs show` look
        "data": {"root": str(root)},
        # resolved: the size the detector ran at, whether given, the weights' or default
        "detect": {**detect, "size": det.size},
        "weights": str(weights) if weights else None,
        **extra,
    }
    said = (reporter or NullReporter()).log
    with (
        store.new_run(
            name=name or f"{verb} {det.name} on {root.name}",  # --set run.name was unsaid
            kind="detect",
            config=config,
            system=system_info(device, threads),
        ) as record,
        # inside the recording: read before the stop marks the run killed
        telling_deleted(store, lambda: [record.id], said),
    ):
        yield record


def finetune_recorded(
    open_store: Callable[[], RunStore],
    voc_root: Path,
    job: DetectJob,
    out: Path,
    weights: Path | None = None,
    reporter: Reporter | None = None,
) -> dict[str, Any]:
    """Fine-tune `job.detect.model` on a VOC-layout set as the job's [train] and [run] say,
    AP@0.5 on the validation split before and after, the weights saved to `out`, recorded as
    a run (killed or failed if it stops). A loss that diverges fails the run with the training
    loop's line, as `dlperf run` does, and raises FinetuneDiverged saying it. Returns the run's
    summary with its id, device, threads and the number of validation images."""
    rep = reporter or NullReporter()
    # Recorded absolute, as every artifact is: read from another directory, a relative path
    # names another file (`runs show`, `runs export` would show and upload that one).
    out = out.absolute()
    cfg, train_cfg, run = job.detect, job.experiment.train, job.experiment.run
    root = voc.find_root(voc_root)
    train_set = voc.load_split(root, cfg.train_split)
    val_set = voc.load_split(root, cfg.val_split)
    labels = voc.class_names(train_set, val_set)
    if len(labels) < 2:
        raise UserError(f"{root}: the annotations name no objects")
    # Before training: AP on trained images, a detector of the background alone, or a NaN
    # after the whole training were each reported without a word.
    voc.check_apart(root, cfg.train_split, train_set, cfg.val_split, val_set)
    voc.check_trainable(root, cfg.train_split, train_set)
    voc.check_measurable(root, cfg.val_split, val_set)
    # A class only val has would be trained with no example and its AP of 0 averaged in.
    voc.check_classes_trained(root, cfg.train_split, train_set, cfg.val_split, val_set)
    threads = set_threads(run.threads)
    torch.manual_seed(run.seed)
    device = pick_device(run.device)
    det = _detector(cfg, weights, labels, train_set)
    check_step_of_one(det, cfg.train_split, len(train_set), train_cfg.batch_size)
    train_data = voc.VocDataset(root, train_set, labels)
    val_data = voc.VocDataset(root, val_set, labels)
    config = stored_keys(job)
    store = open_store()  # only now: a refused set or option leaves no store made
    with detect_run(
        store, "finetune", root, det, config, weights, device, threads, run.name, rep
    ) as record:
        batch = train_cfg.batch_size
        before = measure_ap(det, val_data, batch, cfg.ap_method, device, rep)
        sink = LossSink(store, record.id)
        try:
            result = train(det, train_data, train_cfg, run, None, device, rep, sink)
        except Diverged as e:  # stored as `dlperf run` stores it: the loop's line and advice
            failed: RunResult | None = failed_softly(record, e)
        else:
            failed = None
            after = measure_ap(det, val_data, batch, cfg.ap_method, device, rep)
            ssd.save_checkpoint(det, out)
            store.add_artifact(record.id, "checkpoint", out)
            summary: dict[str, Any] = {
                "ap_before": before["ap"],
                "ap_after": after["ap"],
                "map_before": before["map"],
                "map_after": after["map"],
                "ap_method": cfg.ap_method,
                "steps": result.steps,
                "train_s": result.train_s,
                "images_per_s": result.images_per_s,
                "final_loss": result.losses[-1],
                "weights": str(out),
            }
            record.summary = summary
    if failed is not None:
        raise FinetuneDiverged(f"run {failed.run_id} failed: {failed.error}")
    return {
        "run_id": record.id,
        "device": str(device),
        "threads": threads,
        "val_images": len(val_set),
        **summary,
    }


def _detector(
    cfg: DetectConfig, weights: Path | None, labels: list[str], train_set: list[voc.VocAnnotation]
) -> Detector:
    """The detector to fine-tune: at detect.size, else the side its weights were trained at,
    else `default_size` of the training images."""
    size = cfg.size or (None if weights else default_size(cfg.model, train_set))
    try:
        # the weights' own names, where they have any, to compare with the set's below: given
        # as `labels` they named the weights' heads by position, and no check could fail
        # seed None: random weights drawn as run.seed seeded torch's generator before this
        det = ssd.build(cfg.model, weights=weights, size=size, fallback_labels=labels, seed=None)
    except ssd.OtherClasses as e:  # the count is the set's: --num-classes is export's
        names = f"this set names {len(labels) - 1} ({', '.join(labels[1:])})"
        raise UserError(
            f"{weights} holds a detector of {e.classes}, {names}",
            "fine-tune from weights of these classes, or leave out --weights to start from "
            "random ones",
        ) from None
    if det.labels != labels:
        raise UserError(
            f"{weights} was trained on {det.labels[1:]}, this set has {labels[1:]}",
            "fine-tune from weights of these classes, or leave out --weights to start from "
            "random ones",
        )
    return det


def ap_changes(done: dict[str, Any]) -> list[list[Any]]:
    """`finetune_recorded`'s AP before and after, by class and then mAP: rows of class,
    before, after and the change (None where either is nan: a class with no objects)."""
    pairs = [(name, ap, done["ap_after"][name]) for name, ap in done["ap_before"].items()]
    pairs.append(("mAP", done["map_before"], done["map_after"]))
    return [[n, a, b, None if math.isnan(a) or math.isnan(b) else b - a] for n, a, b in pairs]


def summary_line(done: dict[str, Any], ap_method: str, val_split: str, out: Path) -> str:
    """The line that ends `detect finetune`'s output: what was measured, how fast, where saved."""
    rate = f"{done['images_per_s']:.1f} images/s"  # nan (--json: null): no step was timed
    if math.isnan(done["images_per_s"]):
        rate = "images/s not measured: every step was warm-up"
    return (
        f"run {done['run_id']}: AP ({ap_method}) on {done['val_images']} {val_split} "
        f"images; {done['steps']} steps in {done['train_s']:.1f} s ({rate}, "
        f"{done['threads']} threads on {done['device']}), final loss "
        f"{done['final_loss']:.3f}; saved {one_line(str(out))}"
    )
