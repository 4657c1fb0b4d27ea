"""dlperf.distill.pool on its own: SPEC parsing, the pool taken from a hand-made ImageData
(the held-out share, an npz file) and the shape hints; no data set is downloaded or trained
on. (Whole sets resized, and more refusals, are test_runner.py's.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from dlperf.config import DataConfig, Experiment
from dlperf.data import ImageData, Split
from dlperf.distill import pool
from dlperf.errors import UserError


def test_pairs_split_only_at_commas_that_start_a_key() -> None:
    where = "--unlabeled x"
    assert pool._pairs("image_size=8", where) == {"image_size": 8}
    assert pool._pairs("shape=[3,8,8], limit = 5,name=a,b", where) == {
        "shape": [3, 8, 8],
        "limit": 5,
        "name": "a,b",  # no KEY= after the comma: it belongs to the value
    }


@pytest.mark.parametrize("text", ["image_size", "=8", "image_size=", " =3"])
def test_pairs_need_key_and_value(text: str) -> None:
    with pytest.raises(UserError) as caught:
        pool._pairs(text, "--unlabeled s")
    assert str(caught.value) == (
        f"--unlabeled s: expected KEY=VALUE after the name (e.g. {pool.EXAMPLE})"
    )


def test_parse_a_holdout_shares_the_experiments_data() -> None:
    exp = Experiment()  # digits
    unlabelled, labelled = pool.parse("digits:holdout=0.25", exp)
    assert unlabelled is labelled and labelled.holdout == 0.25
    assert labelled.name == exp.data.name and exp.data.holdout != 0.25  # exp left alone


def test_parse_another_set_keeps_the_experiments_data() -> None:
    exp = Experiment()
    unlabelled, labelled = pool.parse("synthetic:shape=[1,8,8]", exp)
    assert (unlabelled.name, list(unlabelled.shape)) == ("synthetic", [1, 8, 8])
    assert labelled == exp.data
    # the experiment's own synthetic set is another draw, so it may be a pool too
    synthetic = Experiment.model_validate({"data": {"name": "synthetic"}})
    assert pool.parse("synthetic", synthetic)[0].name == "synthetic"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (":image_size=8", f"--unlabeled :image_size=8: no data set named (e.g. {pool.EXAMPLE})"),
        (
            "digits:holdout=0.5,image_size=8",
            "--unlabeled digits:holdout=0.5,image_size=8: holdout sets aside a share of the "
            "experiment's own digits and takes no other keys (use --unlabeled digits:holdout=0.5)",
        ),
    ],
)
def test_parse_refusals_are_one_line(spec: str, message: str) -> None:
    with pytest.raises(UserError) as caught:
        pool.parse(spec, Experiment())
    assert str(caught.value) == message


def images(n: int, value: int = 0, shape: tuple[int, ...] = (1, 4, 4)) -> torch.Tensor:
    return torch.full((n, *shape), value, dtype=torch.uint8)


def labelled_data(unlabeled: Split | None = None, classes: list[str] | None = None) -> ImageData:
    split = Split(torch.tensor([0, 1]), images(2))
    return ImageData(
        "fake", split, split, split, 2, (1, 4, 4), classes=classes or ["a", "b"],
        unlabeled=unlabeled,
    )  # fmt: skip


def test_a_held_out_share_is_the_pool_with_its_labels_hidden() -> None:
    held = Split(torch.tensor([1, 0, 1]), torch.arange(48, dtype=torch.uint8).reshape(3, 1, 4, 4))
    cfg = DataConfig(name="digits", holdout=0.5)
    found = pool.load("digits:holdout=0.5", cfg, labelled_data(held))
    assert found.images is held.images and found.hidden is held.labels
    assert found.spec == "digits:holdout=0.5" and len(found.digest) == 16
    # the digest is of images and labels: other labels are another pool
    relabelled = Split(torch.tensor([0, 0, 1]), held.images)
    assert pool.load("s", cfg, labelled_data(relabelled)).digest != found.digest
    assert pool.load("s", cfg, labelled_data(held)).digest == found.digest


def test_an_empty_pool_is_refused() -> None:
    empty = Split(torch.zeros(0, dtype=torch.int64), images(0))
    with pytest.raises(UserError) as caught:
        pool.load("digits:holdout=0.01", DataConfig(holdout=0.01), labelled_data(empty))
    assert (
        str(caught.value) == "--unlabeled digits:holdout=0.01: no images (hold out a larger share)"
    )


def save_npz(path: Path, labels: bool, classes: list[str]) -> Path:
    arrays = {"images": np.full((3, 1, 4, 4), 9, np.uint8), "classes": np.array(classes)}
    if labels:
        arrays["labels"] = np.array([1, 0, 1])
    np.savez(path, **arrays)
    return path


def test_an_npz_pool_hides_labels_only_of_the_teachers_classes(tmp_path: Path) -> None:
    same = save_npz(tmp_path / "same.npz", labels=True, classes=["a", "b"])
    found = pool.load("npz", DataConfig(name="npz", root=str(same)), labelled_data())
    assert found.images.shape == (3, 1, 4, 4) and int(found.images.max()) == 9
    assert found.hidden is not None and found.hidden.tolist() == [1, 0, 1]
    other = save_npz(tmp_path / "other.npz", labels=True, classes=["x", "y"])
    assert pool.load("npz", DataConfig(name="npz", root=str(other)), labelled_data()).hidden is None
    bare = save_npz(tmp_path / "bare.npz", labels=False, classes=["a", "b"])
    assert pool.load("npz", DataConfig(name="npz", root=str(bare)), labelled_data()).hidden is None


def test_a_set_streamed_from_files_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    streamed = Split(torch.tensor([0]), None, ["a.png"])
    files = ImageData("folder", streamed, streamed, streamed, 2, (1, 4, 4))
    monkeypatch.setattr(pool, "_read", lambda cfg, reporter: files)
    with pytest.raises(UserError) as caught:
        pool.load("folder", DataConfig(), labelled_data())
    assert str(caught.value) == (
        "--unlabeled folder: folder does not fit in memory "
        "(give it a smaller image_size or set in_memory=true)"
    )


def test_check_shape_says_what_to_set() -> None:
    pool._check_shape("s", (1, 8, 8), (1, 8, 8))  # the same: nothing to say
    with pytest.raises(UserError) as caught:
        pool._check_shape("synthetic:shape=[1,9,9],image_size=3,limit=4", (1, 3, 3), (1, 8, 8))
    assert str(caught.value) == (
        "--unlabeled synthetic:shape=[1,9,9],image_size=3,limit=4: images are 1x3x3, the teacher "
        "takes 1x8x8 (set --unlabeled synthetic:shape=[1,9,9],limit=4,image_size=8)"
    )
    with pytest.raises(UserError) as caught:
        pool._check_shape("rgb", (3, 8, 8), (1, 8, 8))
    assert str(caught.value) == (
        "--unlabeled rgb: images are 3x8x8, the teacher takes 1x8x8 (3 channel(s), not 1) "
        "(choose a set with 1 channel(s))"
    )


def test_the_shape_hint_replaces_an_image_size_written_with_spaces() -> None:
    # _pairs takes "KEY=VALUE, KEY=VALUE"; the hint must still drop the old image_size (it
    # said "limit=5, image_size=9,image_size=8") and be one shell word
    with pytest.raises(UserError) as caught:
        pool._check_shape("mnist5k:limit=5, image_size = 9", (1, 9, 9), (1, 8, 8))
    assert caught.value.hint == "set --unlabeled mnist5k:limit=5,image_size=8"
