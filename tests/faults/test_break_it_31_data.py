"""Break-it round 31, the user's own data (fixer G).

C1. A data.root that is a loop of symbolic links (la -> lb -> la) was "a link to lb, which is
    not there" (mount or restore lb), and an .npz one "no such file", blamed on the current
    directory: both are now said to be a loop of links, naming them.
C2. `data samples` wrote fewer images of a class than asked, or none, when the split holds
    fewer (the class's images are in another split), exit 0 without a word: the classes short
    are now a warning naming where their images are, and nothing at all written is refused.
C3. A VOC annotation's <Object> (another case) was not read, its box trained as background,
    and an object's second <bndbox> was dropped, exit 0: VOC's elements are read in any case,
    and a second of an element VOC gives once (<bndbox>, <name>, a corner, ...) is refused in
    one line naming the file and the object.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dlperf.config import DataConfig
from dlperf.data import load_data
from dlperf.detect import voc
from dlperf.errors import UserError
from tests.conftest import CliResult
from tests.faults.test_break_it_21_detect import shapes, sub
from tests.faults.test_break_it_24_detect import finetune, refused_before_training, xml
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


# --- C1: a data.root that is a loop of symbolic links ----------------------------------------


def loops(tmp_path: Path) -> Path:
    """tmp_path/loops holding la -> lb -> la and self.npz -> self.npz."""
    folder = tmp_path / "loops"
    folder.mkdir()
    (folder / "lb").symlink_to("la")
    (folder / "la").symlink_to("lb")
    (folder / "self.npz").symlink_to("self.npz")
    return folder


@pytest.mark.parametrize("name", ["imagefolder", "mnist", "cifar10"])
def test_a_data_root_that_is_a_loop_of_links_is_said_to_be_one(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Before: "data.root loops/la is a link to lb, which is not there (mount or restore lb,
    ...)": lb is there, and links back to la."""
    loops(tmp_path)
    monkeypatch.chdir(tmp_path)
    sets = ("--set", "data.root=loops/la", "--set", "data.image_size=12")
    r = cli("data", "describe", name, *sets[: 4 if name == "imagefolder" else 2])
    one_line(r, 2, "data.root loops/la is a loop of symbolic links (loops/la -> lb -> la)",
             f"point one of the links at the folder that holds the {name} files")  # fmt: skip
    assert "not there" not in r.err
    # a loop further up the path is found where it is
    r = cli("data", "describe", name, "--set", "data.root=loops/la/sub", *sets[2:4])
    one_line(r, 2, "data.root loops/la/sub is a loop of symbolic links (loops/la -> lb -> la)")


def test_an_npz_data_root_that_is_a_loop_of_links_is_said_to_be_one(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: "loops/self.npz: not a readable .npz file (no such file): a relative data.root
    is read from the current directory, ...", of a link that is there."""
    folder = loops(tmp_path)
    monkeypatch.chdir(tmp_path)
    for root, chain in [
        ("loops/self.npz", "loops/self.npz -> self.npz"),
        (str(folder / "self.npz"), f"{folder / 'self.npz'} -> self.npz"),
    ]:
        r = cli("data", "describe", "npz", "--set", f"data.root={root}")
        one_line(r, 2, f"{root} is a loop of symbolic links ({chain})",
                 "point one of the links at the .npz file")  # fmt: skip
        assert "no such file" not in r.err and "current directory" not in r.err


# --- C2: data samples of a class the split holds too few of ------------------------------------


def lopsided(tmp_path: Path) -> Path:
    """40 images, 39 cats and 1 dog, whose one image the default split_seed puts in test."""
    path = tmp_path / "lopsided.npz"
    images = np.zeros((40, 1, 4, 4), np.uint8)
    np.savez(path, images=images, labels=np.r_[np.zeros(39, int), 1], classes=["cat", "dog"])
    data = load_data(DataConfig(name="npz", root=str(path)))
    held = {s: (getattr(data, s).labels == 1).sum().item() for s in ("train", "val", "test")}
    assert held == {"train": 0, "val": 0, "test": 1}
    return path


def test_samples_of_a_class_the_split_lacks_are_said_or_refused(cli: Cli, tmp_path: Path) -> None:
    """Before: "npz: 0 train images ... wrote 0 images", exit 0, of --classes dog; and 3 cats
    and no dog, not a word, of --per-class 3."""
    root = ("--set", f"data.root={lopsided(tmp_path)}")
    out = tmp_path / "out"
    r = cli("data", "samples", "npz", *root, "--split", "train", "--classes", "dog,",
            "--out", str(out))  # fmt: skip
    one_line(r, 2, "no train image of the 1 class asked: dog has 0 (1 in test)",
             "try --split test")  # fmt: skip
    assert not out.exists()
    r = cli("data", "samples", "npz", *root, "--split", "val", "--per-class", "3",
            "--out", str(out), "--json")  # fmt: skip
    assert r.code == 0, r.err
    said = (
        "1 class has fewer than 3 val images: dog has 0 (1 in test); no split holds 3 of each "
        "class: test holds at least 1 of each"
    )
    assert f"warning: {said}" in r.err.splitlines(), r.err
    doc = json.loads(r.out)
    assert [f["class"] for f in doc["files"]] == ["cat"] * 3 and doc["warnings"] == [said]
    # one per class (the default), all there: nothing to say
    r = cli("data", "samples", "npz", *root, "--out", str(out), "--json")
    assert r.code == 0 and "warning" not in r.err and json.loads(r.out)["warnings"] == [], r.err


# --- C3: VOC elements in another case, and a second <bndbox> -----------------------------------


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("object>", "Object>"),
        ("name>", "Name>"),
        ("bndbox>", "BNDBOX>"),
        ("xmax>", "XMax>"),
        ("difficult>", "Difficult>"),
        ("size>", "Size>"),
        ("width>", "Width>"),
        ("filename>", "FileName>"),
    ],
)
def test_voc_elements_in_another_case_are_read(tmp_path: Path, old: str, new: str) -> None:
    """Before: an <Object> was not read (3 objects, 2 read: its square trained as background);
    a <Name>, <BndBox>, ... was "missing <name>"."""
    root = shapes(tmp_path)
    path, images = xml(root, "000000"), root / "JPEGImages"
    plain = voc.parse_annotation(path, images)
    assert len(plain.objects) > 1
    path.write_text(path.read_text().replace(old, new))
    assert voc.parse_annotation(path, images) == plain


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        ("</bndbox>", "</bndbox><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>9</xmax><ymax>9</ymax>"
         "</bndbox>", "object 1: 2 <bndbox> elements, where VOC has one"),
        ("</bndbox>", "</bndbox><BndBox><xmin>1</xmin><ymin>1</ymin><xmax>9</xmax><ymax>9</ymax>"
         "</BndBox>", "object 1: 2 <bndbox> elements, where VOC has one"),
        ("</name>", "</name><name>disc</name>", "object 1: 2 <name> elements"),
        ("</xmax>", "</xmax><xmax>9</xmax>", "<bndbox>: 2 <xmax> elements"),
        ("</width>", "</width><width>9</width>", "<size>: 2 <width> elements"),
    ],
)  # fmt: skip
def test_a_second_voc_element_of_one_is_refused(
    tmp_path: Path, old: str, new: str, said: str
) -> None:
    """Before: the first was read and the second dropped: an object's second box, trained as
    background, without a word."""
    root = shapes(tmp_path)
    path = xml(root, "000000")
    sub(path, old, new)
    with pytest.raises(UserError) as caught:
        voc.parse_annotation(path)
    assert said in str(caught.value) and str(path) in str(caught.value)


def test_finetune_refuses_an_object_of_two_boxes(cli: Cli, tmp_path: Path) -> None:
    root = shapes(tmp_path)
    box = "<bndbox><xmin>1</xmin><ymin>1</ymin><xmax>9</xmax><ymax>9</ymax></bndbox>"
    sub(xml(root, "000000"), "</bndbox>", f"</bndbox>{box}")
    out = tmp_path / "w.pt"
    r = finetune(cli, root, out)
    one_line(r, 2, f"{xml(root, '000000')}: object 1: 2 <bndbox> elements, where VOC has one",
             "give each box its own <object>")  # fmt: skip
    refused_before_training(cli, out)
