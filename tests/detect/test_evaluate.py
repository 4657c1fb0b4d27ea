"""dlperf.detect.evaluate on its own: class matching by name, and `detect eval` on a tiny
make-shapes set with a fake detector (one that answers the ground truth) in place of an SSD."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from dlperf.config import DetectJob, load_job
from dlperf.detect import evaluate, voc
from dlperf.detect.ssd import Detector
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line


def test_coco_names_become_voc_names_the_data_set_uses() -> None:
    labels = ["__background__", "airplane", "person", "tv", "couch"]
    classes = ["__background__", "aeroplane", "person", "tvmonitor"]
    names, renamed = evaluate.match_classes(labels, classes)
    # couch would be sofa, which this data set does not have: it keeps its name
    assert names == ["__background__", "aeroplane", "person", "tvmonitor", "couch"]
    assert renamed == {"aeroplane": "airplane", "tvmonitor": "tv"}


def test_a_label_is_not_renamed_onto_a_name_the_detector_already_has() -> None:
    labels = ["__background__", "airplane", "aeroplane"]  # both: airplane must not collide
    names, renamed = evaluate.match_classes(labels, ["__background__", "aeroplane"])
    assert names == labels and renamed == {}
    # a label the data set names itself stays, even where a VOC name exists for it
    names, renamed = evaluate.match_classes(["bg", "couch"], ["bg", "couch", "sofa"])
    assert names == ["bg", "couch"] and renamed == {}


def test_listed_names_at_most_six() -> None:
    assert evaluate._listed(["a", "b"]) == "a, b"
    names = [f"c{i}" for i in range(8)]
    assert evaluate._listed(names) == "c0, c1, c2, c3, c4, c5, ... (8 in all)"
    assert evaluate._listed(names[:6]) == "c0, c1, c2, c3, c4, c5"


class Oracle:
    """A detector's model that answers each image's ground truth (as label ids of `labels`),
    images in the order they come."""

    def __init__(self, annotations: list[voc.VocAnnotation], labels: list[str]) -> None:
        ids = {name: i for i, name in enumerate(labels)}
        self.answers: Iterator[dict[str, torch.Tensor]] = iter(
            [
                {
                    "boxes": torch.tensor([o.box for o in a.objects if o.name in ids]).reshape(
                        -1, 4
                    ),
                    "scores": torch.ones(sum(o.name in ids for o in a.objects)),
                    "labels": torch.tensor([ids[o.name] for o in a.objects if o.name in ids]),
                }
                for a in annotations
            ]
        )
        self.batches: list[int] = []

    def eval(self) -> Oracle:
        return self

    def to(self, device: torch.device) -> Oracle:
        return self

    def __call__(self, images: list[torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        self.batches.append(len(images))
        return [next(self.answers) for _ in images]


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shapes")
    voc.make_shapes(root, images=8, size=96, val_fraction=0.5, seed=1)
    return root


def job(**detect: Any) -> DetectJob:
    return load_job(DetectJob, None, [], detect=detect, train={"batch_size": 3}, run={"threads": 1})


def test_eval_needs_weights_or_pretrained(store: RunStore, shapes: Path) -> None:
    with pytest.raises(UserError, match="detect eval tests trained weights") as caught:
        evaluate.evaluate_recorded(lambda: store, shapes, job())
    assert "--weights FILE" in str(caught.value)
    assert store.list_runs() == []


def test_eval_scores_and_records_the_detectors_classes(
    store: RunStore, shapes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    annotations = voc.load_split(shapes, "val")
    labels = ["__background__", "square", "triangle"]  # knows squares, not discs
    oracle = Oracle(annotations, labels)
    built: list[dict[str, Any]] = []

    def build(name: str, **kwargs: Any) -> Detector:
        built.append({"name": name, **kwargs})
        return Detector(oracle, name, 96, labels)

    monkeypatch.setattr(evaluate.ssd, "build", build)
    weights = shapes / "w.pt"
    result = evaluate.evaluate_recorded(
        lambda: store, shapes, job(ap_method="11point"), weights=weights
    )
    assert built[0]["weights"] == weights and built[0]["fallback_labels"] == [
        "__background__", "disc", "square"
    ]  # fmt: skip
    assert len(annotations) == 4 and oracle.batches == [3, 1]  # train.batch_size images a pass
    assert result["ap"] == {"disc": 0.0, "square": pytest.approx(1.0)}  # every square found
    assert result["map"] == pytest.approx(0.5) and result["unknown"] == ["disc"]
    assert result["images"] == len(annotations) and result["split"] == "val"
    assert result["renamed"] == {} and result["threads"] == 1
    run = store.get_run(result["run_id"])
    assert (run.kind, run.status) == ("detect", "finished")
    assert run.config["detect"] == {
        "model": "ssdlite320_mobilenet_v3_large", "size": 96, "val_split": "val",
        "ap_method": "11point", "batch": 3, "threads": 1,
    }  # fmt: skip
    assert run.config["weights"] == str(weights) and run.config["pretrained"] is False
    assert run.summary["map"] == result["map"]


def test_a_detector_with_none_of_the_classes_is_refused_before_a_run(
    store: RunStore, shapes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    labels = ["__background__", *[f"thing{i}" for i in range(7)]]
    monkeypatch.setattr(evaluate.ssd, "build", lambda name, **kw: Detector(None, name, 96, labels))
    with pytest.raises(UserError) as caught:
        evaluate.evaluate_recorded(lambda: store, shapes, job(), pretrained=True)
    assert str(caught.value) == (
        "the detector's classes (thing0, thing1, thing2, thing3, thing4, thing5, ... (7 in all)) "
        "include none of split val's (disc, square) (test weights trained on these classes)"
    )
    assert store.list_runs() == []


# `detect eval` refuses a split it cannot measure AP on, as `detect finetune` does: one whose
# objects are all difficult (AP leaves them out of the positives) gave NaN for every class.


def test_eval_on_a_split_of_only_difficult_objects_is_refused_before_the_model(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    root = tmp_path / "det"
    voc.make_shapes(root, images=4, size=64, seed=1)
    (val_id,) = voc.read_split(root, "val")
    xml = root / "Annotations" / f"{val_id}.xml"
    xml.write_text(xml.read_text().replace("<difficult>0</difficult>", "<difficult>1</difficult>"))
    weights = tmp_path / "w.pt"
    weights.write_bytes(b"not read: the split is refused first")
    r = cli("detect", "eval", str(root), "--weights", str(weights), "--val-split", "val")
    one_line(
        r,
        2,
        f"error: {root}: the val split has no objects to measure AP on (its 1 image has only "
        "difficult ones, which AP leaves out)",
        "(annotate objects in its images, or name a split that has some with --val-split)",
    )
