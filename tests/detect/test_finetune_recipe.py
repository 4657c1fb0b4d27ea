"""The detection recipe's defaults wired together: make-shapes' set, the input side taken from
its images, AdamW reaching the engine's step, and `detect run` drawing confident boxes only.
The recipe's 5-minute result is measured in docs/course.md, not here."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from dlperf.config import DetectJob, load_job
from dlperf.detect import finetune, ssd, voc
from dlperf.engine.loop import Diverged
from dlperf.store import RunStore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]
LABELS = ["__background__", "disc", "square"]
SSDLITE = "ssdlite320_mobilenet_v3_large"


def _annotation(width: int, height: int) -> voc.VocAnnotation:
    return voc.VocAnnotation("x", "x.jpg", width, height, [])


def test_the_input_side_follows_the_images_up_to_the_models() -> None:
    assert finetune.default_size(SSDLITE, [_annotation(96, 96)]) == 96
    assert finetune.default_size(SSDLITE, [_annotation(64, 64)]) == 96
    assert finetune.default_size(SSDLITE, [_annotation(96, 96), _annotation(161, 100)]) == 192
    assert finetune.default_size(SSDLITE, [_annotation(500, 375)]) == 320  # VOC's
    assert finetune.default_size("ssd300_vgg16", [_annotation(96, 96)]) == 300


def test_the_default_recipe_steps_adamw_on_make_shapes_images(
    cli: Cli, store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.set_num_threads(1)
    r = cli("detect", "make-shapes", str(tmp_path / "shapes"), "--images", "5", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["size"] == 96
    train = load_job(DetectJob, None, []).experiment.train
    assert (train.optimizer, train.lr, train.schedule.kind) == ("adamw", 0.003, "cosine")
    steps: list[float] = []
    real = torch.optim.AdamW.step

    def step(self: torch.optim.AdamW, *args: Any, **kwargs: Any) -> Any:
        steps.append(self.param_groups[0]["lr"])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", step)
    # 4 training images, batch 2, one epoch: two AdamW steps at the default size
    r = cli("detect", "finetune", str(tmp_path / "shapes"), "--epochs", "1", "--batch", "2",
            "--threads", "1", "--out", str(tmp_path / "d.pt"), "--json")  # fmt: skip
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["steps"] == 2 and steps[0] == pytest.approx(0.003)
    assert len(steps) == 2 and steps[1] < steps[0]  # the cosine decays it
    config = store.get_run(doc["run_id"]).config["detect"]
    assert (config["size"], config["optimizer"]) == (96, "adamw")
    assert ssd.build(SSDLITE, weights=tmp_path / "d.pt").size == 96


def test_losses_reach_the_store_as_the_loop_logs_them(
    store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that stops (here its loss turns NaN at the second step) keeps the losses logged
    before: they are stored as the loop flushes them, not after training. Only train/loss
    is stored, as detection always has."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    voc.make_shapes(tmp_path, images=6, size=96, seed=1)
    data = voc.VocDataset(tmp_path, voc.load_split(tmp_path, "train"), LABELS)
    det = ssd.build(SSDLITE, labels=LABELS, size=96)
    exp = load_job(DetectJob, None, ["run.log_every=1"], train={"batch_size": 2}).experiment
    real, calls = finetune._summed_losses, []

    def poisoned(call: Callable[[list[Any]], dict[str, torch.Tensor]], targets: list[Any]) -> Any:
        calls.append(targets)
        return real(call, targets) * (math.nan if len(calls) == 2 else 1.0)

    monkeypatch.setattr(finetune, "_summed_losses", poisoned)
    run_id = store.create_run("detect", "detect", {})
    sink = finetune.LossSink(store, run_id)
    with pytest.raises(Diverged, match="at step 2"):
        finetune.train(det, data, exp.train, exp.run, sink=sink)
    stored = store.metrics(run_id, "train/loss")
    assert [step for step, _ in stored] == [1, 2] and math.isfinite(stored[0][1])
    assert math.isnan(stored[1][1]) and sink.losses[0] == stored[0][1]
    assert store.metrics(run_id, "train/lr") == []


@pytest.fixture(scope="module")
def confident(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """An exported 96-px detector whose first default box of every place is sure of 'disc'
    (its logit bias raised) and the others unsure, and a shapes image."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("confident")
    voc.make_shapes(root / "shapes", images=2)
    det = ssd.build(SSDLITE, labels=LABELS, size=96)
    classes = len(LABELS)
    with torch.no_grad():
        for block in det.model.head.classification_head.module_list:
            last = [m for m in block.modules() if isinstance(m, torch.nn.Conv2d)][-1]
            last.bias[1] += 4.0  # default box 0, class 1 (disc)
            last.bias[classes:] -= 0.2  # the rest below 1/3 for either class
    ssd.export(det, root / "det.onnx")
    return root / "det.onnx", root / "shapes" / "JPEGImages" / "000000.jpg"


def test_detect_run_draws_no_box_below_the_default_threshold(
    cli: Cli, confident: tuple[Path, Path], tmp_path: Path
) -> None:
    model, image = confident
    r = cli("detect", "run", str(model), str(image), "--out", str(tmp_path / "a"), "--json")
    assert r.code == 0, r.err
    (kept,) = json.loads(r.out)
    scores = [d["score"] for d in kept["detections"]]
    assert scores and min(scores) >= ssd.SCORE_THRESHOLD == 0.5
    with Image.open(image) as original:
        expected = np.asarray(ssd.draw(original, kept["detections"]))
    with Image.open(kept["annotated"]) as drawn:
        assert np.array_equal(np.asarray(drawn.convert("RGB")), expected)
    # The detector's own output goes far lower: the user lowers the threshold to see it.
    r = cli("detect", "run", str(model), str(image), "--score-threshold", "0.05", "--json")
    assert r.code == 0, r.err
    (everything,) = json.loads(r.out)
    low = [d["score"] for d in everything["detections"] if d["score"] < ssd.SCORE_THRESHOLD]
    assert low and len(everything["detections"]) == len(kept["detections"]) + len(low)
