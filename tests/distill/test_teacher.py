"""dlperf.distill.teacher on its own: which stored runs may teach (a fake store of run
records), and scoring checked against the same network's softmax computed here, with the
weights handed over by a fake `pretrained.resolve` instead of a trained run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from dlperf.config import Experiment
from dlperf.distill import teacher
from dlperf.errors import UserError
from dlperf.models import create_model
from dlperf.store.record import RunRecord

DATA = {"shape": [1, 8, 8], "mean": [0.25], "std": [0.5], "classes": 10}
CONFIG = Experiment.model_validate({"model": {"name": "smallcnn"}}).to_dict()


def record(
    run_id: int = 3, kind: str = "run", status: str = "finished", **summary: Any
) -> RunRecord:
    summary = {"data": DATA, "test_accuracy": 0.9, **summary}
    return RunRecord(run_id, None, "t", kind, status, CONFIG, None, None, summary)


class Runs:
    def __init__(self, run: RunRecord) -> None:
        self.run = run

    def get_run(self, run_id: int) -> RunRecord:
        assert run_id == self.run.id
        return self.run


@pytest.fixture
def checkpoints(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    """The runs whose checkpoint `stored` asked for (every run has one here)."""
    asked: list[tuple[int, str]] = []

    def run_checkpoint(store: Any, run_id: int, purpose: str, hint: str) -> Path:
        asked.append((run_id, purpose))
        return Path("/nowhere/ckpt.pt")

    monkeypatch.setattr(teacher.checkpoint, "run_checkpoint", run_checkpoint)
    return asked


def test_a_finished_training_run_teaches(checkpoints: list[tuple[int, str]]) -> None:
    found = teacher.stored(Runs(record()), 3)  # type: ignore[arg-type]
    assert (found.run_id, found.shape, found.mean, found.std) == (3, (1, 8, 8), (0.25,), (0.5,))
    assert found.classes == 10 and found.test_accuracy == 0.9
    assert found.exp.model.name == "smallcnn"
    assert checkpoints == [(3, "to score with")]


@pytest.mark.parametrize(
    ("run", "message"),
    [
        (record(kind="sweep"), "teacher run 3 is a sweep run, not a training run"),
        (
            record(status="killed"),
            "teacher run 3 did not finish (status killed) (resume it with "
            "`dlperf run --resume 3` or give a finished run)",
        ),
        (record(data=None), "teacher run 3 recorded no data shape (an older dlperf's run)"),
    ],
)
def test_runs_that_cannot_teach(
    run: RunRecord, message: str, checkpoints: list[tuple[int, str]]
) -> None:
    with pytest.raises(UserError) as caught:
        teacher.stored(Runs(run), 3)  # type: ignore[arg-type]
    assert str(caught.value) == message
    assert checkpoints == []  # refused before its checkpoint is looked for


@dataclass
class Weights:
    state: dict[str, torch.Tensor]
    buffers: dict[str, torch.Tensor] = field(default_factory=dict)  # Pretrained's: none kept

    def fetch(self) -> dict[str, torch.Tensor]:
        return self.state


def test_scores_are_the_softmax_of_the_normalised_images(
    monkeypatch: pytest.MonkeyPatch, checkpoints: list[tuple[int, str]]
) -> None:
    torch.manual_seed(0)
    net = create_model("smallcnn", num_classes=10, in_channels=1).eval()
    with torch.no_grad():
        net(torch.zeros(1, 1, 8, 8))  # its LazyLinear takes its size, as in training
    asked: list[Any] = []

    def resolve(cfg: Any, store: Any) -> Weights:
        asked.append(cfg.weights)
        return Weights(net.state_dict())

    monkeypatch.setattr(teacher.pretrained, "resolve", resolve)
    found = teacher.stored(Runs(record()), 3)  # type: ignore[arg-type]
    images = torch.randint(0, 256, (5, 1, 8, 8), dtype=torch.uint8)
    scores = teacher.score(found, None, images, torch.device("cpu"), batch=2)  # type: ignore[arg-type]
    assert asked == ["run:3"]
    with torch.no_grad():
        expected = torch.softmax(net((images.float() / 255 - 0.25) / 0.5), dim=1)
    assert scores.scores.shape == (5, 10) and scores.scores.device.type == "cpu"
    torch.testing.assert_close(scores.scores, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(scores.scores.sum(1), torch.ones(5))
    assert scores.seconds > 0 and scores.images_per_s == pytest.approx(5 / scores.seconds)
    assert scores.device == torch.device("cpu")


def test_weights_of_another_network_are_one_line(
    monkeypatch: pytest.MonkeyPatch, checkpoints: list[tuple[int, str]]
) -> None:
    other = create_model("smallcnn", num_classes=4, in_channels=1)  # a 4-class head
    other(torch.zeros(1, 1, 8, 8))
    monkeypatch.setattr(
        teacher.pretrained, "resolve", lambda cfg, store: Weights(other.state_dict())
    )
    found = teacher.stored(Runs(record()), 3)  # type: ignore[arg-type]
    images = torch.zeros(2, 1, 8, 8, dtype=torch.uint8)
    with pytest.raises(UserError, match="model 'smallcnn'") as caught:
        teacher.score(found, None, images, torch.device("cpu"), batch=2)  # type: ignore[arg-type]
    assert "\n" not in str(caught.value)
