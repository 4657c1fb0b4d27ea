"""Break-it round 23, P2 cause C6: distill's pretrain stage on too few pseudo-labelled images.

The pretrain stage trains on the images kept for one K, split by distill itself (a tenth for
test, a tenth of the rest for validation). A pool of one image with --top-k 1 kept one image:
after the teacher had trained and scored the pool, the run said "data.val_fraction = 0.1
rounds to no image of npz (raise data.val_fraction, or drop target.accuracy)", and with
data.val_fraction = 0.5 set, as advised, said the same (the key does not reach pretrain).
Now a K that cannot keep enough images whatever the teacher scores (the pool's size, the
classes, K and top_p bound it) is refused before anything runs, and one whose teacher kept
too few is refused after the selection, before its pretrain run: each line names the distill
keys that decide it, and offers only fixes that work.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dlperf.config import DataConfig, DistillConfig
from dlperf.data import load_data
from dlperf.distill import pretrain
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult, write_distill_exp
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]
TARGET = "[target]\naccuracy = 0.95\n"
NOT_OURS = "pretrain splits its images itself: data.val_fraction is the labelled data's"


def pool_npz(path: Path, images: int, same: bool = False) -> Path:
    """`images` 8x8 grey images none of which is a digit's (digits' pixels are multiples of
    255/16, rounded: 3 and 5 are none of them), all alike when `same`."""
    rng = np.random.default_rng(0)
    pixels = rng.choice(np.array([3, 5], np.uint8), size=(images, 1, 8, 8))
    if same:
        pixels[:] = pixels[0]
    np.savez(path, images=pixels)
    return path


def stored(tmp_path: Path) -> tuple[int, bool]:
    """(runs, whether the distill study was made) in the test's store."""
    store = RunStore.open(f"sqlite:///{tmp_path / 'dlperf.db'}")
    return len(store.list_runs()), store.find_study("smallcnn", "distill") is not None


def distill(cli: Cli, exp: Path, pool: Path, *args: str) -> CliResult:
    return cli("distill", str(exp), "--unlabeled", f"npz:root={pool}", *args)


# --- before anything runs: the pool, the classes, K and P bound the images kept ----------------


def test_the_reports_case_is_refused_before_the_teacher_trains(
    cli: Cli, db: str, tmp_path: Path
) -> None:
    """pool1.npz, --top-k 1, target.accuracy set, data.val_fraction 0.5 as the old line
    advised. Before: the teacher trained, then the data.val_fraction line."""
    exp = write_distill_exp(tmp_path, TARGET)
    pool = pool_npz(tmp_path / "pool1.npz", 1)
    result = distill(cli, exp, pool, "--top-k", "1", "--set", "data.val_fraction=0.5")
    one_line(
        result,
        2,
        "distill K = 1: pretrain would train on at most 1 image (a pool of 1 image, each kept "
        "for at most 1 class), and it measures target.accuracy on a tenth of them, none: that "
        f"takes 7 images or more ({NOT_OURS})",
        "(give a pool of 7 or more images (--unlabeled))",
    )
    assert "data.val_fraction = " not in result.err
    assert stored(tmp_path) == (0, False)


def test_without_a_target_one_image_is_still_too_few(cli: Cli, db: str, tmp_path: Path) -> None:
    """Dropping target.accuracy is not offered where it does not help: one image trains no
    classifier. Before: the teacher trained, then "give it images of at least 2 classes"."""
    exp = write_distill_exp(tmp_path)
    pool = pool_npz(tmp_path / "pool1.npz", 1)
    result = distill(cli, exp, pool, "--top-k", "1,5")
    one_line(
        result,
        2,
        "distill K = 1, 5: pretrain would train on at most 1 image (a pool of 1 image, each "
        "kept for at most 1 class), and a classifier trains on 2 classes: that takes 2 images "
        "or more",
        "(give a pool of 2 or more images (--unlabeled))",
    )
    assert stored(tmp_path) == (0, False)


def _opts(top_k: list[int], top_p: int = 1) -> DistillConfig:
    return DistillConfig(unlabeled="npz:root=x.npz", top_k=top_k, top_p=top_p)


def test_a_k_too_small_for_the_classes_names_the_k_that_works() -> None:
    with pytest.raises(UserError) as caught:
        pretrain.check_plan(_opts([3, 10, 2]), 100, 2, 0.9)
    assert (caught.value.message, caught.value.hint) == (
        "distill K = 2, 3: pretrain would train on at most 6 images (3 per class of 2), and it "
        "measures target.accuracy on a tenth of them, none: that takes 7 images or more "
        f"({NOT_OURS})",
        "give distill.top_k values of 4 or more, or drop target.accuracy",
    )
    pretrain.check_plan(_opts([4, 10]), 100, 2, 0.9)  # the fix offered works
    pretrain.check_plan(_opts([3, 10, 2]), 100, 2, None)  # and so does the other


def test_top_p_lets_a_small_pool_keep_enough() -> None:
    """4 images, each kept for up to 2 of 10 classes: 8 at most."""
    with pytest.raises(UserError) as caught:
        pretrain.check_plan(_opts([1]), 4, 10, 0.9)
    assert caught.value.message.startswith(
        "distill K = 1: pretrain would train on at most 4 images (a pool of 4 images, each "
        "kept for at most 1 class)"
    )
    assert caught.value.hint == "give a pool of 7 or more images (--unlabeled), or drop " + (
        "target.accuracy"
    )
    pretrain.check_plan(_opts([1], top_p=2), 4, 10, 0.9)


@pytest.mark.parametrize("images", range(1, 31))
def test_the_sizes_are_those_the_npz_reader_splits(tmp_path: Path, images: int) -> None:
    """pretrain.sizes is the arithmetic of the split pretrain's data is read with."""
    path = tmp_path / "p.npz"
    rng = np.random.default_rng(images)
    labels = np.arange(images) % 2
    np.savez(path, images=rng.integers(0, 255, (images, 1, 4, 4), np.uint8), labels=labels)
    f = pretrain.FRACTION
    test = f if pretrain.sizes(images)[2] else 0.0  # as the runner sets it
    data = load_data(DataConfig(name="npz", root=str(path), test_fraction=test, val_fraction=f))
    assert pretrain.sizes(images) == (len(data.train), len(data.val), len(data.test))


def test_the_fewest_images_pretrain_takes() -> None:
    assert (pretrain.fewest(True), pretrain.fewest(False)) == (7, 2)
    assert pretrain.sizes(6)[1] == 0 and pretrain.sizes(7)[1] == 1


# --- after the selection: what the teacher kept -----------------------------------------------


def test_too_few_kept_is_said_before_the_pretrain_run(cli: Cli, db: str, tmp_path: Path) -> None:
    """10 images alike: K = 1 of 10 classes could keep 10, but every image is the same
    class's, so 1 is kept. Before: the data.val_fraction line, which no key fixes. A larger
    K keeps no other class's image: not offered."""
    exp = write_distill_exp(tmp_path, TARGET)
    pool = pool_npz(tmp_path / "same.npz", 10, same=True)
    result = distill(cli, exp, pool, "--top-k", "1", "--set", "data.val_fraction=0.5")
    one_line(
        result,
        2,
        "pretrain K=1: the teacher kept 1 image (class ",
        ": 1), and pretrain measures target.accuracy on a tenth of them, none: that takes 7 images "
        f"or more ({NOT_OURS}) (raise distill.top_p, or give a larger, more varied pool "
        "(--unlabeled))",
    )
    runs = RunStore.open(db).list_runs()
    assert sorted(r.tags.get("stage") for r in runs) == ["select", "teacher"]


def test_one_class_kept_is_said_without_a_target(cli: Cli, db: str, tmp_path: Path) -> None:
    exp = write_distill_exp(tmp_path)
    pool = pool_npz(tmp_path / "same.npz", 10, same=True)
    result = distill(cli, exp, pool, "--top-k", "1")
    one_line(
        result,
        2,
        "pretrain K=1: the teacher kept 1 image (class ",
        ": 1): its training split holds images of 1 class, and a classifier needs 2 or more "
        "(raise distill.top_p, or give a larger, more varied pool (--unlabeled))",
    )
