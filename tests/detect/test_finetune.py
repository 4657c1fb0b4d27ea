"""dlperf.detect.finetune's parts on their own: batching, the flip, the loss sink, the stored
keys, the run's config and prediction, with fake detectors and stores in place of an SSD.
(One real step and the recipe end to end are test_ssd.py's and test_finetune_recipe.py's.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from dlperf.config import DetectJob, load_job
from dlperf.detect import finetune, voc
from dlperf.detect.ssd import Detector
from dlperf.errors import UserError
from dlperf.store import RunStore


def test_batches_keep_the_order_and_end_with_the_rest() -> None:
    assert list(finetune._batches([5, 3, 9, 1, 7], 2)) == [[5, 3], [9, 1], [7]]
    assert list(finetune._batches([], 4)) == []


def test_flip_mirrors_the_image_and_its_boxes() -> None:
    image = torch.arange(2 * 3 * 10, dtype=torch.float32).reshape(2, 3, 10)  # width 10
    target = {"boxes": torch.tensor([[1.0, 0.0, 4.0, 2.0]]), "labels": torch.tensor([3])}
    flipped, moved = finetune._flip(image, target)
    assert torch.equal(flipped[..., 0], image[..., 9])
    # x from 1..4 becomes 10 - 4 .. 10 - 1; y unchanged
    assert moved["boxes"].tolist() == [[6.0, 0.0, 9.0, 2.0]]
    assert moved["labels"] is target["labels"]
    assert target["boxes"].tolist() == [[1.0, 0.0, 4.0, 2.0]]  # the original is untouched
    twice, back = finetune._flip(flipped, moved)
    assert torch.equal(twice, image) and torch.equal(back["boxes"], target["boxes"])


def test_summed_losses_adds_the_detectors_loss_terms() -> None:
    seen: list[Any] = []

    def call(targets: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        seen.append(targets)
        return {"bbox_regression": torch.tensor(1.25), "classification": torch.tensor(2.5)}

    targets = [{"boxes": torch.zeros(0, 4)}]
    assert finetune._summed_losses(call, targets).item() == 3.75
    assert seen == [targets]


class FakeStore:
    def __init__(self) -> None:
        self.logged: list[tuple[int, list[Any]]] = []

    def log_metrics(self, run_id: int, rows: list[Any]) -> None:
        self.logged.append((run_id, rows))


def test_loss_sink_keeps_and_stores_only_the_training_loss() -> None:
    store = FakeStore()
    sink = finetune.LossSink(store, run_id=4)  # type: ignore[arg-type]
    sink.log_metrics([("train/loss", 1, 2.0), ("train/lr", 1, 0.1), ("train/loss", 2, 1.5, 9.0)])
    sink.log_metrics([("train/lr", 3, 0.05)])  # nothing to store: no call
    assert sink.losses == [2.0, 1.5]
    assert store.logged == [(4, [("train/loss", 1, 2.0), ("train/loss", 2, 1.5, 9.0)])]
    alone = finetune.LossSink()  # without a store: kept only
    alone.log_metrics([("train/loss", 1, 0.5)])
    assert alone.losses == [0.5]


def test_default_size_refuses_an_unknown_detector() -> None:
    with pytest.raises(UserError, match="unknown detector 'ssd512'"):
        finetune.default_size("ssd512", [])
    assert finetune.default_size("ssdlite320_mobilenet_v3_large", []) == 320  # no images


def job(*sets: str) -> DetectJob:
    return load_job(DetectJob, None, list(sets))


def test_stored_keys_carry_the_recipe_under_the_old_detect_names() -> None:
    keys = finetune.stored_keys(job("train.lr=0.01", "train.batch_size=4", "run.seed=7"))
    assert (keys["model"], keys["val_split"], keys["size"]) == (
        "ssdlite320_mobilenet_v3_large", "val", None
    )  # fmt: skip
    assert (keys["lr"], keys["batch"], keys["seed"]) == (0.01, 4, 7)
    # the rest of the detection preset, as [train] and [run] resolve it
    assert (keys["epochs"], keys["optimizer"], keys["weight_decay"]) == (20, "adamw", 1e-4)
    assert keys["schedule"]["kind"] == "cosine"
    assert {"momentum", "nesterov", "grad_clip", "threads", "precision"} <= set(keys)


def test_detect_run_records_what_ran(store: RunStore, tmp_path: Path) -> None:
    det = Detector(None, "ssd300_vgg16", 300, ["bg", "a"])
    detect = {"size": None, "lr": 0.5}  # the size the detector ran at replaces the given one
    with finetune.detect_run(
        store, "eval", tmp_path / "shapes", det, detect, None, torch.device("cpu"), 1,
        pretrained=True,
    ) as record:  # fmt: skip
        record.summary = {"map": 0.25}
    run = store.get_run(record.id)
    assert run.name == "eval ssd300_vgg16 on shapes" and run.kind == "detect"
    assert run.config == {
        "model": {"name": "ssd300_vgg16"},
        "data": {"root": str(tmp_path / "shapes")},
        "detect": {"size": 300, "lr": 0.5},
        "weights": None,
        "pretrained": True,
    }
    assert run.status == "finished" and run.summary == {"map": 0.25}


def test_a_failing_detect_run_is_marked_failed(store: RunStore, tmp_path: Path) -> None:
    det = Detector(None, "ssd300_vgg16", 300, ["bg", "a"])
    with (
        pytest.raises(RuntimeError, match="boom"),
        finetune.detect_run(
            store, "finetune", tmp_path, det, {}, tmp_path / "w.pt", torch.device("cpu"), 1
        ) as record,
    ):
        raise RuntimeError("boom")
    run = store.get_run(record.id)
    assert run.status == "failed" and run.config["weights"] == str(tmp_path / "w.pt")


class Boxes:
    """A detector's model answering, per image, one box at its own size (w, h) with score 1."""

    def __init__(self) -> None:
        self.batches: list[int] = []
        self.mode = "train"

    def eval(self) -> Boxes:
        self.mode = "eval"
        return self

    def to(self, device: torch.device) -> Boxes:
        return self

    def __call__(self, images: list[torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        assert self.mode == "eval"
        self.batches.append(len(images))
        return [
            {
                "boxes": torch.tensor([[0.0, 0.0, float(i.shape[2]), float(i.shape[1])]]),
                "scores": torch.ones(1),
                "labels": torch.ones(1, dtype=torch.int64),
                "extra": torch.zeros(1),
            }
            for i in images
        ]


class Images:
    """A VocDataset's interface over blank images of the given (height, width)."""

    def __init__(self, sizes: list[tuple[int, int]]) -> None:
        self.sizes = sizes
        self.annotations = [
            voc.VocAnnotation(str(i), f"{i}.jpg", w, h, [voc.VocObject("a", (0, 0, w, h), False)])
            for i, (h, w) in enumerate(sizes)
        ]

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return torch.zeros(3, *self.sizes[i]), {}


class Told:
    def __init__(self) -> None:
        self.tasks: list[tuple[str, int | None]] = []
        self.advanced: list[int] = []

    def task(self, description: str, total: int | None = None) -> None:
        self.tasks.append((description, total))

    def advance(self, n: int = 1, status: str = "") -> None:
        self.advanced.append(n)

    def log(self, message: str) -> None:
        pass


def test_predict_runs_every_image_in_batches_and_gives_numpy() -> None:
    model = Boxes()
    det = Detector(model, "ssd300_vgg16", 300, ["bg", "a"])
    told = Told()
    data = Images([(10, 20), (30, 40), (50, 60)])
    out = finetune.predict(det, data, batch=2, reporter=told)  # type: ignore[arg-type]
    assert model.batches == [2, 1] and told.tasks == [("detecting", 3)] and told.advanced == [2, 1]
    assert [set(o) for o in out] == [{"boxes", "scores", "labels"}] * 3
    assert isinstance(out[0]["boxes"], np.ndarray)
    assert [o["boxes"].tolist() for o in out] == [
        [[0, 0, 20, 10]],
        [[0, 0, 40, 30]],
        [[0, 0, 60, 50]],
    ]


def test_measure_ap_scores_the_predictions_against_the_annotations() -> None:
    det = Detector(Boxes(), "ssd300_vgg16", 300, ["bg", "a"])
    result = finetune.measure_ap(det, Images([(10, 20), (30, 40)]), batch=8)  # type: ignore[arg-type]
    assert result["ap"] == {"a": pytest.approx(1.0)} and result["map"] == pytest.approx(1.0)


def test_the_detector_to_fine_tune_takes_its_size_and_must_know_the_classes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sizes: list[int | None] = []

    def build(
        name: str,
        weights: Path | None,
        size: int | None,
        fallback_labels: list[str],
        seed: int | None = 0,
    ) -> Detector:
        assert seed is None  # random weights drawn as run.seed seeded torch, not build's 0
        sizes.append(size)
        known = ["bg", "x"] if weights else fallback_labels  # weights bring their own classes
        return Detector(None, name, size or 320, known)

    monkeypatch.setattr(finetune.ssd, "build", build)
    cfg = job().detect
    images = [voc.VocAnnotation("0", "0.jpg", 120, 80, [])]
    finetune._detector(cfg, None, ["bg", "a"], images)
    finetune._detector(job("detect.size=160").detect, None, ["bg", "a"], images)
    with pytest.raises(UserError, match=r"w.pt was trained on \['x'\], this set has \['a'\]"):
        finetune._detector(cfg, tmp_path / "w.pt", ["bg", "a"], images)
    # no size: 120 px rounds up to 128; a given size wins; weights keep their own (None)
    assert sizes == [128, 160, None]
