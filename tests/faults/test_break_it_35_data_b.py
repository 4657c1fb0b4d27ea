"""Break-it round 35, the user's data, second fixer (docs/faults.md, the thirty-fifth round).

C8: an image folder nested one level too deep (train/train/<class>/, or train/<set name>/
<class>/ as an unzipped archive makes it) was told "class folder train is in train/ but not
in val/ ... or remove train/train", a fix that deletes every training image; nested alike in
both splits it was a set of one class, the archive's name. A split whose one class folder
holds no image but folders of images is said to hold its class folders one level too deep,
with the `mv` that moves them up.

C6: converge fit/predict of a CSV with a step column and no --x fitted on the row numbers
without a word ("predicted step 28" for step 280 of a log written every 10 steps), and a
resumed log (steps repeated) or rows out of order as one ordered curve. A step column whose
steps do not increase is refused; one that counts other steps than the rows is a warning.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dlperf.config import DataConfig
from dlperf.converge import curve
from dlperf.data import load_data
from dlperf.errors import UserError
from tests.conftest import CliResult

# --- C8: class folders one level too deep -----------------------------------------------


def images(folder: Path, count: int = 2) -> None:
    folder.mkdir(parents=True)
    for i in range(count):
        Image.fromarray(np.full((4, 4, 3), i, np.uint8)).save(folder / f"{i}.png")


@pytest.mark.parametrize(
    ("train", "val", "nested"),
    [
        ("train", "val", "train/train"),  # both splits nested in a folder named as the split
        ("mydata", None, "train/mydata"),  # train/ from an archive, val/ as it should be
        ("mydata", "mydata", "train/mydata"),  # both: was a set of one class, mydata
        (None, "val", "val/val"),  # only val/
    ],
)
def test_c8_class_folders_one_level_too_deep_are_said_to_be(
    tmp_path: Path, train: str | None, val: str | None, nested: str
) -> None:
    for split, inner in (("train", train), ("val", val)):
        for name in ("cat", "dog"):
            images(tmp_path / split / (inner or "") / name)
    with pytest.raises(UserError) as caught:
        load_data(DataConfig(name="imagefolder", root=str(tmp_path), image_size=4))
    folder = tmp_path / nested
    split = folder.parent
    assert caught.value.message == (
        f"{folder} holds the class folders cat and dog, one level too deep: imagefolder reads "
        f"each folder of {split.name}/ as one class, so they would all be class {folder.name}"
    )
    assert caught.value.hint == (
        f"move them up: mv {shlex.quote(str(folder))}/* {shlex.quote(str(split))}/ && rmdir "
        f"{shlex.quote(str(folder))}"
    )


def test_c8_folders_inside_class_folders_still_count(tmp_path: Path) -> None:
    # train/cat/indoor/, train/cat/outdoor/: nested folders of a class are its images
    for split in ("train", "val"):
        for name in ("cat", "dog"):
            for inner in ("indoor", "outdoor"):
                images(tmp_path / split / name / inner, 1)
    data = load_data(DataConfig(name="imagefolder", root=str(tmp_path), image_size=4))
    assert data.classes == ["cat", "dog"]
    assert len(data.test.labels) == 4


def test_c8_a_class_lacking_its_siblings_in_one_split_is_not_too_deep(tmp_path: Path) -> None:
    # val/ holds only cat, in folders of its own: a class missing dog, not a level too deep
    for name in ("cat", "dog"):
        images(tmp_path / "train" / name)
    for inner in ("indoor", "outdoor"):
        images(tmp_path / "val" / "cat" / inner)
    with pytest.raises(UserError) as caught:
        load_data(DataConfig(name="imagefolder", root=str(tmp_path), image_size=4))
    assert caught.value.message == f"{tmp_path}: class folder dog is in train/ but not in val/"


# --- C6: converge --csv without --x beside a step column ---------------------------------


def log(tmp_path: Path, steps: list[int]) -> Path:
    path = tmp_path / "log.csv"
    rows = "".join(f"{k},{1 / (0.01 * k + 0.5) + 0.3:.6f}\n" for k in steps)
    path.write_text("step,loss\n" + rows)
    return path


def test_c6_a_step_column_left_unused_is_said(tmp_path: Path) -> None:
    path = log(tmp_path, list(range(10, 410, 10)))
    read = curve.from_csv(path, None, "loss")
    assert read.steps[-1] == 40  # as documented: the row numbers
    assert read.notes == [
        f"{path}: the steps are the row numbers 1..40; column 'step' (10 to 400) is not used "
        "(--x step fits on it)"
    ]
    assert curve.from_csv(path, "step", "loss").notes == []
    # a step column that is the row numbers says nothing
    assert curve.from_csv(log(tmp_path, list(range(1, 41))), None, "loss").notes == []


def test_c6_a_resumed_log_fitted_on_row_numbers_is_refused(tmp_path: Path) -> None:
    steps = list(range(10, 210, 10)) + list(range(160, 410, 10))  # resumed from step 150
    path = log(tmp_path, steps)
    with pytest.raises(UserError) as caught:
        curve.from_csv(path, None, "loss")
    assert caught.value.message == (
        f"{path}:22: column 'step' goes from 200 to 160 (a resumed log, or rows out of order?): "
        "without --x the rows are the steps 1, 2, ..., and these are not in the order of training"
    )
    assert caught.value.hint == "give each step once, in order, and --x step to fit on the column"


def test_c6_fit_and_predict_warn_of_the_unused_column(
    tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    path = log(tmp_path, list(range(10, 410, 10)))
    said = "the steps are the row numbers 1..40; column 'step' (10 to 400) is not used"
    for command in ("fit", "predict --target 0.6"):
        result = cli("converge", *command.split(), "--csv", str(path), "--y", "loss")
        assert result.code == 0, result.err
        # stderr wraps at 80 columns, where the tmp path's length falls
        assert said in " ".join(result.err.split()), result.err
