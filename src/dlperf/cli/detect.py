"""`dlperf detect export | run | make-shapes | finetune | eval`: SSD detectors, ONNX and VOC
AP."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from dlperf.cli import console, outputs
from dlperf.cli.app import Json, app, config_option, open_store, set_option
from dlperf.detect import SCORE_THRESHOLD
from dlperf.errors import CheckFailed, UserError
from dlperf.paths import check_writable

if TYPE_CHECKING:  # dlperf.config loads pydantic: only when a command runs
    from dlperf.config import DetectJob

detect_app = typer.Typer(
    help="Object detection: export torchvision's SSD detectors to ONNX, run them in ONNX "
    "Runtime, fine-tune them on VOC-layout data and measure AP@0.5 (with or without "
    "fine-tuning).\n\n"
    "Example: dlperf detect export --out det.onnx --num-classes 3",
    no_args_is_help=True,
)
app.add_typer(detect_app, name="detect")

MODEL = typer.Option(
    "ssdlite320_mobilenet_v3_large",
    "--model",
    help="ssdlite320_mobilenet_v3_large | ssd300_vgg16 | ssd300_mobilenet_v1 (pytorch-ssd's "
    "mb1-ssd).",
)
WEIGHTS = typer.Option(
    None,
    "--weights",
    help="A state_dict, a `dlperf detect finetune` checkpoint (.pt), or with --model "
    "ssd300_mobilenet_v1 a qfgaohao/pytorch-ssd mb1-ssd checkpoint (.pth).",
)
SIZE = typer.Option(
    None, "--size", help="Square input side (multiple of 32; default the model's: 320 or 300)."
)
PRETRAINED = typer.Option(
    False, "--pretrained", help="torchvision's COCO weights (downloads: needs the internet)."
)
# '' is refused as parsed, not taken as the current directory (outputs.OutPath).
ANNOTATED_DIR = outputs.OutPath(
    "detect run writes its annotated copies into a directory", "--out annotated"
)
SHAPES_DIR = outputs.OutPath(
    "detect make-shapes writes its data set into a directory", "dlperf detect make-shapes shapes"
)
# Shortcuts for keys of [detect], [train] and [run] that finetune and eval take.
MODEL_KEY = typer.Option(
    None,
    "--model",
    help="ssdlite320_mobilenet_v3_large (default) | ssd300_vgg16 | ssd300_mobilenet_v1.",
)
AP_METHOD = typer.Option(
    None, "--ap", help="area (all-point, VOC2010+) | 11point (VOC2007 devkit)."
)
THREADS = typer.Option(None, "--threads", help="Intra-op threads (default: the usable cores).")
DETECT_CONFIG = config_option("[detect], [train] and [run] sections")
# The flags named otherwise than their keys (the others are --KEY).
FLAG_NAMES = {"train.batch_size": "--batch", "detect.ap_method": "--ap"}


@detect_app.command("export")
def export(
    out: Path = outputs.out_file(
        ..., "The ONNX file to write.", thing="ONNX file", example="det.onnx"
    ),
    model: str = MODEL,
    weights: Path = WEIGHTS,
    pretrained: bool = PRETRAINED,
    num_classes: int = typer.Option(
        None, "--num-classes", help="Classes including background (default 91, COCO)."
    ),
    labels: Path = typer.Option(None, "--labels", help="Class names, one a line."),
    size: int = SIZE,
    threads: int = THREADS,
    as_json: Json = False,
) -> None:
    """Export an SSD detector to ONNX (random weights unless --weights or --pretrained),
    check the graph, compare boxes and scores with PyTorch, and save the metadata.

    Exit 1 when ONNX Runtime and PyTorch disagree.

    Example: dlperf detect export --num-classes 3 --out det.onnx
    """
    from dlperf.detect import ssd
    from dlperf.system import set_threads

    ssd.check_model_name(model)
    if num_classes is not None and num_classes < 2:
        raise UserError(f"--num-classes counts the background too: at least 2, got {num_classes}")
    check_writable(out)
    set_threads(threads)
    names = ssd.read_labels(labels) if labels is not None else None
    with console.reporter() as rep:
        det = ssd.build(model, num_classes, weights, pretrained, size, names)
        result = ssd.export(det, out, reporter=rep)
    if not console.printed_json(as_json, result):
        rows = [[k, result[k]] for k in result if k not in ("atol", "atol_boxes")]
        console.print_table(None, ["", "value"], rows)
    if not result["parity"]:
        raise CheckFailed(ssd.parity_failure(result))


@detect_app.command("run")
def run(
    model_path: Path = typer.Argument(..., help="An ONNX detector from `dlperf detect export`."),
    images: list[Path] = typer.Argument(..., help="Image files."),
    score_threshold: float = typer.Option(
        SCORE_THRESHOLD, "--score-threshold", help="Keep and draw scores >= this."
    ),
    out_dir: Path = typer.Option(
        None,
        "--out",
        help="Directory for annotated copies (NAME.det.png, small images enlarged).",
        click_type=ANNOTATED_DIR,
    ),
    threads: int = THREADS,
    as_json: Json = False,
) -> None:
    """Detect objects with an exported detector in ONNX Runtime; boxes in each image's own
    pixels; annotated copies as PNG with --out, the labels outside the boxes.

    Example: dlperf detect run det.onnx shapes/JPEGImages/000000.jpg --out annotated
    """
    from dlperf.detect import ssd

    results = ssd.run(model_path, images, score_threshold, out_dir, threads)
    if console.printed_json(as_json, results):
        return
    rows = [
        [r["image"], d["label"], d["score"], ", ".join(f"{v:.1f}" for v in d["box"])]
        for r in results
        for d in r["detections"] or [{"label": "-", "score": None, "box": []}]
    ]
    console.print_table(None, ["image", "label", "score", "box (x1, y1, x2, y2)"], rows)
    console.tell([], *(r.get("annotated") for r in results))


@detect_app.command("make-shapes")
def make_shapes(
    root: Path = typer.Argument(
        ...,
        help="Directory to write the VOC-layout set into.",
        click_type=SHAPES_DIR,
    ),
    # The defaults are the set detection's defaults learn in about 5 minutes on 2 cores.
    images: int = typer.Option(200, "--images", help="Number of images."),
    size: int = typer.Option(96, "--size", help="Image side in pixels."),
    seed: int = typer.Option(0, "--seed", help="Random seed."),
    as_json: Json = False,
) -> None:
    """Write a small VOC-layout data set of squares and discs on noisy backgrounds
    (JPEGImages, Annotations, ImageSets/Main/train|val|trainval.txt).

    Example: dlperf detect make-shapes shapes --images 200 --size 96
    """
    from dlperf.detect.voc import make_shapes as write

    summary = write(root, images=images, size=size, seed=seed)
    if console.printed_json(as_json, summary):
        return
    objects = ", ".join(f"{n} {name}s" for name, n in summary["objects"].items())
    console.out.print(
        f"wrote {summary['images']} images ({objects}) to {root}: "
        f"{summary['train']} train, {summary['val']} val"
    )


def _detect_job(
    config: Path | None, set_: list[str], detect: dict[str, Any], **sections: dict[str, Any]
) -> DetectJob:
    """The job of `config` < --set < the command's options, each short for the key of its
    name in [detect], or in [train] and [run] (`sections`)."""
    from dlperf.config import DetectJob, load_job
    from dlperf.detect import ssd

    job = load_job(DetectJob, config, set_, FLAG_NAMES, detect=detect, **sections)
    ssd.check_model_name(job.detect.model)
    return job


@detect_app.command("finetune")
def finetune(
    voc_root: Path = typer.Argument(..., help="VOCdevkit/VOC2007 or a VOC-layout directory."),
    config: Path = DETECT_CONFIG,
    set_: list[str] = set_option("train.lr=0.05"),
    weights: Path = WEIGHTS,
    out: Path = outputs.out_file(
        Path("detector.pt"), "Checkpoint to write.", thing="checkpoint", example="detector.pt"
    ),
    model: str = MODEL_KEY,
    size: int = SIZE,
    epochs: int = typer.Option(None, "--epochs", help="Passes over the train split."),
    batch: int = typer.Option(None, "--batch", help="Images per step."),
    lr: float = typer.Option(
        None,
        "--lr",
        help="Peak learning rate, decayed by train.schedule (a cosine by default).",
    ),
    train_split: str = typer.Option(None, "--train-split", help="ImageSets/Main split."),
    val_split: str = typer.Option(None, "--val-split", help="Split AP is measured on."),
    ap_method: str = AP_METHOD,
    seed: int = typer.Option(None, "--seed", help="Random seed."),
    threads: int = THREADS,
    as_json: Json = False,
) -> None:
    """Fine-tune an SSD detector on a VOC-layout data set: per-class AP@0.5 and mAP on the
    validation split before and after, the weights saved, the run kept in the run store.

    Training reads [train] and [run] as `dlperf run` does, over detection's defaults (AdamW
    at 0.003, 20 epochs of 8 images, a cosine schedule); run.compile, run.channels_last,
    train.label_smoothing, train.backbone_lr_scale, a profiled window and phase timing are
    refused. --model, --size, --train-split, --val-split and --ap (detect.ap_method) are short
    for --set detect.KEY=VALUE; --epochs, --batch (train.batch_size) and --lr for train.KEY;
    --seed and --threads for run.KEY. `dlperf config keys` explains every key.

    Example: dlperf detect finetune shapes --threads 1
    """
    from dlperf.detect.finetune import ap_changes, finetune_recorded, summary_line

    detect = {
        "model": model, "size": size, "train_split": train_split, "val_split": val_split,
        "ap_method": ap_method,
    }  # fmt: skip
    train = {"epochs": epochs, "batch_size": batch, "lr": lr}
    job = _detect_job(config, set_, detect, train=train, run={"seed": seed, "threads": threads})
    opts = job.detect
    check_writable(out)
    with console.reporter() as rep:
        done = finetune_recorded(open_store, voc_root, job, out, weights, rep)
    if console.printed_json(as_json, done):
        return
    console.print_table(
        f"AP@0.5 on {opts.val_split}", ["class", "before", "after", "change"], ap_changes(done)
    )
    console.out.print(summary_line(done, opts.ap_method, opts.val_split, out))


@detect_app.command("eval")
def evaluate(
    voc_root: Path = typer.Argument(..., help="VOCdevkit/VOC2007 or a VOC-layout directory."),
    weights: Path = WEIGHTS,
    pretrained: bool = PRETRAINED,
    config: Path = DETECT_CONFIG,
    set_: list[str] = set_option("train.batch_size=16"),
    model: str = MODEL_KEY,
    size: int = SIZE,
    batch: int = typer.Option(None, "--batch", help="Images per forward pass."),
    val_split: str = typer.Option(None, "--val-split", help="ImageSets/Main split to test on."),
    ap_method: str = AP_METHOD,
    threads: int = THREADS,
    as_json: Json = False,
) -> None:
    """Test a trained detector on a VOC-layout split without fine-tuning it: per-class
    AP@0.5 and mAP, the run kept in the run store.

    The detector's classes are matched to the set's by name, COCO's airplane, dining table,
    motorcycle, potted plant, couch and tv to VOC's aeroplane, diningtable, motorbike,
    pottedplant, sofa and tvmonitor; a class the detector does not know scores AP 0 (none,
    left out of mAP, when its objects are all difficult). The options from --model to
    --threads are short for keys as for finetune (--batch: train.batch_size, the images of
    a forward pass; --threads: run.threads).

    With --model ssd300_mobilenet_v1, --weights also takes qfgaohao/pytorch-ssd's mb1-ssd
    checkpoint (its VOC model: mobilenet-v1-ssd-mp-0_675.pth), its keys mapped onto the same
    layers; give VOCdevkit/VOC2007 with --val-split test --ap 11point for its paper figure.

    Example: dlperf detect eval shapes --weights shapes.pt --val-split val --threads 1
    """
    from dlperf.detect.evaluate import evaluate_recorded, unknown_warnings

    detect = {"model": model, "size": size, "val_split": val_split, "ap_method": ap_method}
    train, run = {"batch_size": batch}, {"threads": threads}
    job = _detect_job(config, set_, detect, train=train, run=run)
    with console.reporter() as rep:
        done = evaluate_recorded(open_store, voc_root, job, weights, pretrained, rep)
    if console.printed_json(as_json, done):
        return
    rows = [
        [name, "-" if name in done["unknown"] else done["renamed"].get(name, name), ap]
        for name, ap in done["ap"].items()
    ]
    console.print_table(
        f"AP@0.5 on {done['split']}",
        ["class", "detector's class", "AP"],
        [*rows, ["mAP", "", done["map"]]],
    )
    console.tell(unknown_warnings(done))
    console.out.print(
        f"run {done['run_id']}: AP ({done['ap_method']}) on {done['images']} {done['split']} "
        f"images in {done['eval_s']:.1f} s ({done['images_per_s']:.1f} images/s, "
        f"{done['threads']} threads on {done['device']})"
    )
