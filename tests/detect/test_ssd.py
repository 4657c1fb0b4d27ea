"""SSD detectors: ONNX export with parity, ONNX Runtime inference, annotation, fine-tuning."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from dlperf.config import DetectJob, RunConfig, TrainConfig, load_job
from dlperf.deploy import meta
from dlperf.detect import finetune, ssd, voc
from dlperf.errors import UserError
from dlperf.store import RunStore
from dlperf.system import pick_device
from tests.conftest import CliResult
from tests.deploy.test_server import block_detector, block_png

Cli = Callable[..., CliResult]
LABELS = ["__background__", "disc", "square"]
SIZE = 160  # the exported detector's input side (ssdlite320 at a smaller size it takes)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """One random-weight SSDlite320 export for the module, at SIZE (a quarter of its 320 x 320
    pixels: the export and each run through it cost a quarter as much)."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("det") / "det.onnx"
    det = ssd.build("ssdlite320_mobilenet_v3_large", labels=LABELS, size=SIZE)
    return path, ssd.export(det, path)


def test_export_checks_and_matches_pytorch(exported: tuple[Path, dict]) -> None:
    path, result = exported
    assert result["check"] is True and result["exporter"] == "torchscript"
    assert result["input"] == [1, 3, SIZE, SIZE] and result["num_classes"] == 3
    assert result["detections_torch"] == result["detections_onnx"] > 0
    assert result["labels_equal"] and result["parity"]
    assert result["max_abs_diff_boxes"] <= 1e-3 and result["max_abs_diff_scores"] <= 1e-3
    m = meta.load(path)
    assert (m.task, m.model, m.labels) == ("detection", "ssdlite320_mobilenet_v3_large", LABELS)
    assert m.preprocess.size == (SIZE, SIZE) and m.preprocess.mean == (0.0, 0.0, 0.0)
    assert m.preprocess.std == (1.0, 1.0, 1.0) and m.input_shape == (3, SIZE, SIZE)
    assert meta.sidecar(path).is_file()


def test_onnx_runtime_returns_three_named_outputs(exported: tuple[Path, dict]) -> None:
    from dlperf.deploy.runtime import session

    sess = session(exported[0], threads=1)
    assert [o.name for o in sess.get_outputs()] == ["boxes", "scores", "labels"]
    assert sess.get_inputs()[0].shape == [1, 3, SIZE, SIZE]
    image = np.random.default_rng(1).random((1, 3, SIZE, SIZE), dtype=np.float32)
    got = ssd.infer(sess, image)
    n = len(got["scores"])
    assert got["boxes"].shape == (n, 4) and got["labels"].shape == (n,)
    assert got["boxes"].dtype == np.float32 and got["scores"].dtype == np.float32
    assert got["labels"].dtype == np.int64
    assert n > 0 and set(got["labels"].tolist()) <= {1, 2}
    assert np.all(np.diff(got["scores"]) <= 0) or n == 1  # best first
    assert np.all(got["boxes"][:, :2] <= got["boxes"][:, 2:])
    assert got["boxes"].min() >= 0 and got["boxes"].max() <= SIZE


def test_run_scales_boxes_and_writes_annotated_pngs(
    exported: tuple[Path, dict], tmp_path: Path
) -> None:
    image_path = tmp_path / "wide.jpg"
    rng = np.random.default_rng(2)
    Image.fromarray(rng.integers(0, 255, (120, 200, 3), dtype=np.uint8)).save(image_path)
    results = ssd.run(exported[0], [image_path], 0.0, tmp_path / "out", threads=1)
    (r,) = results
    assert (r["width"], r["height"]) == (200, 120)
    boxes = np.asarray([d["box"] for d in r["detections"]])
    assert len(boxes) > 0
    assert boxes[:, [0, 2]].max() <= 200.01 and boxes[:, [1, 3]].max() <= 120.01
    assert {d["label"] for d in r["detections"]} <= {"disc", "square"}
    with Image.open(r["annotated"]) as annotated:
        assert annotated.format == "PNG" and annotated.width == 200 * 4 > 480
        drawn = np.asarray(annotated.convert("RGB"))
    with Image.open(image_path) as original:
        plain = np.asarray(ssd.draw(original, []))
    assert drawn.shape == plain.shape and (drawn != plain).any()  # boxes were drawn
    # Nothing above the threshold: no boxes, the image left as it was.
    (none,) = ssd.run(exported[0], [image_path], 1.0, tmp_path / "out2", threads=1)
    assert none["detections"] == []


def _drawn(
    size: tuple[int, int], detections: list[dict]
) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(annotated, annotated with no detections, enlargement, top margin) of a black image."""
    image = Image.new("RGB", size)
    empty = np.asarray(ssd.draw(image, []), dtype=np.int16)
    scale = empty.shape[1] // size[0]
    margin = int(np.argmax(empty.max(axis=(1, 2)) == 0))  # the first black row
    return np.asarray(ssd.draw(image, detections), dtype=np.int16), empty, scale, margin


def _changed(drawn: np.ndarray, empty: np.ndarray) -> np.ndarray:
    return (drawn != empty).any(axis=-1)


def _inside(mask: np.ndarray, box: list[float], scale: int, margin: int, inset: int) -> np.ndarray:
    """The box's pixels in the drawing (PIL's rectangles include their far corner)."""
    x1, y1, x2, y2 = (int(v * scale) for v in box)
    return mask[y1 + margin + inset : y2 + margin + 1 - inset, x1 + inset : x2 + 1 - inset]


def test_a_small_image_is_drawn_enlarged_with_labels_outside_the_boxes() -> None:
    # A 96-px image: labels at the boxes' corners covered the objects they named.
    boxes = [[4.0, 68.0, 27.0, 91.0], [34.0, 44.0, 70.0, 80.0], [0.0, 0.0, 29.0, 34.0]]
    detections = [
        {"label_id": i, "label": name, "score": 0.87, "box": box}
        for i, (name, box) in enumerate(zip(["disc", "disc", "square"], boxes, strict=True))
    ]
    drawn, empty, scale, margin = _drawn((96, 96), detections)
    assert scale == ssd.drawn_scale((96, 96)) == 5 and drawn.shape[1] == 480
    changed = _changed(drawn, empty)
    line = 3  # the outline, inside each box
    for box in boxes:
        assert not _inside(changed, box, scale, margin, line).any()  # the object is untouched
        assert _inside(changed, box, scale, margin, 0).any()  # its outline is drawn
    outside = changed.copy()
    for box in boxes:
        _inside(outside, box, scale, margin, 0)[:] = False
    assert outside.sum() > 3 * 40 * 12  # three labels of readable size, outside the boxes


@pytest.mark.parametrize(
    "box", [[40.0, 0.0, 64.0, 20.0], [44.0, 28.0, 64.0, 40.0], [0.0, 0.0, 64.0, 40.0]]
)
def test_labels_stay_whole_at_the_edges_of_small_images(box: list[float]) -> None:
    def label_pixels(size: tuple[int, int], box: list[float]) -> int:
        detection = {"label_id": 2, "label": "square", "score": 0.93, "box": box}
        drawn, _, scale, margin = _drawn(size, [detection])
        # The label's background: its colour (the box's) outside the box.
        coloured = (drawn == ssd.PALETTE[2]).all(axis=-1)
        _inside(coloured, box, scale, margin, 0)[:] = False
        return int(coloured.sum())

    whole = label_pixels((200, 200), [80.0, 80.0, 120.0, 120.0])
    assert whole > 0
    # In a 64 x 40 image, a label at a box's edge would run off the canvas or into the box.
    assert label_pixels((64, 40), box) == whole


def test_scale_boxes_maps_input_pixels_to_the_image() -> None:
    boxes = np.asarray([[0.0, 0.0, 320.0, 320.0], [32.0, 160.0, 64.0, 240.0]])
    scaled = ssd.scale_boxes(boxes, (320, 320), (640, 160))
    assert scaled.tolist() == [[0.0, 0.0, 640.0, 160.0], [64.0, 80.0, 128.0, 120.0]]


def test_run_stretches_the_image_as_training_does_and_maps_boxes_back_onto_it(
    tmp_path: Path,
) -> None:
    """`dlperf detect run` must prepare an image as fine-tuning and `detect eval` do (the
    whole image stretched to the input, torchvision's fixed_size) for scale_boxes, the
    inverse of that stretch, to be right. It centre-cropped: a white block at x 40-50 of an
    80 x 10 image, through a 40 x 20 detector that boxes the white, came back at x 40-80."""
    model = block_detector(tmp_path / "block.onnx")
    image_path = tmp_path / "wide.png"
    image_path.write_bytes(block_png())
    (r,) = ssd.run(model, [image_path], 0.5, threads=1)
    assert (r["width"], r["height"]) == (80, 10)
    assert [d["box"] for d in r["detections"]] == [[40.0, 0.0, 50.0, 10.0]]
    assert r["detections"][0]["label"] == "block"


def test_run_gives_the_boxes_pytorch_gives_in_evaluation(
    exported: tuple[Path, dict], tmp_path: Path
) -> None:
    """A non-square image through `detect run` (ONNX, boxes scaled back by scale_boxes) and
    through the PyTorch detector as `detect eval` runs it (the whole image, resized and
    boxes mapped back by torchvision's transform): the same detections."""
    torch.manual_seed(0)  # the exported fixture's detector, built again
    det = ssd.build("ssdlite320_mobilenet_v3_large", labels=LABELS, size=SIZE)
    pixels = np.random.default_rng(2).integers(0, 255, (120, 200, 3), dtype=np.uint8)
    image_path = tmp_path / "wide.png"
    Image.fromarray(pixels).save(image_path)
    (r,) = ssd.run(exported[0], [image_path], 0.0, threads=1)
    with torch.no_grad():
        expected = det.model([torch.from_numpy(pixels).permute(2, 0, 1).float() / 255])[0]
    top = 10  # the best; far down the list, near-tied scores may swap between runtimes
    assert len(r["detections"]) == len(expected["boxes"]) >= top
    got = r["detections"][:top]
    assert [d["label_id"] for d in got] == expected["labels"][:top].tolist()
    np.testing.assert_allclose([d["score"] for d in got], expected["scores"][:top], atol=1e-4)
    # boxes are rounded to 0.01 px
    np.testing.assert_allclose([d["box"] for d in got], expected["boxes"][:top], atol=0.01)


def test_run_cli_json_and_errors(cli: Cli, exported: tuple[Path, dict], tmp_path: Path) -> None:
    image_path = tmp_path / "a.png"
    Image.new("RGB", (64, 48), (120, 30, 200)).save(image_path)
    r = cli("detect", "run", str(exported[0]), str(image_path), "--score-threshold", "0",
            "--threads", "1", "--out", str(tmp_path / "drawn"), "--json")  # fmt: skip
    assert r.code == 0, r.err
    (doc,) = json.loads(r.out)
    assert doc["width"] == 64 and doc["detections"][0]["label"] in LABELS
    assert doc["annotated"] == str(tmp_path / "drawn" / "a.det.png")
    with Image.open(doc["annotated"]) as drawn:
        assert drawn.width == 64 * 10  # its 48-px side enlarged to 480 px
    r = cli("detect", "run", str(exported[0]), str(tmp_path / "nope.jpg"))
    assert (r.code, r.err) == (2, f"error: no image file {tmp_path / 'nope.jpg'}\n")
    (tmp_path / "junk.png").write_bytes(b"not an image")
    r = cli("detect", "run", str(exported[0]), str(tmp_path / "junk.png"))
    assert r.code == 2 and r.err.startswith("error: ") and "is not a readable image" in r.err


def test_export_cli_bad_input_is_one_line(cli: Cli, tmp_path: Path) -> None:
    r = cli("detect", "export", "--model", "ssd_mobilenet", "--out", str(tmp_path / "x.onnx"))
    assert r.code == 2
    assert r.err == "error: unknown detector 'ssd_mobilenet' (did you mean ssd300_mobilenet_v1?)\n"
    r = cli("detect", "export", "--size", "100", "--out", str(tmp_path / "x.onnx"))
    assert r.err == "error: input size 100 not supported (use a multiple of 32 in 96..640)\n"
    r = cli("detect", "export", "--model", "ssd300_vgg16", "--size", "320", "--out", "x.onnx")
    assert r.err == "error: --size 320: ssd300_vgg16 runs at its native 300 x 300 only\n"
    r = cli("detect", "export", "--pretrained", "--num-classes", "3", "--out", "x.onnx")
    assert r.err == (
        "error: --pretrained gives torchvision's COCO detector with 91 classes, not 3 "
        "(fine-tune it for other classes)\n"
    )
    (tmp_path / "w.pt").write_text("garbage")
    r = cli("detect", "export", "--weights", str(tmp_path / "w.pt"), "--out", "x.onnx")
    assert r.code == 2 and r.err.startswith(f"error: {tmp_path / 'w.pt'} is not a PyTorch")
    assert r.err.count("\n") == 1


def test_checkpoint_round_trip_and_mismatch(tmp_path: Path) -> None:
    # One thread, as the module's other builders: building calibrates the random weights on
    # 8 images, and two OpenMP threads on a shared core took 5x as long (30 s, not 6).
    torch.set_num_threads(1)
    det = ssd.build("ssdlite320_mobilenet_v3_large", labels=LABELS, size=96)
    ssd.save_checkpoint(det, tmp_path / "d.pt")
    again = ssd.build("ssdlite320_mobilenet_v3_large", weights=tmp_path / "d.pt")
    assert (again.size, again.labels) == (96, LABELS)
    saved, loaded = det.model.state_dict(), again.model.state_dict()
    assert saved.keys() == loaded.keys()
    assert all(torch.equal(saved[k], loaded[k]) for k in saved)
    torch.save(det.model.state_dict(), tmp_path / "plain.pt")
    with pytest.raises(UserError, match="does not fit ssdlite320_mobilenet_v3_large with 5"):
        ssd.build("ssdlite320_mobilenet_v3_large", num_classes=5, weights=tmp_path / "plain.pt")
    with pytest.raises(UserError, match="holds a ssdlite320_mobilenet_v3_large detector"):
        ssd.build("ssd300_vgg16", weights=tmp_path / "d.pt")


def test_one_finetune_step_changes_the_weights(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    voc.make_shapes(tmp_path, images=3, size=96, seed=1)
    annotations = voc.load_split(tmp_path, "train")
    assert len(annotations) == 2
    det = ssd.build("ssdlite320_mobilenet_v3_large", labels=LABELS, size=96)
    data = voc.VocDataset(tmp_path, annotations, LABELS)
    before = {k: v.clone() for k, v in det.model.state_dict().items()}
    result = finetune.train(det, data, *_recipe(epochs=1, batch_size=2), max_steps=1)
    assert result.steps == 1 and len(result.losses) == 1 and np.isfinite(result.losses[0])
    after = det.model.state_dict()
    changed = [
        k for k in before if before[k].is_floating_point() and not torch.equal(before[k], after[k])
    ]
    assert any(k.startswith("head.") for k in changed)
    assert any(k.startswith("backbone.") for k in changed)
    assert not det.model.training  # left ready for evaluation
    ap = finetune.measure_ap(det, data, batch=2)
    assert set(ap["ap"]) == {"disc", "square"} and ap["method"] == "area"


def test_finetune_trains_at_the_configured_precision_and_times_past_the_warm_up(
    tmp_path: Path,
) -> None:
    """run.precision reaches the step (bf16 autocast on the CPU); images/s leaves out the
    warm-up step, so a run of that step alone has no rate."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    voc.make_shapes(tmp_path, images=6, size=96, seed=1)
    data = voc.VocDataset(tmp_path, voc.load_split(tmp_path, "train"), LABELS)
    assert len(data) == 4  # two steps of two images
    det = ssd.build("ssdlite320_mobilenet_v3_large", labels=LABELS, size=96)
    train, run = _recipe(epochs=1, batch_size=2)
    run = run.model_copy(update={"precision": "bf16"})
    calls: list[str] = []
    real = torch.autocast.__enter__

    def entered(self: torch.autocast) -> None:
        calls.append(f"{self.fast_dtype}:{self._enabled}")
        real(self)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(torch.autocast, "__enter__", entered)
        result = finetune.train(det, data, train, run, max_steps=2)
    assert calls == ["torch.bfloat16:True"] * 2
    assert result.steps == 2 and len(result.losses) == 2 and np.isfinite(result.losses).all()
    assert result.images_per_s > 0
    one = finetune.train(det, data, *_recipe(epochs=1, batch_size=2), max_steps=1)
    assert math.isnan(one.images_per_s) and one.train_s > 0


def _recipe(**train: int) -> tuple[TrainConfig, RunConfig]:
    """Detection's [train] and [run], `train`'s keys given as flags are."""
    exp = load_job(DetectJob, None, [], train=train).experiment
    return exp.train, exp.run


def test_finetune_cli_stores_the_run(cli: Cli, store: RunStore, tmp_path: Path) -> None:
    voc.make_shapes(tmp_path / "shapes", images=4, size=96, seed=2)
    out = str(tmp_path / "d.pt")
    config = tmp_path / "det.toml"
    config.write_text("[detect]\nsize = 96\n[train]\nepochs = 3\nbatch_size = 2\n"
                      "weight_decay = 0.0\ngrad_clip = 5.0\n")  # fmt: skip
    # defaults < preset < file < --set < flags: 3 training images, batch 3, one epoch: one step
    r = cli("detect", "finetune", str(tmp_path / "shapes"), "--config", str(config),
            "--set", "train.batch_size=3", "--set", "train.epochs=2", "--epochs", "1",
            "--threads", "1", "--out", out, "--json")  # fmt: skip
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    run = store.get_run(doc["run_id"])
    assert (run.kind, run.status) == ("detect", "finished")
    assert run.config["model"] == {"name": "ssdlite320_mobilenet_v3_large"}
    # the keys [detect] held before [train] and [run] did, resolved, as readers know them
    assert run.config["detect"] == {
        "model": "ssdlite320_mobilenet_v3_large",
        "size": 96,
        "train_split": "train",
        "val_split": "val",
        "ap_method": "area",
        "epochs": 1,
        "batch": 3,
        "optimizer": "adamw",
        "lr": 0.003,
        "momentum": 0.9,
        "weight_decay": 0.0,
        "seed": 0,
        "threads": 1,
        "precision": "fp32",
        "nesterov": False,
        "grad_clip": 5.0,
        "schedule": {
            "kind": "cosine", "milestones": [], "gamma": 0.1, "warmup_epochs": 0.0, "min_lr": 0.0
        },
    }  # fmt: skip
    assert set(run.summary["ap_before"]) == set(run.summary["ap_after"]) == {"disc", "square"}
    assert {"map_before", "map_after"} <= set(run.summary) and doc["steps"] == 1
    losses = store.metrics(doc["run_id"], "train/loss")
    assert len(losses) == 1
    assert [a["kind"] for a in store.artifacts(doc["run_id"])] == ["checkpoint"]
    assert ssd.build("ssdlite320_mobilenet_v3_large", weights=tmp_path / "d.pt").size == 96


def test_finetune_cli_refuses_old_keys_and_what_detection_ignores(
    cli: Cli, store: RunStore, tmp_path: Path
) -> None:
    """A [detect] recipe key of an older file, or a [train]/[run] key detection cannot
    honour, is one line naming the key, before any data is read or run stored."""
    config = tmp_path / "det.toml"
    config.write_text("[detect]\nepochs = 3\n")
    r = cli("detect", "finetune", str(tmp_path / "none"), "--config", str(config))
    assert r.code == 2 and r.err.strip().splitlines() == [
        f"error: {config}: 'detect.epochs' is 'train.epochs' now (give it as train.epochs)"
    ], r.err
    r = cli("detect", "finetune", str(tmp_path / "none"), "--set", "run.compile=true")
    assert r.code == 2 and r.err.strip().splitlines() == [
        "error: config with --set: run.compile: detection cannot honour it (leave it out, or "
        "give it its default)"
    ], r.err
    r = cli("detect", "eval", str(tmp_path / "none"), "--batch", "0", "--pretrained")
    assert r.code == 2 and "--batch: train.batch_size: must be at least 1 (got 0)" in r.err
    assert store.list_runs() == []


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shapes set, the same set with VOC's names (square: aeroplane, disc: horse), and one
    random-weight detector saved twice: labelled square at id 2, and COCO-style airplane."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("eval")
    voc.make_shapes(root / "shapes", images=6, size=96)
    shutil.copytree(root / "shapes", root / "renamed")
    for xml in (root / "renamed" / "Annotations").glob("*.xml"):
        text = xml.read_text().replace(">square<", ">aeroplane<").replace(">disc<", ">horse<")
        xml.write_text(text)
    torch.manual_seed(0)
    det = ssd.build("ssdlite320_mobilenet_v3_large", labels=LABELS, size=96)
    ssd.save_checkpoint(det, root / "shapes.pt")
    det.labels = ["__background__", "person", "airplane"]
    ssd.save_checkpoint(det, root / "coco.pt")
    return root


def test_eval_cli_stores_the_run(cli: Cli, store: RunStore, checkpoints: Path) -> None:
    weights = checkpoints / "shapes.pt"
    saved = weights.read_bytes()
    r = cli("detect", "eval", str(checkpoints / "shapes"), "--weights", str(weights),
            "--batch", "2", "--threads", "1", "--json")  # fmt: skip
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    # The numbers finetune measures before training: the same detector, split and batch.
    root = checkpoints / "shapes"
    data = voc.VocDataset(root, voc.load_split(root, "val"), LABELS)
    det = ssd.build("ssdlite320_mobilenet_v3_large", weights=weights)
    expected = finetune.measure_ap(det, data, batch=2, device=pick_device("auto"))
    assert doc["ap"] == pytest.approx(expected["ap"]) and doc["map"] == pytest.approx(
        expected["map"]
    )
    assert (doc["split"], doc["images"], doc["renamed"], doc["unknown"]) == ("val", 2, {}, [])
    run = store.get_run(doc["run_id"])
    assert (run.kind, run.status) == ("detect", "finished")
    assert run.config["detect"] == {"model": "ssdlite320_mobilenet_v3_large", "size": 96,
        "batch": 2, "val_split": "val", "ap_method": "area", "threads": 1}  # fmt: skip
    assert run.config["weights"] == str(weights) and run.summary["ap"] == doc["ap"]
    assert store.artifacts(doc["run_id"]) == [] and weights.read_bytes() == saved  # no training


def test_eval_matches_coco_names_to_voc(cli: Cli, checkpoints: Path) -> None:
    args = ("--threads", "1", "--json")
    r = cli("detect", "eval", str(checkpoints / "shapes"), "--weights",
            str(checkpoints / "shapes.pt"), *args)  # fmt: skip
    shapes = json.loads(r.out)
    r = cli("detect", "eval", str(checkpoints / "renamed"), "--weights",
            str(checkpoints / "coco.pt"), *args)  # fmt: skip
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["renamed"] == {"aeroplane": "airplane"} and doc["unknown"] == ["horse"]
    # COCO's airplane is label id 2, which the shapes detector calls square: the same boxes.
    assert doc["ap"]["aeroplane"] == shapes["ap"]["square"] > 0
    assert doc["ap"]["horse"] == 0.0 and doc["map"] == pytest.approx(doc["ap"]["aeroplane"] / 2)
    r = cli("detect", "eval", str(checkpoints / "renamed"), "--weights",
            str(checkpoints / "coco.pt"), "--threads", "1")  # fmt: skip
    assert r.code == 0, r.err
    assert "warning: the detector has no class 'horse': its AP is 0\n" in r.err
    table = [line.split() for line in r.out.splitlines()]
    assert table[3][:3] == ["aeroplane", "│", "airplane"] and table[4][:3] == ["horse", "│", "-"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "error: detect eval tests trained weights (give --weights FILE, a `dlperf"),
        (["--weights", "shapes.pt", "--pretrained"], "error: give --weights FILE or --pretr"),
        (["--weights", "coco.pt"], "error: the detector's classes (person, airplane) include"
            " none of split val's (disc, square) (test weights trained on these classes)"),
        (["--weights", "shapes.pt", "--val-split", "test"], "error: no split file"),
        (["--weights", "shapes.pt", "--ap", "best"], "error: --ap: detect.ap_method"),
    ],
)  # fmt: skip
def test_eval_bad_input_is_one_line(
    cli: Cli, checkpoints: Path, args: list[str], message: str
) -> None:
    args = [str(checkpoints / a) if a.endswith(".pt") else a for a in args]
    r = cli("detect", "eval", str(checkpoints / "shapes"), *args)
    assert r.code == 2
    assert r.err.startswith(message) and r.err.count("\n") == 1


@pytest.mark.parametrize("command", ["export", "run", "make-shapes", "finetune", "eval"])
def test_help_ends_with_an_example(cli: Cli, command: str) -> None:
    r = cli("detect", command, "--help")
    assert r.code == 0 and f"Example: dlperf detect {command}" in r.out


# --- qfgaohao/pytorch-ssd's mb1-ssd ------------------------------------------------------


class PytorchSsdMb1(torch.nn.Module):
    """A reference written from qfgaohao/pytorch-ssd's `create_mobilenetv1_ssd` (vision/ssd/
    mobilenetv1_ssd.py, vision/nn/mobilenet.py, vision/ssd/ssd.py): the same modules under
    the same attribute names, so its state_dict has the checkpoint's keys and shapes, and
    the same forward (feature maps after base_net[:12], base_net[12:] and each extra; each
    header's output permuted to (N, H, W, C) and flattened to (N, boxes, classes or 4))."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        nn = torch.nn

        def conv_bn(inp: int, out: int, stride: int) -> nn.Sequential:
            return nn.Sequential(
                nn.Conv2d(inp, out, 3, stride, 1, bias=False), nn.BatchNorm2d(out), nn.ReLU()
            )

        def conv_dw(inp: int, out: int, stride: int) -> nn.Sequential:
            return nn.Sequential(
                nn.Conv2d(inp, inp, 3, stride, 1, groups=inp, bias=False),
                nn.BatchNorm2d(inp),
                nn.ReLU(),
                nn.Conv2d(inp, out, 1, 1, 0, bias=False),
                nn.BatchNorm2d(out),
                nn.ReLU(),
            )

        self.num_classes = num_classes
        self.base_net = nn.Sequential(
            conv_bn(3, 32, 2), conv_dw(32, 64, 1), conv_dw(64, 128, 2), conv_dw(128, 128, 1),
            conv_dw(128, 256, 2), conv_dw(256, 256, 1), conv_dw(256, 512, 2),
            *[conv_dw(512, 512, 1) for _ in range(5)], conv_dw(512, 1024, 2),
            conv_dw(1024, 1024, 1),
        )  # fmt: skip

        def extra(inp: int, mid: int, out: int) -> nn.Sequential:
            return nn.Sequential(nn.Conv2d(inp, mid, kernel_size=1), nn.ReLU(),
                nn.Conv2d(mid, out, kernel_size=3, stride=2, padding=1), nn.ReLU())  # fmt: skip

        self.extras = nn.ModuleList(
            [extra(1024, 256, 512), extra(512, 128, 256), extra(256, 128, 256),
             extra(256, 128, 256)]
        )  # fmt: skip
        channels = [512, 1024, 512, 256, 256, 256]
        self.classification_headers = nn.ModuleList(
            nn.Conv2d(c, 6 * num_classes, kernel_size=3, padding=1) for c in channels
        )
        self.regression_headers = nn.ModuleList(
            nn.Conv2d(c, 6 * 4, kernel_size=3, padding=1) for c in channels
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        sources = []
        for layer in self.base_net[:12]:
            x = layer(x)
        sources.append(x)
        for layer in self.base_net[12:]:
            x = layer(x)
        sources.append(x)
        for layer in self.extras:
            x = layer(x)
            sources.append(x)
        confidences, locations = [], []
        for i, y in enumerate(sources):
            c = self.classification_headers[i](y).permute(0, 2, 3, 1).contiguous()
            confidences.append(c.view(c.size(0), -1, self.num_classes))
            loc = self.regression_headers[i](y).permute(0, 2, 3, 1).contiguous()
            locations.append(loc.view(loc.size(0), -1, 4))
        return torch.cat(confidences, 1), torch.cat(locations, 1)


def pytorch_ssd_priors() -> torch.Tensor:
    """generate_ssd_priors of vision/ssd/config/mobilenetv1_ssd_config.py: (cx, cy, w, h)
    relative to the 300-px image, per location the min box, the sqrt(min max) box, then
    for each aspect ratio r the min box stretched by sqrt(r) one way and the other."""
    specs = [(19, 16, 60, 105), (10, 32, 105, 150), (5, 64, 150, 195), (3, 100, 195, 240),
             (2, 150, 240, 285), (1, 300, 285, 330)]  # fmt: skip
    priors = []
    for size, shrinkage, small, big in specs:
        scale = 300 / shrinkage
        for j in range(size):
            for i in range(size):
                cx, cy = (i + 0.5) / scale, (j + 0.5) / scale
                s, b = small / 300, math.sqrt(big * small) / 300
                priors += [[cx, cy, s, s], [cx, cy, b, b]]
                for ratio in (2, 3):
                    r = math.sqrt(ratio)
                    priors += [[cx, cy, s * r, s / r], [cx, cy, s / r, s * r]]
    return torch.tensor(priors).clamp(0.0, 1.0)


def pytorch_ssd_boxes(locations: torch.Tensor, priors: torch.Tensor) -> torch.Tensor:
    """convert_locations_to_boxes (center variance 0.1, size variance 0.2), then corners."""
    centers = locations[..., :2] * 0.1 * priors[..., 2:] + priors[..., :2]
    sizes = torch.exp(locations[..., 2:] * 0.2) * priors[..., 2:]
    return torch.cat([centers - sizes / 2, centers + sizes / 2], -1)


def pytorch_ssd_checkpoint(path: Path, num_classes: int, seed: int = 0) -> PytorchSsdMb1:
    """A reference model with random weights and BatchNorm statistics, saved as pytorch-ssd
    saves one (`torch.save(net.state_dict())`)."""
    torch.manual_seed(seed)
    ref = PytorchSsdMb1(num_classes)
    with torch.no_grad():
        for m in ref.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.1)
    torch.save(ref.state_dict(), path)
    return ref.eval()


def test_a_pytorch_ssd_mb1_checkpoint_maps_exactly(tmp_path: Path) -> None:
    from torchvision.models.detection.image_list import ImageList

    torch.set_num_threads(1)
    ref = pytorch_ssd_checkpoint(tmp_path / "mb1-ssd.pth", 21)
    det = ssd.build("ssd300_mobilenet_v1", weights=tmp_path / "mb1-ssd.pth")
    assert det.size == 300 and len(det.labels) == 21
    assert det.labels[1:4] == ["aeroplane", "bicycle", "bird"] and det.labels[-1] == "tvmonitor"
    # Every tensor of the checkpoint, and nothing else, lands in the detector unchanged.
    mapped, theirs = det.model.state_dict(), ref.state_dict()
    # stem: a convolution and a BatchNorm (5 tensors); 13 blocks of two of each; 4 extras of
    # two convolutions with bias; 12 headers
    assert len(mapped) == len(theirs) == 6 + 13 * 12 + 4 * 4 + 12 * 2
    prefixes = {"base_net.": "backbone.base_net.", "extras.": "backbone.extras.",
                "classification_headers.": "head.classification_head.module_list.",
                "regression_headers.": "head.regression_head.module_list."}  # fmt: skip
    for key, value in theirs.items():
        prefix = next(p for p in prefixes if key.startswith(p))
        assert torch.equal(mapped[prefixes[prefix] + key.removeprefix(prefix)], value), key
    # The input: 8-bit pixels p become (p - 127) / 128 at 300 x 300.
    pixels = torch.randint(0, 256, (3, 300, 300), generator=torch.Generator().manual_seed(1))
    theirs_in = (pixels.float() - 127) / 128
    ours_in = det.model.transform([pixels.float() / 255])[0].tensors
    torch.testing.assert_close(ours_in[0], theirs_in, rtol=0, atol=1e-5)
    # The network: the same class scores and box offsets, bit for bit, in the same order.
    with torch.no_grad():
        maps = list(det.model.backbone(theirs_in[None]).values())
        head = det.model.head(maps)
        confidences, locations = ref(theirs_in[None])
    assert [tuple(m.shape[1:]) for m in maps] == [(512, 19, 19), (1024, 10, 10), (512, 5, 5),
        (256, 3, 3), (256, 2, 2), (256, 1, 1)]  # fmt: skip
    assert torch.equal(head["cls_logits"], confidences)
    assert torch.equal(head["bbox_regression"], locations)
    # The default boxes and the decoding (variances 0.1 and 0.2), in pixels.
    priors = pytorch_ssd_priors()
    anchors = det.model.anchor_generator(ImageList(theirs_in[None], [(300, 300)]), maps)[0]
    assert anchors.shape == (3000, 4)
    corners = torch.cat([priors[:, :2] - priors[:, 2:] / 2, priors[:, :2] + priors[:, 2:] / 2], 1)
    torch.testing.assert_close(anchors, corners * 300, rtol=0, atol=1e-4)
    decoded = det.model.box_coder.decode_single(head["bbox_regression"][0], anchors)
    expected = pytorch_ssd_boxes(locations[0], priors) * 300
    torch.testing.assert_close(decoded, expected, rtol=1e-5, atol=1e-3)


def test_a_pytorch_ssd_checkpoint_without_batchnorm_counters_loads(tmp_path: Path) -> None:
    # PyTorch before 0.4.1 saved no num_batches_tracked: the same weights, the counters at 0.
    pytorch_ssd_checkpoint(tmp_path / "new.pth", 3)
    state = torch.load(tmp_path / "new.pth")
    torch.save({k: v for k, v in state.items() if "num_batches" not in k}, tmp_path / "old.pth")
    new = ssd.build("ssd300_mobilenet_v1", weights=tmp_path / "new.pth").model.state_dict()
    old = ssd.build("ssd300_mobilenet_v1", weights=tmp_path / "old.pth").model.state_dict()
    assert new.keys() == old.keys() and all(torch.equal(new[k], old[k]) for k in new)


def test_eval_tests_a_pytorch_ssd_checkpoint_on_a_voc_directory(
    cli: Cli, store: RunStore, tmp_path: Path
) -> None:
    # The val split's two images hold discs and squares: the detector's classes, by name.
    voc.make_shapes(tmp_path / "shapes", images=6, size=96, seed=3)
    pytorch_ssd_checkpoint(tmp_path / "mb1.pth", 3)
    r = cli("detect", "eval", str(tmp_path / "shapes"), "--model", "ssd300_mobilenet_v1",
            "--weights", str(tmp_path / "mb1.pth"), "--ap", "11point", "--threads", "1",
            "--json")  # fmt: skip
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert set(doc["ap"]) == {"disc", "square"} and doc["images"] == 2
    assert doc["ap_method"] == "11point" and doc["unknown"] == []
    run = store.get_run(doc["run_id"])
    assert run.config["detect"]["model"] == "ssd300_mobilenet_v1"
    assert run.config["detect"]["size"] == 300
    # The same figures from the detector and the AP code directly.
    root = tmp_path / "shapes"
    data = voc.VocDataset(root, voc.load_split(root, "val"), LABELS)
    det = ssd.build("ssd300_mobilenet_v1", weights=tmp_path / "mb1.pth", fallback_labels=LABELS)
    expected = finetune.measure_ap(det, data, batch=16, method="11point")
    assert doc["ap"] == pytest.approx(expected["ap"])


def test_pytorch_ssd_bad_input_is_one_line(cli: Cli, tmp_path: Path) -> None:
    pytorch_ssd_checkpoint(tmp_path / "mb1.pth", 21)
    r = cli("detect", "export", "--weights", str(tmp_path / "mb1.pth"), "--out", "x.onnx")
    assert r.code == 2 and r.err == (
        f"error: {tmp_path / 'mb1.pth'} is a qfgaohao/pytorch-ssd mb1-ssd checkpoint, not "
        "ssdlite320_mobilenet_v3_large (use --model ssd300_mobilenet_v1)\n"
    )
    r = cli("detect", "export", "--model", "ssd300_mobilenet_v1", "--pretrained", "--out", "x")
    assert r.code == 2 and r.err == (
        "error: torchvision has no weights for ssd300_mobilenet_v1 (give --weights with "
        "qfgaohao/pytorch-ssd's mb1-ssd checkpoint)\n"
    )
    r = cli("detect", "export", "--model", "ssd300_mobilenet_v1", "--size", "320", "--out", "x")
    assert r.err == "error: --size 320: ssd300_mobilenet_v1 runs at its native 300 x 300 only\n"
