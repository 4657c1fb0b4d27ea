"""Break-it round 12, D3: `dlperf detect finetune` and a batch of one image.

D3. make-shapes' 12 images at --size 96 and --batch 4 left a training split of 9 images, a last
batch of one; SSDlite's 1x1 feature map at that size left its batch norm one value per channel,
and finetune ended in torch's 103-line traceback ("Expected more than 1 value per channel when
training"), exit 1, the run stored failed. A training split of one image, or --batch 1, did the
same at every step. Now a last batch of one image joins the batch before it (the epoch trains
every image, one step fewer, and the schedule counts the steps taken), and a step that can only
ever hold one image is refused in one line before anything is stored.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.detect import finetune, ssd, voc
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


def shapes(root: Path, images: int) -> Path:
    """make-shapes' set of `images` 64 px images (3 train + 1 val for 4; 1 + 1 for 2)."""
    voc.make_shapes(root, images=images, size=64)
    return root


def finetune_args(root: Path, tmp_path: Path, batch: int) -> list[str]:
    return [
        "detect", "finetune", str(root), "--size", "96", "--epochs", "1", "--threads", "1",
        "--batch", str(batch), "--out", str(tmp_path / "d.pt"),
    ]  # fmt: skip


def test_a_last_batch_of_one_image_joins_the_batch_before_it(cli: Cli, tmp_path: Path) -> None:
    """Before: ValueError 'Expected more than 1 value per channel when training' and its
    traceback, exit 1, the run stored failed. 3 training images at --batch 2: one step of 3."""
    root = shapes(tmp_path / "shapes", 4)
    assert len(voc.load_split(root, "train")) == 3
    result = cli(*finetune_args(root, tmp_path, 2), "--json")
    assert result.code == 0, result.err
    assert "Traceback" not in result.err
    done = json.loads(result.out)
    assert done["steps"] == 1  # the 3 images in one step, not 2 + 1
    runs = RunStore.open(f"sqlite:///{tmp_path / 'dlperf.db'}").list_runs()
    assert [r.status for r in runs] == ["finished"]


@pytest.mark.parametrize(
    ("images", "batch", "said", "fix"),
    [
        (2, 4, "the train split holds 1 image", "add training images"),
        (4, 1, "train.batch_size 1", "use --batch 2 or more"),
    ],
)
def test_a_step_of_one_image_is_refused_up_front(
    cli: Cli, tmp_path: Path, images: int, batch: int, said: str, fix: str
) -> None:
    """Before: the same traceback at the first step, exit 1, the run stored failed."""
    root = shapes(tmp_path / "shapes", images)
    result = cli(*finetune_args(root, tmp_path, batch))
    one_line(result, 2, said, "batch norm", fix)
    runs = RunStore.open(f"sqlite:///{tmp_path / 'dlperf.db'}").list_runs()
    assert runs == []


@pytest.mark.parametrize("samples", range(1, 12))
@pytest.mark.parametrize("batch", [1, 2, 3, 4, 8])
def test_the_epochs_batches_take_every_image_once_and_count_the_schedules_steps(
    samples: int, batch: int
) -> None:
    order = list(range(samples, 0, -1))
    batches = list(finetune.train_batches(order, batch))
    assert sorted(i for b in batches for i in b) == sorted(order)
    assert len(batches) == finetune.train_steps(samples, batch)
    if batch > 1 and samples > 1:
        assert min(len(b) for b in batches) > 1
    assert max(len(b) for b in batches) <= batch + 1


def test_one_image_a_step_is_refused_only_where_a_feature_map_is_1x1() -> None:
    """SSDlite at 640 px ends on a 2x2 map, where batch norm trains on one image: not refused.
    The check leaves the detector's mode and batch-norm statistics as they were."""
    import torch

    labels = [voc.BACKGROUND, "disc", "square"]
    built = ssd.build("ssdlite320_mobilenet_v3_large", labels=labels, size=96)
    for size, refused in [(96, True), (640, False)]:
        det = dataclasses.replace(built, size=size)  # the check reads the detector's size
        det.model.train()
        before = {k: v.clone() for k, v in det.model.state_dict().items()}
        if refused:
            with pytest.raises(UserError, match="the train split holds 1 image"):
                finetune.check_step_of_one(det, "train", 1, 4)
        else:
            finetune.check_step_of_one(det, "train", 1, 4)
            finetune.check_step_of_one(det, "train", 5, 1)
        assert det.model.training and det.model.backbone.training
        after = det.model.state_dict()
        assert all(torch.equal(before[k], after[k]) for k in before)


def test_finetune_names_its_weights_file_on_one_line(cli: Cli, tmp_path: Path) -> None:
    """A newline in --out split the summary line after "saved" (round 18)."""
    root = shapes(tmp_path / "shapes", 4)
    args = finetune_args(root, tmp_path, 2)
    args[-1] = str(tmp_path / "d\nx.pt")
    result = cli(*args)
    assert result.code == 0, result.err
    assert "d\\nx.pt" in result.out and "d\nx.pt" not in result.out, result.out
