"""Break-it round 17, part F, causes B and C: resuming runs whose world changed.

B. `dlperf doctor` told a killed run whose checkpoint file is gone to `dlperf run --resume N`,
   which then failed "run N's checkpoint ... is missing". It now advises the resume only while
   the checkpoint is there, and otherwise says the run cannot be resumed and to run it again.
C. When the image folder gained or lost a class between the kill and the resume, the model's
   head no longer fit the checkpoint and the refusal blamed the model file ("restore the file
   the run was trained with") or dlperf ("use the dlperf the run was trained with"). It now
   names the data: "the data now has 4 classes, the run was trained on 3".
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from dlperf import doctor
from dlperf.config import Experiment
from dlperf.engine import checkpoint
from dlperf.engine.build import prepare_run
from dlperf.engine.train_loop import Progress
from dlperf.errors import UserError
from dlperf.progress import NullReporter
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

# The reporter's user model (lz.py): a lazy first layer, a head sized by num_classes.
MODEL = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.LazyLinear(32)
        self.fc2 = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def net(num_classes: int = 10, **kw: object) -> nn.Module:
    return Net(num_classes)
"""


def _image_folder(root: Path, classes: list[str]) -> None:
    """root/{train,val}/<class>, six 8x8 PNGs a class."""
    from PIL import Image

    for split in ("train", "val"):
        for c, name in enumerate(classes):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(6):
                Image.new("L", (8, 8), 40 * c + 5 * i).save(folder / f"{i}.png")


def _killed_run(store: RunStore, tmp_path: Path, model: str, data: dict[str, Any]) -> int:
    """A 3-epoch run of `model` on `data` killed after its first epoch, its epoch-1 checkpoint
    written as `dlperf run` writes it."""
    exp = Experiment.model_validate(
        {
            "model": {"name": model},
            "data": data,
            "train": {"epochs": 3, "batch_size": 8, "lr": 0.05},
            "run": {"threads": 1, "warmup_steps": 1, "out_dir": str(tmp_path / "runs")},
        }
    )
    weights = prepare_run(exp, store, NullReporter()).model.state_dict()
    digest = exp.config_hash()
    run_id = store.create_run("r", "run", exp.to_dict(), digest)
    store.log_metrics(run_id, [("epoch/train_loss", 1, 2.0), ("train/loss", 3, 2.0)])
    where = store.artifact_dir(exp.run.out_dir) / f"run-{run_id}" / "checkpoint.pt"
    slot = checkpoint.Slot(where, checkpoint.Owner(store.id, run_id, digest))
    checkpoint.save(slot, {"model": weights, "progress": asdict(Progress(epoch=1, step=3))})
    store.add_artifact(run_id, "checkpoint", where)
    store.finish_run(run_id, "killed", error="interrupted")
    return run_id


def _unfinished_fix(store: RunStore, run_id: int) -> str:
    (finding,) = [f for f in doctor.examine(store, [run_id]) if f.rule == "unfinished"]
    return finding.fix


# B


def test_doctor_advises_a_resume_only_while_the_checkpoint_is_there(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    digits = {"name": "digits", "limit": 64}
    run_id = _killed_run(store, tmp_path, "smallcnn", digits)
    assert _unfinished_fix(store, run_id) == (
        f"continue it from its last checkpoint: dlperf run --resume {run_id}"
    )
    (path,) = [Path(a["path"]) for a in store.artifacts(run_id) if a["kind"] == "checkpoint"]
    path.unlink()
    assert _unfinished_fix(store, run_id) == (
        f"run it again: its checkpoint {path} is gone, so it cannot be resumed"
    )
    # What the advice no longer sends the user to.
    said = f"error: run {run_id}'s checkpoint {path} is missing"
    one_line(cli("run", "--resume", str(run_id)), 2, said)
    # A directory where the file was (the whole run directory moved, a path reused).
    path.mkdir()
    assert _unfinished_fix(store, run_id) == (
        f"run it again: its checkpoint {path} is not a regular file, so it cannot be resumed"
    )


# C


@pytest.mark.parametrize("model", ["smallcnn", "user file"])
@pytest.mark.parametrize(("change", "now"), [("gained", 4), ("lost", 2)])
def test_a_resume_on_data_with_other_classes_names_the_data(
    cli: Cli, tmp_path: Path, store: RunStore, model: str, change: str, now: int
) -> None:
    if model == "user file":
        (tmp_path / "lz.py").write_text(MODEL)
        model = f"{tmp_path / 'lz.py'}:net"
    imgs = tmp_path / "imgs"
    _image_folder(imgs, ["c0", "c1", "c2"])
    data = {"name": "imagefolder", "root": str(imgs), "image_size": 8}
    run_id = _killed_run(store, tmp_path, model, data)
    for split in ("train", "val"):
        if change == "gained":
            shutil.copytree(imgs / split / "c0", imgs / split / "c9")
        else:
            shutil.rmtree(imgs / split / "c2")
    result = cli("run", "--resume", str(run_id))
    one_line(
        result,
        2,
        f"error: run {run_id}'s checkpoint does not fit its data: the data now has {now} "
        "classes, the run was trained on 3 (restore the data the run was trained with, or "
        "train it again)",
    )
    assert store.get_run(run_id).status == "killed"


def test_fit_weights_blames_the_data_only_for_the_class_count() -> None:
    """Given the data's class count, a head sized for another count is the data's change; a
    layer's width changed (with or without the classes) is still the model's."""
    trained = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 3)).state_dict()
    now = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 5))
    with pytest.raises(UserError) as caught:
        checkpoint.fit_weights(now, trained, 7, "smallcnn", classes=5)
    assert str(caught.value) == (
        "run 7's checkpoint does not fit its data: the data now has 5 classes, the run was "
        "trained on 3 (restore the data the run was trained with, or train it again)"
    )
    # Classes used twice over (a square head): every size that differs is the class count.
    square = nn.Sequential(nn.Linear(3, 3)).state_dict()
    with pytest.raises(UserError, match="the data now has 5 classes, the run was trained on 3"):
        checkpoint.fit_weights(nn.Sequential(nn.Linear(5, 5)), square, 7, "m", classes=5)
    wider = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 5))
    same_classes = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 5)).state_dict()
    for weights in (trained, same_classes):
        with pytest.raises(UserError, match=r"does not fit model 'smallcnn' as it is now: 0\."):
            checkpoint.fit_weights(wider, weights, 7, "smallcnn", classes=5)
    # Without the data's count (export, a distill teacher), the message is the model's.
    with pytest.raises(UserError, match=r"does not fit model 'smallcnn' as it is now: 2\.weight"):
        checkpoint.fit_weights(now, trained, 7, "smallcnn")
    fitting = {key: value + 1 for key, value in now.state_dict().items()}
    checkpoint.fit_weights(now, fitting, 7, "smallcnn", classes=5)
    assert all(torch.equal(now.state_dict()[k], v) for k, v in fitting.items())
