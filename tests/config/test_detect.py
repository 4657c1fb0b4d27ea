"""dlperf.config.detect: [detect]'s keys, detection's preset beneath the file, the keys it
moved to [train] and [run], and what a detection job refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from dlperf.config.detect import MOVED, PRESET, DetectConfig, DetectJob
from dlperf.config.loading import load_job
from dlperf.errors import UserError


def test_defaults_and_the_size_range() -> None:
    d = DetectConfig()
    assert (d.model, d.size, d.ap_method) == ("ssdlite320_mobilenet_v3_large", None, "area")
    assert DetectConfig(size=96).size == 96
    assert DetectConfig(size=640).size == 640
    for bad in (95, 641):
        with pytest.raises(ValidationError):
            DetectConfig(size=bad)
    with pytest.raises(ValidationError):
        DetectConfig(ap_method="12point")  # type: ignore[arg-type]


def test_the_preset_lies_beneath_the_file(tmp_path: Path) -> None:
    path = tmp_path / "det.toml"
    path.write_text("[train]\nlr = 0.01\n")
    job = load_job(DetectJob, path, [])
    train = job.experiment.train
    assert train.lr == 0.01  # the file's
    assert (train.epochs, train.batch_size, train.optimizer) == (20, 8, "adamw")  # the preset's
    assert train.schedule.kind == PRESET["train"]["schedule"]["kind"] == "cosine"
    assert job.experiment.run.warmup_steps == 1
    assert job.detect == DetectConfig()


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_a_moved_key_is_refused_with_its_new_name(old: str, new: str) -> None:
    with pytest.raises(UserError) as e:
        load_job(DetectJob, None, [f"detect.{old}=1"])
    assert str(e.value) == f"config with --set: 'detect.{old}' is '{new}' now (give it as {new})"


def test_check_names_each_key_detection_cannot_honour() -> None:
    assert load_job(DetectJob, None, []).check() is None
    with pytest.raises(UserError) as e:
        load_job(DetectJob, None, ["run.compile=true"])
    assert str(e.value) == (
        "config with --set: run.compile: detection cannot honour it "
        "(leave it out, or give it its default)"
    )
    job = load_job(DetectJob, None, [])
    both = job.model_copy(
        update={
            "experiment": job.experiment.model_copy(
                update={
                    "train": job.experiment.train.model_copy(update={"label_smoothing": 0.1}),
                    "run": job.experiment.run.model_copy(update={"timing": "phases"}),
                }
            )
        }
    )
    assert both.check() == "train.label_smoothing, run.timing: detection cannot honour them"
