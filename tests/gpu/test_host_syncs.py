"""What a default `dlperf run` makes the host wait for on a real GPU, step by step, caught by
torch's own detector of synchronising CUDA calls (`torch.cuda.set_sync_debug_mode("warn")`:
a tensor read such as `.item()` or `.tolist()`, a blocking copy between host and device;
not the clock's deliberate `torch.cuda.synchronize`). The CPU twin, which counts the reads
by name, is tests/engine/test_host_reads.py.

Expected, on every step inside an epoch: one synchronising call at each `run.log_every`-th
step (the flush that reads and checks the losses) and none at any other; augmentation's
draws reach the device without one (data.augment.host_to_device).

Marked `gpu` (`make test-gpu`); skipped without CUDA."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from dlperf.config import Experiment
from dlperf.data import load_data
from dlperf.engine import checkpoint, train
from dlperf.engine.hooks import Hooks, StepEnd
from dlperf.engine.loop import Rows

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: no GPU visible"),
]


class SyncsPerStep:
    """A hook: the synchronising calls recorded in `caught` by the start and after each step."""

    def __init__(self, caught: list[warnings.WarningMessage]) -> None:
        self.caught, self.marks = caught, list[int]()

    def syncs(self) -> int:
        return sum("synchronizing CUDA operation" in str(w.message) for w in self.caught)

    def start(self, trainer: str, model: nn.Module) -> None:
        self.marks.append(self.syncs())

    def step_end(self, event: StepEnd) -> None:
        self.marks.append(self.syncs())


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_default_run_waits_for_the_gpu_once_per_log_every_steps(
    tmp_path: Path, precision: str
) -> None:
    exp = Experiment.model_validate(
        {
            # 22 steps of 16 images an epoch
            "data": {"name": "synthetic", "shape": [3, 16, 16], "size": 352, "num_classes": 3},
            "train": {"epochs": 2, "batch_size": 16, "lr": 0.05},
            "augment": {"crop_padding": 2, "flip": True, "cutout": 4},
            "run": {"checkpoint": False, "warmup_steps": 2, "precision": precision},
        }
    )
    device = torch.device("cuda", torch.cuda.current_device())
    data = load_data(exp.data)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, data.num_classes),
    )
    slot = checkpoint.Slot(tmp_path / "checkpoint.pt", checkpoint.Owner("memory", 1, None))
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        seen = SyncsPerStep(caught)
        torch.cuda.set_sync_debug_mode("warn")
        try:
            summary = train.train(exp, model, data, device, Rows(), slot, hooks=Hooks([seen]))
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    per_epoch, every = summary.steps_per_epoch, exp.run.log_every
    assert summary.steps == 2 * per_epoch and per_epoch > 2 * every
    deltas = [b - a for a, b in zip(seen.marks, seen.marks[1:], strict=False)]
    inside = [(s, d) for s, d in enumerate(deltas, 1) if (s - 1) % per_epoch != 0]
    assert inside == [(s, int(s % every == 0)) for s, _ in inside]
    assert deltas[0] == 0  # the first step: the epoch's order and draws without a wait
