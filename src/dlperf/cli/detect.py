"""`dlperf detect export | run | make-shapes | finetune`: SSD detectors, ONNX and VOC AP."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import typer

from dlperf.cli import console
from dlperf.cli.app import app, open_store
from dlperf.errors import CheckFailed, UserError

detect_app = typer.Typer(
    help="Object detection: export torchvision's SSD detectors to ONNX, run them in ONNX "
    "Runtime, fine-tune them on VOC-layout data and measure AP@0.5.\n\n"
    "Example: dlperf detect export --out det.onnx --num-classes 3",
    no_args_is_help=True,
)
app.add_typer(detect_app, name="detect")

MODEL = typer.Option(
    "ssdlite320_mobilenet_v3_large",
    "--model",
    help="ssdlite320_mobilenet_v3_large | ssd300_vgg16.",
)
WEIGHTS = typer.Option(
    None, "--weights", help="A state_dict or a `dlperf detect finetune` checkpoint (.pt)."
)
SIZE = typer.Option(
    None, "--size", help="Square input side (multiple of 32; default the model's: 320 or 300)."
)
THREADS = typer.Option(None, "--threads", help="Intra-op threads (default: the usable cores).")
JSON = typer.Option(False, "--json", help="Print one JSON document.")


@detect_app.command("export")
def export(
    out: Path = typer.Option(..., "--out", help="The ONNX file to write."),
    model: str = MODEL,
    weights: Path = WEIGHTS,
    pretrained: bool = typer.Option(
        False, "--pretrained", help="torchvision's COCO weights (downloads: needs the internet)."
    ),
    num_classes: int = typer.Option(
        None, "--num-classes", help="Classes including background (default 91, COCO)."
    ),
    labels: Path = typer.Option(None, "--labels", help="Class names, one a line."),
    size: int = SIZE,
    threads: int = THREADS,
    as_json: bool = JSON,
) -> None:
    """Export an SSD detector to ONNX (random weights unless --weights or --pretrained),
    check the graph, compare boxes and scores with PyTorch, and save the metadata.

    Exit 1 when ONNX Runtime and PyTorch disagree.

    Example: dlperf detect export --num-classes 3 --out det.onnx
    """
    from dlperf.deploy import detect
    from dlperf.system import set_threads

    detect.check_model_name(model)
    set_threads(threads)
    names = detect.read_labels(labels) if labels is not None else None
    with console.reporter() as rep:
        det = detect.build(model, num_classes, weights, pretrained, size, names)
        result = detect.export(det, out, reporter=rep)
    if as_json:
        console.print_json(result)
    else:
        rows = [[k, result[k]] for k in result if k != "atol"]
        console.print_table(None, ["", "value"], rows)
    if not result["parity"]:
        raise CheckFailed(
            f"ONNX Runtime and PyTorch differ: {result['detections_onnx']} vs "
            f"{result['detections_torch']} detections, box diff {result['max_abs_diff_boxes']}, "
            f"score diff {result['max_abs_diff_scores']} (atol {result['atol']})"
        )


@detect_app.command("run")
def run(
    model_path: Path = typer.Argument(..., help="An ONNX detector from `dlperf detect export`."),
    images: list[Path] = typer.Argument(..., help="Image files."),
    score_threshold: float = typer.Option(0.5, "--score-threshold", help="Keep scores >= this."),
    out_dir: Path = typer.Option(None, "--out-dir", help="Write annotated PNGs here."),
    threads: int = THREADS,
    as_json: bool = JSON,
) -> None:
    """Detect objects with an exported detector in ONNX Runtime; boxes in each image's own
    pixels; annotated copies as PNG with --out-dir.

    Example: dlperf detect run det.onnx shapes/JPEGImages/000000.jpg --out-dir annotated
    """
    from dlperf.deploy import detect

    results = detect.run(model_path, images, score_threshold, out_dir, threads)
    if as_json:
        console.print_json(results)
        return
    rows = [
        [r["image"], d["label"], d["score"], ", ".join(f"{v:.1f}" for v in d["box"])]
        for r in results
        for d in r["detections"] or [{"label": "-", "score": None, "box": []}]
    ]
    console.print_table(None, ["image", "label", "score", "box (x1, y1, x2, y2)"], rows)
    for r in results:
        if "annotated" in r:
            console.err.print(f"saved {r['annotated']}", markup=False)


@detect_app.command("make-shapes")
def make_shapes(
    root: Path = typer.Argument(..., help="Directory to write the VOC-layout set into."),
    images: int = typer.Option(40, "--images", help="Number of images."),
    size: int = typer.Option(160, "--size", help="Image side in pixels."),
    seed: int = typer.Option(0, "--seed", help="Random seed."),
    as_json: bool = JSON,
) -> None:
    """Write a small VOC-layout data set of squares and discs on noisy backgrounds
    (JPEGImages, Annotations, ImageSets/Main/train|val|trainval.txt).

    Example: dlperf detect make-shapes shapes --images 40 --size 160
    """
    from dlperf.deploy.voc import make_shapes as write

    summary = write(root, images=images, size=size, seed=seed)
    if as_json:
        console.print_json(summary)
        return
    objects = ", ".join(f"{n} {name}s" for name, n in summary["objects"].items())
    console.out.print(
        f"wrote {summary['images']} images ({objects}) to {root}: "
        f"{summary['train']} train, {summary['val']} val",
        markup=False,
    )


def _ap_rows(before: dict[str, Any], after: dict[str, Any]) -> list[list[Any]]:
    rows = [[name, ap, after["ap"][name], _delta(ap, after["ap"][name])]
            for name, ap in before["ap"].items()]  # fmt: skip
    rows.append(["mAP", before["map"], after["map"], _delta(before["map"], after["map"])])
    return rows


def _delta(a: float, b: float) -> float | None:
    return None if math.isnan(a) or math.isnan(b) else b - a


@detect_app.command("finetune")
def finetune(
    voc_root: Path = typer.Argument(..., help="VOCdevkit/VOC2007 or a VOC-layout directory."),
    model: str = MODEL,
    weights: Path = WEIGHTS,
    size: int = SIZE,
    epochs: int = typer.Option(10, "--epochs", help="Passes over the train split."),
    batch: int = typer.Option(8, "--batch", help="Images per step."),
    lr: float = typer.Option(0.01, "--lr", help="Peak learning rate (cosine decay)."),
    train_split: str = typer.Option("train", "--train-split", help="ImageSets/Main split."),
    val_split: str = typer.Option("val", "--val-split", help="Split AP is measured on."),
    ap_method: str = typer.Option(
        "area", "--ap", help="area (all-point, VOC2010+) | 11point (VOC2007 devkit)."
    ),
    out: Path = typer.Option(Path("detector.pt"), "--out", help="Checkpoint to write."),
    seed: int = typer.Option(0, "--seed", help="Random seed."),
    threads: int = THREADS,
    as_json: bool = JSON,
) -> None:
    """Fine-tune an SSD detector on a VOC-layout data set: per-class AP@0.5 and mAP on the
    validation split before and after, the weights saved, the run kept in the run store.

    Example: dlperf detect finetune shapes --size 160 --epochs 30 --lr 0.05 --threads 1
    """
    import torch

    from dlperf.deploy import detect, voc
    from dlperf.deploy import finetune as ft
    from dlperf.system import pick_device, set_threads, system_info

    detect.check_model_name(model)
    if epochs < 1 or batch < 1 or lr <= 0:
        raise UserError("--epochs and --batch must be 1 or more and --lr positive")
    if ap_method not in voc.AP_METHODS:
        raise UserError(f"unknown --ap '{ap_method}'", f"choose {' or '.join(voc.AP_METHODS)}")
    root = voc.find_root(voc_root)
    train_set, val_set = voc.load_split(root, train_split), voc.load_split(root, val_split)
    labels = voc.class_names(train_set, val_set)
    if len(labels) < 2:
        raise UserError(f"{root}: the annotations name no objects")
    threads = set_threads(threads)
    torch.manual_seed(seed)
    device = pick_device("auto")
    det = detect.build(model, len(labels), weights, size=size, labels=labels)
    if det.labels != labels:
        raise UserError(f"{weights} was trained on {det.labels[1:]}, this set has {labels[1:]}")
    train_data = voc.VocDataset(root, train_set, labels)
    val_data = voc.VocDataset(root, val_set, labels)
    store = open_store()
    config = {
        "model": {"name": model},
        "data": {"root": str(root), "train": train_split, "val": val_split},
        "size": det.size,
        "epochs": epochs,
        "batch": batch,
        "lr": lr,
        "weights": str(weights) if weights else None,
        "ap_method": ap_method,
        "seed": seed,
    }
    run_id = store.create_run(
        name=f"finetune {model} on {root.name}",
        kind="detect",
        config=config,
        system=system_info(device, threads),
    )
    try:
        with console.reporter() as rep:
            before = ft.measure_ap(det, val_data, batch, ap_method, device, rep)
            result = ft.train(det, train_data, epochs, batch, lr, None, seed, device, rep)
            after = ft.measure_ap(det, val_data, batch, ap_method, device, rep)
        detect.save_checkpoint(det, out)
    except BaseException as e:
        status = "killed" if isinstance(e, KeyboardInterrupt) else "failed"
        store.finish_run(run_id, status, error=f"{type(e).__name__}: {e}")
        raise
    store.log_metrics(run_id, [("train/loss", i, v) for i, v in enumerate(result.losses, 1)])
    store.add_artifact(run_id, "checkpoint", out)
    summary = {
        "ap_before": before["ap"],
        "ap_after": after["ap"],
        "map_before": before["map"],
        "map_after": after["map"],
        "ap_method": ap_method,
        "steps": result.steps,
        "train_s": result.train_s,
        "images_per_s": result.images_per_s,
        "final_loss": result.losses[-1],
        "weights": str(out),
    }
    store.finish_run(run_id, "finished", summary=summary)
    if as_json:
        console.print_json({"run_id": run_id, "device": str(device), "threads": threads, **summary})
        return
    console.print_table(
        f"AP@0.5 on {val_split}",
        ["class", "before", "after", "change"],
        _ap_rows(before, after),
    )
    console.out.print(
        f"run {run_id}: AP ({ap_method}) on {len(val_set)} {val_split} images; "
        f"{result.steps} steps in {result.train_s:.1f} s ({result.images_per_s:.1f} images/s, "
        f"{threads} threads on {device}), final loss {result.losses[-1]:.3f}; saved {out}",
        markup=False,
    )
