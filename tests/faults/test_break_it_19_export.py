"""Break-it round 19, fix task L2: exporting (or starting from) runs that are not what
export expects.

B. `dlperf export 9` of a distill `select` run failed with a traceback (KeyError: 'run' in
   sweep.runner.weights_hint), and `model.weights = run:9` said to train it with
   run.checkpoint = true; a `detect finetune` run failed "shapes.pt is not a dlperf run
   checkpoint: it names no run". Each kind of run that is not a training run now gets one
   line saying what it is, and a detect run the command that exports it.
D. An image-folder run exported after its classes were renamed (same count) took the folder's
   new names, every label shifted, silently; one that gained or lost a class blamed the model
   and dlperf. The run now stores its class names, export uses them, and a changed class
   count is the data's line, as resume gives it.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.config import Experiment
from dlperf.deploy.export import from_run
from dlperf.errors import UserError
from dlperf.experiment.run import run_experiment
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_break_it_17_resume import _image_folder
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

# B


def _select_run(store: RunStore) -> int:
    """A distill select run as distill's runner stores it, in a distill study."""
    study = store.create_study("d", "distill")
    config = {"teacher": 1, "unlabeled": "u", "pool": "p", "images": 8, "top_k": 4, "top_p": 1}
    run_id = store.create_run("d-select-k4", "select", config, "0" * 16, None, study)
    store.finish_run(run_id, "finished")
    return run_id


def _detect_run(store: RunStore, tmp_path: Path) -> tuple[int, Path]:
    """A detect finetune run with its weights file, as detect.finetune stores it."""
    weights = tmp_path / "shapes.pt"
    weights.write_bytes(b"not a run checkpoint")
    config = {"model": {"name": "ssdlite320_mobilenet_v3_large"}, "data": {"root": "voc"}}
    run_id = store.create_run("finetune ssd on voc", "detect", {**config, "weights": None})
    store.add_artifact(run_id, "checkpoint", weights)
    store.finish_run(run_id, "finished")
    return run_id, weights


def test_export_of_a_select_run_says_it_has_no_model(cli: Cli, store: RunStore) -> None:
    run_id = _select_run(store)
    one_line(
        cli("export", str(run_id), "--out", "m.onnx"),
        2,
        f"error: run {run_id} is a select run (distill's selection): it has no model to export",
    )


def test_weights_from_a_select_run_say_it_has_no_model(
    cli: Cli, store: RunStore, tiny_exp: Callable[..., Path]
) -> None:
    run_id = _select_run(store)
    result = cli("run", str(tiny_exp(1)), "--set", f"model.weights=run:{run_id}")
    one_line(
        result,
        2,
        f"run {run_id} is a select run (distill's selection): it has no model to start from",
    )
    assert "checkpoint" not in result.err


def test_export_of_a_detect_run_names_detect_export(
    cli: Cli, store: RunStore, tmp_path: Path
) -> None:
    run_id, weights = _detect_run(store, tmp_path)
    one_line(
        cli("export", str(run_id), "--out", "m.onnx"),
        2,
        f"error: run {run_id} is a detect run: it holds a detector, no classifier to export "
        "(export it with dlperf detect export --model ssdlite320_mobilenet_v3_large "
        f"--weights {weights} --out FILE.onnx)",
    )


def test_weights_from_a_detect_run_say_it_is_a_detector(
    cli: Cli, store: RunStore, tmp_path: Path, tiny_exp: Callable[..., Path]
) -> None:
    run_id, _ = _detect_run(store, tmp_path)
    result = cli("run", str(tiny_exp(1)), "--set", f"model.weights=run:{run_id}")
    one_line(result, 2, f"run {run_id} is a detect run: it holds a detector, no classifier")
    assert "names no run" not in result.err


@pytest.mark.parametrize(
    ("kind", "what"),
    [
        ("calibrate", "dlperf calibrate's measurement of this machine"),
        ("predict", "dlperf predict's measurement of a model"),
        ("staleness", "a training of dlperf staleness, which keeps no weights"),
        ("scale", "a point of dlperf scale, which keeps no weights"),
        ("allreduce", "dlperf scale allreduce's measurement"),
    ],
)
def test_export_of_every_other_kind_says_what_it_is(
    cli: Cli, store: RunStore, kind: str, what: str
) -> None:
    run_id = store.create_run(kind, kind, {"run": {"checkpoint": False}})
    store.finish_run(run_id, "finished")
    article = "an" if kind == "allreduce" else "a"
    one_line(
        cli("export", str(run_id), "--out", "m.onnx"),
        2,
        f"error: run {run_id} is {article} {kind} run ({what}): it has no model to export",
    )


# D

CLASSES = [f"c{i}" for i in range(10)]


def _folder_run(store: RunStore, tmp_path: Path) -> tuple[int, Path]:
    """A finished one-epoch smallcnn run on a 10-class image folder of 8x8 PNGs."""
    imgs = tmp_path / "imgs"
    _image_folder(imgs, CLASSES)
    exp = Experiment.model_validate(
        {
            "model": {"name": "smallcnn"},
            "data": {"name": "imagefolder", "root": str(imgs), "image_size": 8},
            "train": {"epochs": 1, "batch_size": 16, "lr": 0.05},
            "run": {
                "threads": 1,
                "warmup_steps": 1,
                "checkpoint": True,
                "out_dir": str(tmp_path / "runs"),
            },
        }
    )
    result = run_experiment(exp, store)
    assert result["status"] == "finished"
    return result["run_id"], imgs


def test_export_after_classes_renamed_keeps_the_trained_names(
    store: RunStore, tmp_path: Path
) -> None:
    run_id, imgs = _folder_run(store, tmp_path)
    assert store.get_run(run_id).trained.data["class_names"] == CLASSES  # type: ignore[index]
    for split in ("train", "val"):
        (imgs / split / "c0").rename(imgs / split / "z0")
    assert from_run(store, run_id).meta.labels == CLASSES


def test_export_of_a_stopped_run_after_classes_renamed_keeps_the_trained_names(
    store: RunStore, tmp_path: Path
) -> None:
    """A stopped run has no summary to name its classes: its checkpoint's names label it."""
    run_id, imgs = _folder_run(store, tmp_path)
    store.update_run(run_id, status="killed", summary=None)  # stopped after its checkpoint
    for split in ("train", "val"):
        (imgs / split / "c0").rename(imgs / split / "z0")
    assert from_run(store, run_id).meta.labels == CLASSES


def test_export_after_a_class_removed_names_the_data(store: RunStore, tmp_path: Path) -> None:
    run_id, imgs = _folder_run(store, tmp_path)
    for split in ("train", "val"):
        shutil.rmtree(imgs / split / "c9")
    with pytest.raises(UserError) as caught:
        from_run(store, run_id)
    assert str(caught.value) == (
        f"run {run_id}'s checkpoint does not fit its data: the data now has 9 classes, the "
        "run was trained on 10 (restore the data the run was trained with, or train it again)"
    )
