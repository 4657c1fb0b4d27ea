"""Break-it round 35, the user's data, second fixer (docs/faults.md, the thirty-fifth round).

C8: an image folder nested one level too deep (train/train/<class>/, or train/<set name>/
<class>/ as an unzipped archive makes it) was told "class folder train is in train/ but not
in val/ ... or remove train/train", a fix that deletes every training image; nested alike in
both splits it was a set of one class, the archive's name. A split whose one class folder
holds no image but folders of images is said to hold its class folders one level too deep,
with the `mv` that moves them up.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dlperf.config import DataConfig
from dlperf.data import load_data
from dlperf.errors import UserError

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
