"""A trained SSD detector tested on a VOC-layout split, without fine-tuning: per-class
AP@0.5 and mAP (`dlperf detect eval`), recorded as a run.

The detector's classes are matched to the data set's by name. torchvision's COCO-pretrained
detectors (`--pretrained`) call six of VOC's twenty classes by other names (airplane,
dining table, motorcycle, potted plant, couch, tv); `VOC_FROM_COCO` matches those, so that
the pretrained model tested on VOC is scored on every VOC class. A class of the data set
that the detector does not know finds none of its objects: AP 0 (none, and left out of mAP,
when all its objects in the split are difficult), and it is named in the result's `unknown`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlperf.detect import ssd, voc
from dlperf.detect.finetune import detect_run, predict
from dlperf.errors import UserError
from dlperf.progress import NullReporter, Reporter
from dlperf.system import pick_device, set_threads

if TYPE_CHECKING:
    from dlperf.config import DetectJob
    from dlperf.store import RunStore

# COCO's names (torchvision's weight metadata) of the VOC classes it names otherwise.
VOC_FROM_COCO = {
    "airplane": "aeroplane",
    "dining table": "diningtable",
    "motorcycle": "motorbike",
    "potted plant": "pottedplant",
    "couch": "sofa",
    "tv": "tvmonitor",
}
# The [detect] keys evaluation reads (the training recipe's do not apply), stored beside
# train.batch_size and run.threads under the names [detect] gave them before.
EVAL_KEYS = ("model", "size", "val_split", "ap_method")


def match_classes(labels: list[str], classes: list[str]) -> tuple[list[str], dict[str, str]]:
    """The detector's `labels` in the data set's words: a label the data set's `classes`
    lack whose VOC name they have (and no other label takes) is renamed to it. Returns the
    names by label id and {data set class: detector label} of the renamed ones."""
    names, renamed = [], {}
    for label in labels:
        voc_name = VOC_FROM_COCO.get(label)
        if label not in classes and voc_name in classes and voc_name not in labels:
            names.append(voc_name)
            renamed[voc_name] = label
        else:
            names.append(label)
    return names, renamed


def evaluate_recorded(
    open_store: Callable[[], RunStore],
    voc_root: Path,
    job: DetectJob,
    weights: Path | None = None,
    pretrained: bool = False,
    reporter: Reporter | None = None,
) -> dict[str, Any]:
    """AP@0.5 of a trained detector (`weights`: a `detect finetune` checkpoint or a plain
    state_dict whose classes are the data set's; or torchvision's COCO weights) on the
    detect.val_split split of a VOC-layout set, train.batch_size images a forward pass,
    recorded as a run. Returns the run's summary with its id, device, threads and the
    split's name."""
    if weights is None and not pretrained:
        raise UserError(
            "detect eval tests trained weights",
            "give --weights FILE, a `dlperf detect finetune` checkpoint, or --pretrained",
        )
    rep = reporter or NullReporter()
    cfg, batch, run = job.detect, job.experiment.train.batch_size, job.experiment.run
    root = voc.find_root(voc_root)
    annotations = voc.load_split(root, cfg.val_split)
    voc.check_measurable(root, cfg.val_split, annotations)  # else every AP is NaN
    classes = voc.class_names(annotations)
    if len(classes) < 2:
        raise UserError(f"{root}: split {cfg.val_split} names no objects")
    threads = set_threads(run.threads)
    device = pick_device(run.device)
    try:
        det = ssd.build(
            cfg.model,
            weights=weights,
            pretrained=pretrained,
            size=cfg.size,
            fallback_labels=classes,
        )
    except ssd.OtherClasses as e:  # a state_dict's classes are taken to be the split's
        split = f"split {cfg.val_split} names {len(classes) - 1} ({_listed(classes[1:])})"
        raise UserError(
            f"{weights} holds a detector of {e.classes}, {split}",
            f"test it on a split of the {e.held - 1} classes it was trained on (--val-split), "
            "or give weights fine-tuned on this set: `dlperf detect finetune`",
        ) from None
    names, renamed = match_classes(det.labels, classes)
    unknown = [c for c in classes[1:] if c not in names]
    if len(unknown) == len(classes) - 1:
        raise UserError(
            f"the detector's classes ({_listed(det.labels[1:])}) include none of split "
            f"{cfg.val_split}'s ({_listed(classes[1:])})",
            "test weights trained on these classes",
        )
    detect = {
        **cfg.model_dump(mode="json", include=set(EVAL_KEYS)),
        "batch": batch,
        "threads": run.threads,
    }
    # Opened only now: a refused set or option leaves no store made (a missing dlperf.db was).
    store = open_store()
    with detect_run(
        store, "eval", root, det, detect, weights, device, threads, run.name, rep,
        pretrained=pretrained,
    ) as record:  # fmt: skip
        started = time.perf_counter()
        data = voc.VocDataset(root, annotations, names)
        predictions = predict(det, data, batch, device, rep)
        eval_s = time.perf_counter() - started
        result = voc.evaluate(
            annotations, predictions, names, method=cfg.ap_method, classes=classes[1:]
        )
        record.summary = {
            "ap": result["ap"],
            "map": result["map"],
            "ap_method": cfg.ap_method,
            "images": len(annotations),
            "eval_s": eval_s,
            "images_per_s": len(annotations) / eval_s if eval_s > 0 else math.nan,
            "renamed": renamed,
            "unknown": unknown,
        }
    return {
        "run_id": record.id,
        "device": str(device),
        "threads": threads,
        "split": cfg.val_split,
        **record.summary,
    }


def unknown_warnings(done: dict[str, Any]) -> list[str]:
    """A line for each class of `done` (evaluate_recorded's result) the detector does not
    know, saying what its AP is: 0, or none when VOC's rule gives NaN (the split has no
    object of it that is not difficult) and mAP leaves it out."""
    return [
        f"the detector has no class '{name}': "
        + (
            "its objects here are all difficult, so it has no AP and is left out of mAP"
            if math.isnan(done["ap"][name])
            else "its AP is 0"
        )
        for name in done["unknown"]
    ]


def _listed(names: list[str], most: int = 6) -> str:
    return ", ".join(names[:most]) + (f", ... ({len(names)} in all)" if len(names) > most else "")
