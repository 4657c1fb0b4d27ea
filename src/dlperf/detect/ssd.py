"""torchvision SSD detectors: build, export to ONNX, run in ONNX Runtime, draw the boxes.

Three detectors: torchvision's SSDlite320-MobileNetV3 and SSD300-VGG16, and SSD300 on
MobileNet-V1 in torchvision's SSD, laid out as qfgaohao/pytorch-ssd's mb1-ssd so that its
checkpoints load (detect/mobilenet_ssd.py).

The exported graph takes one image [1, 3, H, W] in [0, 1] (the detector normalises and
resizes inside) and returns "boxes" [N, 4] (x1, y1, x2, y2 in input pixels), "scores" [N]
and "labels" [N] (int64), after the detector's own score threshold and per-class NMS.

Exporter: with torch 2.14.1 the dynamo exporter (torch.export) cannot trace these models:
torchvision's batched NMS branches on the number of boxes that passed the score threshold,
a data-dependent size (GuardOnDataDependentSymNode in `_batched_nms_coordinate_trick`).
torchvision writes its detection code for the TorchScript exporter (`_topk_min`, NMS's ONNX
symbolic), so that is the exporter used here, with opset 17.
"""

from __future__ import annotations

import math
import os
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dlperf import image_modes
from dlperf.deploy import meta as meta_mod
from dlperf.deploy import runtime
from dlperf.deploy.meta import ModelMeta, Preprocess
from dlperf.detect import SCORE_THRESHOLD
from dlperf.errors import UserError
from dlperf.parsing import did_you_mean
from dlperf.paths import image_file
from dlperf.progress import NullReporter, Reporter

if TYPE_CHECKING:
    import torch
    from PIL import Image

MODELS = {"ssdlite320_mobilenet_v3_large": 320, "ssd300_vgg16": 300, "ssd300_mobilenet_v1": 300}
# The most classes a detector is built with: the heads grow with them (ssd300_vgg16's by 134k
# parameters a class), and 99,999,999,999 grew until memory ran out, without a word.
MAX_CLASSES = 10_000
# Run at their native size only: VGG16's layers and mb1-ssd's table of default boxes fix it.
NATIVE_SIZE_ONLY = ("ssd300_vgg16", "ssd300_mobilenet_v1")
OUTPUTS = ("boxes", "scores", "labels")
INPUT = "image"
OPSET = 17
# Parity's box tolerance in pixels per pixel of the image side (3e-3 px at 300 px): a box
# corner's float32 rounding grows with its coordinate, its scores' do not.
BOX_RTOL = 1e-5
EXPORTER = "torchscript"
COCO_CLASSES = 91


class OtherClasses(UserError):
    """Weights of another class count than the detector built for them. The fix is export's
    (--num-classes); eval and finetune, whose count is the data set's, say their own with
    `classes`, the weights' count in words."""

    def __init__(self, weights: Path, name: str, held: int, built: int) -> None:
        self.held = held
        self.classes = f"{held} classes (background + {held - 1})"
        super().__init__(
            f"{weights} does not fit {name} with {built} classes: it holds {self.classes}",
            f"pass --num-classes {held}",
        )


@dataclass
class Detector:
    model: Any  # torch.nn.Module, an SSD in eval mode
    name: str
    size: int  # square input side
    labels: list[str]


def check_model_name(name: str) -> None:
    if name not in MODELS:
        hint = did_you_mean(name, MODELS, f"choose one of {', '.join(MODELS)}", cutoff=0.4)
        raise UserError(f"unknown detector '{name}'", hint)


def check_size(name: str, size: int) -> None:
    if size == MODELS[name]:
        return
    if name in NATIVE_SIZE_ONLY:
        raise UserError(f"--size {size}: {name} runs at its native 300 x 300 only")
    if size % 32 or not 96 <= size <= 640:
        raise UserError(f"input size {size} not supported", "use a multiple of 32 in 96..640")


def default_labels(num_classes: int) -> list[str]:
    return ["__background__", *(f"class{i}" for i in range(1, num_classes))]


def read_labels(path: Path) -> list[str]:
    """One class name a line; "__background__" is put first when the file lacks it."""
    names = runtime.read_labels(path)
    return names if names[0] == "__background__" else ["__background__", *names]


def set_size(model: Any, size: int) -> None:
    """Make an SSD take size x size images: its transform resizes to this fixed size and
    the default boxes follow the feature maps, so the weights do not change."""
    model.transform.min_size = (size,)
    model.transform.max_size = size
    model.transform.fixed_size = (size, size)


def _read_weights(path: Path, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the dlperf checkpoint or what the weights say of themselves, the state_dict in this
    detector's key names) of a weights file."""
    import torch

    from dlperf.detect import mobilenet_ssd

    meta_mod.regular_file(path, "give a PyTorch weights file")
    if not path.is_file():
        raise UserError(f"no weights file {path}")
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # pickle, zip and torch's own errors for a foreign file
        raise UserError(f"{path} is not a PyTorch weights file ({type(e).__name__})") from None
    if not isinstance(loaded, dict):
        raise UserError(f"{path} holds a {type(loaded).__name__}, not a state_dict")
    if mobilenet_ssd.is_pytorch_ssd(loaded):
        if name != mobilenet_ssd.NAME:
            raise UserError(
                f"{path} is a qfgaohao/pytorch-ssd mb1-ssd checkpoint, not {name}",
                f"use --model {mobilenet_ssd.NAME}",
            )
        classes = mobilenet_ssd.pytorch_ssd_classes(loaded)
        # pytorch-ssd's VOC model has 21 classes, in the devkit's order.
        labels = {"labels": mobilenet_ssd.VOC_LABELS} if classes == 21 else {}
        return {"num_classes": classes, **labels}, mobilenet_ssd.from_pytorch_ssd(loaded)
    if "state_dict" not in loaded:
        return {}, loaded
    if loaded.get("model") != name:
        raise UserError(
            f"{path} holds a {loaded.get('model')} detector, not {name}",
            f"use --model {loaded.get('model')}",
        )
    return loaded, loaded["state_dict"]


def build(
    name: str,
    num_classes: int | None = None,
    weights: Path | None = None,
    pretrained: bool = False,
    size: int | None = None,
    labels: list[str] | None = None,
    fallback_labels: list[str] | None = None,
    seed: int | None = 0,
) -> Detector:
    """A detector in eval mode: random weights (offline), a weights file (a dlperf detector
    checkpoint, a plain state_dict of the same architecture, or for ssd300_mobilenet_v1 a
    qfgaohao/pytorch-ssd mb1-ssd checkpoint, whose 21 classes are VOC's), or torchvision's
    COCO weights (`pretrained`, downloads them: needs the internet). `labels` name the
    classes whatever the weights say; `fallback_labels` only where the weights name none (a
    plain state_dict, random weights). Random weights are drawn with torch's generator
    seeded with `seed`, the caller's generator left as it was: the same detector every time,
    so `export`'s parity is one outcome, not a draw (unseeded, about one SSDlite in seven at
    96 px failed it); `seed` None draws them from the generator as the caller left it
    (finetune's, seeded with run.seed)."""
    from torchvision.models import detection, get_model_weights

    from dlperf.detect import mobilenet_ssd

    check_model_name(name)
    if weights is not None and pretrained:
        raise UserError("give --weights FILE or --pretrained, not both")
    if pretrained and name == mobilenet_ssd.NAME:
        raise UserError(
            f"torchvision has no weights for {name}",
            "give --weights with qfgaohao/pytorch-ssd's mb1-ssd checkpoint",
        )
    checkpoint, state = _read_weights(weights, name) if weights is not None else ({}, None)
    if size is None:  # not `or`: --size 0 is refused as 33 is, not taken as the default
        size = checkpoint.get("size") or MODELS[name]
    check_size(name, size)
    labels = labels or checkpoint.get("labels") or (None if pretrained else fallback_labels)
    if pretrained:
        coco = list(get_model_weights(name).DEFAULT.meta["categories"])
        labels = labels or coco
        num_classes = num_classes or len(coco)
        if num_classes != len(coco):
            raise UserError(
                f"--pretrained gives torchvision's COCO detector with {len(coco)} classes, "
                f"not {num_classes}",
                "fine-tune it for other classes",
            )
    fallback = len(labels) if labels else COCO_CLASSES
    num_classes = num_classes or checkpoint.get("num_classes") or fallback
    if num_classes < 2:
        raise UserError(f"--num-classes {num_classes}: a detector needs 2 or more (background + 1)")
    if num_classes > MAX_CLASSES:
        raise UserError(
            f"--num-classes {num_classes}: at most {MAX_CLASSES:,}",
            "LVIS, the largest common detection set, has 1,203; ssd300_vgg16's heads take 134k "
            "parameters a class",
        )
    held = checkpoint.get("num_classes")
    if weights is not None and type(held) is int and held != num_classes:
        # Before the labels: a checkpoint's own labels, counted against --num-classes, sent
        # the user to a labels list they never gave ("3 labels for 5 classes").
        raise OtherClasses(weights, name, held, num_classes)
    labels = labels or default_labels(num_classes)
    if len(labels) != num_classes:
        # Counted as the user gave them: a labels file's names get "__background__" put first
        # (`read_labels`), and "4 labels" was said of a file of 3 names.
        names = len(labels) - (labels[0] == "__background__")
        raise UserError(
            f"{names} class name{'s' * (names != 1)} for a detector of {num_classes - 1} "
            f"class{'es' * (num_classes != 2)} besides the background",
            f"give {num_classes - 1} name{'s' * (num_classes != 2)}, one a line in class id "
            "order (a first line __background__ is taken as the background's)",
        )
    random = state is None and not pretrained
    try:
        with _drawn_with(seed if random else None):
            if name == mobilenet_ssd.NAME:
                model = mobilenet_ssd.build(num_classes)
            elif pretrained:
                model = getattr(detection, name)(weights="DEFAULT")
            else:
                model = getattr(detection, name)(
                    weights=None, weights_backbone=None, num_classes=num_classes
                )
    except OSError as e:  # urllib's URLError is an OSError
        raise UserError(
            f"cannot download {name} weights ({e})", "--pretrained needs the internet"
        ) from None
    if state is not None:
        try:
            model.load_state_dict(state)
        except RuntimeError as e:
            assert weights is not None  # state is read from it
            held = _held_classes(state, model.state_dict(), num_classes)
            if held is not None:
                raise OtherClasses(weights, name, held, num_classes) from None
            first = str(e).strip().splitlines()[1:2] or [str(e)]
            raise UserError(
                f"{weights} does not fit {name}: {first[0].strip()}",
                f"give weights of a {name}, or name theirs with --model",
            ) from None
    set_size(model, size)
    if random:
        with _drawn_with(seed):  # its transform draws a size in train mode
            calibrate_random(model, size)
    return Detector(model.eval(), name, size, labels)


@contextmanager
def _drawn_with(seed: int | None) -> Iterator[None]:
    """The block's random draws from torch's generator seeded with `seed`, the caller's
    generator left as it was (a run seeded before the build draws what it would have);
    `seed` None: from the caller's generator."""
    import torch

    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def _held_classes(state: dict[str, Any], ours: dict[str, Any], built: int) -> int | None:
    """The class count `state` was trained with, read from its classification head: the
    head's last convolutions give anchors x classes channels, the anchors the architecture's,
    so theirs / ours = held / built. None where no head tensor differs (other weights), or
    where the differing ones do not all give one count of their output channels alone: other
    anchors per location change the box head too, and one layer's ratio would make one up."""
    counts = set()
    for key, tensor in state.items():
        mine = ours.get(key) if key.startswith("head.") else None
        # Their shapes alike (a BatchNorm's count of batches has none): not the classes'.
        if mine is None or tensor.shape == mine.shape or not (tensor.ndim and mine.ndim):
            continue
        held, left = divmod(int(tensor.shape[0]) * built, int(mine.shape[0]))
        classes = key.startswith("head.classification_head.") and tensor.shape[1:] == mine.shape[1:]
        if not classes or left:
            return None
        counts.add(held)
    return counts.pop() if len(counts) == 1 else None


def calibrate_random(model: Any, size: int, images: int = 8, seed: int = 0) -> None:
    """Data-dependent scaling of a randomly initialised SSD (in the spirit of LSUV, Mishkin
    & Matas 2016), so that its scores are spread out rather than tied.

    torchvision's init leaves SSDlite's BatchNorm statistics at identity, so in eval mode
    the activations shrink to ~1e-25 and every score is exactly 1/num_classes; SSD300-VGG16
    goes the other way, logits of std ~4 and scores tied at 1.0. Either way the top-k picks
    among ties and two runtimes need not keep the same boxes. Here BatchNorm takes running
    statistics from random images, and each head's last convolutions are scaled down so
    that its outputs have at most unit standard deviation."""
    import torch

    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over the calibration batch
    generator = torch.Generator().manual_seed(seed)
    batch = torch.rand(images, 3, size, size, generator=generator)
    with torch.no_grad():
        x = model.train().transform(list(batch))[0].tensors
        features = list(model.backbone(x).values())
        model.head(features)
        for m, momentum in zip(norms, momenta, strict=True):
            m.momentum = momentum
        model.eval()
        outputs = model.head(list(model.backbone(x).values()))
        heads = {
            "cls_logits": model.head.classification_head,
            "bbox_regression": model.head.regression_head,
        }
        for key, head in heads.items():
            scale = max(1.0, float(outputs[key].std()))
            for block in head.module_list:
                last = [m for m in block.modules() if isinstance(m, torch.nn.Conv2d)][-1]
                last.weight /= scale
                if last.bias is not None:
                    last.bias /= scale


def save_checkpoint(det: Detector, path: Path) -> None:
    """What `build(weights=path)` needs to rebuild the same detector, written atomically as a
    run's checkpoint is (`engine.checkpoint.save_atomically`): written straight onto `path`,
    a file-size limit truncated a good earlier checkpoint, with torch's traceback."""
    from dlperf.engine.checkpoint import save_atomically

    save_atomically(
        {
            "model": det.name,
            "num_classes": len(det.labels),
            "size": det.size,
            "labels": det.labels,
            "state_dict": det.model.state_dict(),
        },
        path,
    )


def _single_image(model: Any) -> Any:
    import torch

    class SingleImage(torch.nn.Module):
        """[1, 3, H, W] -> (boxes, scores, labels) of that image: ONNX wants tensors in
        and out, torchvision detectors take a list of images and return a list of dicts."""

        def __init__(self, detector: torch.nn.Module) -> None:
            super().__init__()
            self.detector = detector

        def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, ...]:
            out = self.detector([image[0]])[0]
            return out["boxes"], out["scores"], out["labels"]

    return SingleImage(model).eval()


def export(
    det: Detector,
    out: Path,
    atol: float = 1e-3,
    seed: int = 0,
    reporter: Reporter | None = None,
) -> dict[str, Any]:
    """Export, check with onnx.checker, compare the detections with PyTorch's on a random
    image (`compare_detections`), and save the metadata."""
    import onnx
    import torch

    rep = reporter or NullReporter()
    out.parent.mkdir(parents=True, exist_ok=True)
    wrapper = _single_image(det.model)
    generator = torch.Generator().manual_seed(seed)
    image = torch.rand(1, 3, det.size, det.size, generator=generator)
    rep.task(f"exporting {det.name} ({EXPORTER} exporter)")
    started = time.perf_counter()
    with warnings.catch_warnings():
        # The legacy exporter's deprecation note and torchvision's tracer warnings say
        # nothing the user can act on; the module docstring says why this exporter.
        warnings.simplefilter("ignore")
        with torch.no_grad():
            torch.onnx.export(
                wrapper,
                (image,),
                str(out),
                input_names=[INPUT],
                output_names=list(OUTPUTS),
                opset_version=OPSET,
                dynamo=False,
            )
    export_s = time.perf_counter() - started
    rep.task("checking the graph")
    onnx.checker.check_model(str(out), full_check=True)
    # The detector normalises inside its graph: the input is the image on [0, 1].
    pre = Preprocess((det.size, det.size), 3, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    shape = (3, det.size, det.size)
    meta = ModelMeta("detection", det.name, INPUT, shape, pre, det.labels, opset=OPSET)
    meta_mod.save(out, meta)
    rep.task("parity with PyTorch")
    with torch.no_grad():
        expected = [t.numpy() for t in wrapper(image)]
    got = infer(runtime.session(out), image.numpy())
    # float32's rounding of a box corner grows with the coordinate: at 300 px a correct
    # SSD300's boxes differed by up to 2.1e-3 px, past an absolute 1e-3.
    box_atol = max(atol, BOX_RTOL * det.size)
    return {
        "path": str(out),
        "model": det.name,
        "exporter": EXPORTER,
        "opset": OPSET,
        "input": [1, 3, det.size, det.size],
        "num_classes": len(det.labels),
        "export_s": export_s,
        "check": True,
        "detections_torch": len(expected[0]),
        "detections_onnx": len(got["boxes"]),
        **compare_detections((expected[0], expected[1], expected[2]), got, atol, box_atol),
    }


def compare_detections(
    expected: tuple[np.ndarray, np.ndarray, np.ndarray],
    got: dict[str, np.ndarray],
    atol: float = 1e-3,
    box_atol: float | None = None,
) -> dict[str, Any]:
    """PyTorch's detections (boxes, scores, labels) against ONNX Runtime's (`got`). `parity`
    needs as many detections, the scores equal within `atol` in order, and each detection
    one of the other's with its label and its box within `box_atol` pixels (`atol` if None).

    Where scores tie within `atol` the two runtimes may order the detections otherwise (their
    sorts and top-k are not one): compared by position, two of SSDlite's tied 1e-6 apart
    gave a 34-px "box diff" and labels "not equal" on a correct export. So each detection is
    matched to one of the same label whose score is within `atol` of its own, the closest
    box first (`_matched`), and `reordered_ties` counts those matched at another position.
    The scores are still compared in order, so an order that differs where scores do not tie
    fails; where a detection finds no match, boxes and labels are compared by position."""
    boxes, scores, labels = (np.asarray(a) for a in expected)
    tols = (atol, atol if box_atol is None else box_atol)
    if len(boxes) != len(got["boxes"]):
        return _parity(None, None, False, None, tols)
    score_diff = _max_diff(scores, got["scores"])
    partner = _matched(expected, got, atol)
    if partner is None:
        box_diff = _max_diff(boxes, got["boxes"])
        return _parity(
            box_diff, score_diff, bool(np.array_equal(labels, got["labels"])), None, tols
        )
    box_diff = _max_diff(boxes, got["boxes"][partner])
    reordered = int(np.count_nonzero(partner != np.arange(len(partner))))
    return _parity(box_diff, score_diff, True, reordered, tols)


def parity_failure(result: dict[str, Any]) -> str:
    """What `export`'s result says of a failed parity check, in one line."""
    return (
        f"ONNX Runtime and PyTorch differ: {result['detections_onnx']} vs "
        f"{result['detections_torch']} detections, box diff {result['max_abs_diff_boxes']}, "
        f"score diff {result['max_abs_diff_scores']} (atol {result['atol']}, boxes' "
        f"{result['atol_boxes']:.2g} px)"
    )


def _parity(
    box_diff: float | None,
    score_diff: float | None,
    labels_equal: bool,
    reordered: int | None,
    tols: tuple[float, float],  # the scores', the boxes'
) -> dict[str, Any]:
    atol, box_atol = tols
    within = box_diff is not None and box_diff <= box_atol
    within = within and score_diff is not None and score_diff <= atol
    return {
        "max_abs_diff_boxes": box_diff,
        "max_abs_diff_scores": score_diff,
        "labels_equal": labels_equal,
        "reordered_ties": reordered,
        "atol": atol,
        "atol_boxes": box_atol,
        "parity": labels_equal and within,
    }


def _matched(
    expected: tuple[np.ndarray, np.ndarray, np.ndarray], got: dict[str, np.ndarray], atol: float
) -> np.ndarray | None:
    """For each expected detection, the index of its match in `got`: of its label, its score
    within `atol`, each used once; pairs taken in order of their box difference, the closest
    first, so a tied neighbour's box is never taken for a detection's own. None where a
    detection is left without one (a label or a score that differs)."""
    boxes, scores, labels = (np.asarray(a) for a in expected)
    their_scores = np.asarray(got["scores"], dtype=np.float64)
    order = np.argsort(their_scores, kind="stable")
    ranked = their_scores[order]
    pairs: list[tuple[float, int, int]] = []
    for i in range(len(boxes)):
        low = np.searchsorted(ranked, float(scores[i]) - atol, side="left")
        high = np.searchsorted(ranked, float(scores[i]) + atol, side="right")
        near = order[low:high]
        near = near[got["labels"][near] == labels[i]]
        diffs = np.abs(got["boxes"][near].astype(np.float64) - boxes[i].astype(np.float64))
        widest = diffs.max(axis=1, initial=0.0).tolist()  # over a box's four corners
        pairs.extend((diff, i, j) for diff, j in zip(widest, near.tolist(), strict=True))
    partner = np.full(len(boxes), -1)
    taken: set[int] = set()
    for _, i, j in sorted(pairs):
        if partner[i] < 0 and j not in taken:
            partner[i] = j
            taken.add(j)
    return None if (partner < 0).any() else partner


def _max_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max(initial=0.0))


def infer(sess: Any, image: np.ndarray) -> dict[str, np.ndarray]:
    """One [1, 3, H, W] float32 image through an exported detector, outputs by name."""
    names = [o.name for o in sess.get_outputs()]
    if set(OUTPUTS) - set(names):
        raise UserError(f"the model's outputs are {names}, not a dlperf detector's {list(OUTPUTS)}")
    values = sess.run(list(OUTPUTS), {sess.get_inputs()[0].name: image.astype(np.float32)})
    return dict(zip(OUTPUTS, values, strict=True))


def scale_boxes(
    boxes: np.ndarray, input_hw: tuple[int, int], image_wh: tuple[int, int]
) -> np.ndarray:
    """Boxes in model-input pixels to the original image's pixels: the exact inverse of the
    stretch `run` gives an image (`runtime.to_array(stretch=True)`), as torchvision's
    `resize_boxes` undoes its transform's resize in fine-tuning and `detect eval`."""
    sx = image_wh[0] / input_hw[1]
    sy = image_wh[1] / input_hw[0]
    return np.asarray(boxes.astype(np.float64) * np.array([sx, sy, sx, sy]))


# An annotated copy is at least this many pixels on its shorter side: a label drawn on a
# 96-px image would cover the objects it names.
MIN_DRAWN_SIDE = 480
# ... and is never enlarged past this on its longer side: a 20000 x 1 image enlarged until its
# shorter side was 480 px was 9,600,000 px wide, and the OOM killer ended dlperf at 23 GB.
MAX_DRAWN_SIDE = 4096
FONT_PX = 16
PALETTE = ((230, 25, 75), (60, 180, 75), (0, 130, 200), (245, 130, 48), (145, 30, 180))


def drawn_scale(size: tuple[int, int]) -> int:
    """The whole factor an image is enlarged by before drawing (1 when it is big enough, or
    when its longer side leaves no room to enlarge it)."""
    wanted = math.ceil(MIN_DRAWN_SIDE / max(1, min(size)))
    return max(1, min(wanted, MAX_DRAWN_SIDE // max(1, max(size))))


def _label_box(
    box: list[float],
    label_wh: tuple[int, int],
    canvas_wh: tuple[int, int],
    taken: list[tuple[Any, ...]],
) -> tuple[int, int, int, int]:
    """Where a box's label goes, outside the box: above it, else below it when the place
    above holds an earlier label; moved left as far as needed to stay on the canvas."""
    (w, h), (width, _) = label_wh, canvas_wh
    x = max(0, min(round(box[0]), width - w))
    places = [
        (x, round(box[1]) - h, x + w, round(box[1])),
        (x, round(box[3]), x + w, round(box[3]) + h),
    ]
    free = [p for p in places if not any(_overlap(p, t) for t in taken)]
    return (free or places)[0]


def _overlap(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def draw(
    image: Image.Image, detections: list[dict[str, Any]], source: str = "image"
) -> Image.Image:
    """An annotated copy of the image: enlarged by a whole factor (`drawn_scale`, nearest
    neighbour: the pixels the detector saw, no invented detail) when small, set between a
    margin strip above and below, each detection's box drawn and its "label score" outside
    the box, so that no label covers the object it names. The image is decoded as the
    detector saw it (`image_modes.rgb`: a 16-bit grey one in its greys, not white); `source`
    names it in that decode's errors."""
    from PIL import Image, ImageDraw, ImageFont

    k = drawn_scale(image.size)
    photo = image_modes.rgb(image, source)
    photo = photo.resize((photo.width * k, photo.height * k), Image.Resampling.NEAREST)
    font = ImageFont.load_default(size=FONT_PX)
    line = max(2, min(photo.size) // 160)
    left, top, right, bottom = ImageDraw.Draw(photo).textbbox((0, 0), "Ag 0.99", font=font)
    # A label's height and the gap to its box: a box at an edge has room outside it.
    margin = round(bottom - top) + 4 + line
    out = Image.new("RGB", (photo.width, photo.height + 2 * margin), (255, 255, 255))
    out.paste(photo, (0, margin))
    pen = ImageDraw.Draw(out)
    taken: list[tuple[int, int, int, int]] = []
    for d in detections:
        colour = PALETTE[d["label_id"] % len(PALETTE)]
        x1, y1, x2, y2 = (v * k for v in d["box"])
        box = [x1, y1 + margin, x2, y2 + margin]
        pen.rectangle(tuple(box), outline=colour, width=line)
        text = f"{d['label']} {d['score']:.2f}"
        # The text's ink sits at an offset from the point it is drawn at: measure it at the
        # origin, so that the ink lands 2 px inside its background at any position.
        left, top, right, bottom = pen.textbbox((0, 0), text, font=font)
        w, h = round(right - left) + 4, round(bottom - top) + 4
        # One outline's width between a label and its box.
        outside = [box[0], box[1] - line, box[2], box[3] + line]
        place = _label_box(outside, (w, h), out.size, taken)
        taken.append(place)
        pen.rectangle(place, fill=colour)
        pen.text((place[0] + 2 - left, place[1] + 2 - top), text, fill=(255, 255, 255), font=font)
    return out


def _annotated(path: Path, out_dir: Path) -> Path:
    """Where `run` saves image `path`'s annotated copy."""
    return out_dir / f"{path.stem}.det.png"


def _refuse_one_name(images: list[Path], out_dir: Path) -> None:
    """Refuse, before any is written, images whose annotated copies share a name (one stem in
    two folders, or two extensions): each overwrote the one before, every one "saved". One
    file given twice is one copy."""
    by_target: dict[Path, dict[str, Path]] = {}
    for path in images:
        by_target.setdefault(_annotated(path, out_dir), {})[os.path.abspath(path)] = path
    for target, named in by_target.items():
        if len(named) > 1:
            given = [str(p) for p in named.values()]
            raise UserError(
                f"--out: {', '.join(given[:-1])} and {given[-1]} would each be saved as "
                f"{target}, each overwriting the one before",
                "give the images of one name in runs of their own, each its --out",
            )


def run(
    model_path: Path,
    images: list[Path],
    score_threshold: float = SCORE_THRESHOLD,
    out_dir: Path | None = None,
    threads: int | None = None,
) -> list[dict[str, Any]]:
    """Detect objects in each image with an exported detector; boxes in the image's own
    pixels; with `out_dir`, an annotated PNG per image."""
    if not 0 <= score_threshold <= 1:
        raise UserError(f"--score-threshold {score_threshold} is not in [0, 1]")
    if out_dir is not None:
        _refuse_one_name(images, out_dir)
    meta, sess = runtime.open_model(
        model_path, "detection", "a detector", "use dlperf infer", threads
    )
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for path in images:
        image_file(path)
        image = runtime.decode(path.read_bytes(), str(path))
        # Stretched, not cropped: the detector saw its training images whole.
        x = runtime.to_array(image, meta.preprocess, str(path), stretch=True)
        got = infer(sess, x[None])
        keep = got["scores"] >= score_threshold
        boxes = scale_boxes(got["boxes"][keep], meta.preprocess.size, image.size)
        detections = [
            {
                "label_id": int(label),
                "label": meta.labels[label] if 0 <= label < len(meta.labels) else str(int(label)),
                "score": float(score),
                "box": [round(float(v), 2) for v in box],
            }
            for box, score, label in zip(
                boxes, got["scores"][keep], got["labels"][keep], strict=True
            )
        ]
        result: dict[str, Any] = {
            "image": str(path),
            "width": image.size[0],
            "height": image.size[1],
            "detections": detections,
        }
        if out_dir is not None:
            target = _annotated(path, out_dir)
            draw(image, detections, str(path)).save(target)
            result["annotated"] = str(target)
        results.append(result)
    return results
