"""What a default `dlperf run` makes the host read from the device, step by step: every
read (`.item()`, `float()`, `.tolist()`, ...) waits for all the work queued before it, and
a host that waits every step cannot run ahead of a GPU. A tiny run on the CPU, with the
reads and the clock's synchronisations counted between the steps: the losses are read once
per `run.log_every` steps (at the flush that checks them), the clock synchronises at the
warm-up's end and at epoch boundaries, and no other step reads anything. The stored loss
and learning-rate rows are those each step's own loss and rate give."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from dlperf import timing
from dlperf.config import Experiment, RunConfig
from dlperf.data import load_data
from dlperf.engine import checkpoint, train
from dlperf.engine.hooks import Hooks, StepEnd
from dlperf.engine.loop import Diverged, EpochClock, Rows, fit
from dlperf.engine.step import Stepped
from dlperf.engine.timers import PhaseTimer
from dlperf.engine.train_loop import Progress
from dlperf.progress import NullReporter

READS = ("item", "tolist", "numpy", "cpu", "__float__", "__int__", "__bool__", "__index__")


class Counting:
    """Counts the host's reads of tensors and the clock's device synchronisations."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.counts: Counter[str] = Counter()
        for name in READS:
            monkeypatch.setattr(torch.Tensor, name, self.counted(name, getattr(torch.Tensor, name)))
        monkeypatch.setattr(timing, "synchronize", self.counted("synchronize", timing.synchronize))

    def counted(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.counts[name] += 1
            return real(*args, **kwargs)

        return call

    def snapshot(self) -> tuple[int, int]:
        """(reads, synchronisations) so far."""
        return sum(self.counts.values()) - self.counts["synchronize"], self.counts["synchronize"]


class PerStep:
    """A hook: the counts at the start and after each step, and each step's own loss (a copy
    on the device, not read) and learning rate."""

    def __init__(self, counting: Counting) -> None:
        self.counting = counting
        self.marks: list[tuple[int, int]] = []
        self.losses: list[torch.Tensor] = []
        self.lrs: list[float] = []

    def start(self, trainer: str, model: nn.Module) -> None:
        self.marks.append(self.counting.snapshot())

    def step_end(self, event: StepEnd) -> None:
        self.losses.append(event.stepped.loss.clone())
        self.lrs.append(event.stepped.lr)
        self.marks.append(self.counting.snapshot())


def test_a_default_run_reads_the_device_once_per_log_every_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exp = Experiment.model_validate(
        {
            # 88 images in batches of 4: 22 steps an epoch, and 11 images to evaluate
            "data": {"name": "synthetic", "shape": [1, 8, 8], "size": 88, "num_classes": 3},
            "train": {"epochs": 2, "batch_size": 4, "lr": 0.05},
            "augment": {"crop_padding": 1, "flip": True},
            "run": {"checkpoint": False, "threads": 1, "warmup_steps": 2},
        }
    )
    assert exp.run.log_every == 10 and exp.run.timing == "coarse"  # the defaults
    data = load_data(exp.data)
    device = torch.device("cpu")
    # A linear model: the reads are the engine's, and a convolution costs seconds on a busy core
    model = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(data.shape), data.num_classes))
    sink = Rows()
    slot = checkpoint.Slot(tmp_path / "checkpoint.pt", checkpoint.Owner("memory", 1, None))
    with monkeypatch.context() as patch:
        seen = PerStep(Counting(patch))
        summary = train.train(exp, model, data, device, sink, slot, hooks=Hooks([seen]))
    per_epoch, every, warmup = summary.steps_per_epoch, exp.run.log_every, exp.run.warmup_steps
    assert summary.steps == 2 * per_epoch and per_epoch > 2 * every
    deltas = [
        (step, b[0] - a[0], b[1] - a[1])
        for step, (a, b) in enumerate(zip(seen.marks, seen.marks[1:], strict=False), 1)
    ]
    # Steps inside an epoch: the flush's one read at each log step, the clock's one
    # synchronisation at the warm-up's end, nothing else.
    inside = [d for d in deltas if (d[0] - 1) % per_epoch != 0]
    expected = [(s, int(s % every == 0), int(s == warmup)) for s, _, _ in inside]
    assert inside == expected
    assert sum(r for _, r, _ in inside) <= summary.steps // every
    # An epoch's first step also carries the epoch boundary: the clock's synchronisations
    # (the last epoch's end, this one's start), its flush, its tallies and its evaluation.
    assert deltas[0] == (1, 0, 1)
    boundary = deltas[per_epoch]
    assert boundary[0] == per_epoch + 1 and boundary[2] == 2 and 0 < boundary[1] <= 6

    # The stored rows are each step's own loss and rate, read the old way, one by one.
    losses = [(s, v) for key, s, v, *_ in sink if key == "train/loss"]
    assert losses == [(s, loss.item()) for s, loss in enumerate(seen.losses, 1)]
    rates = [(s, v) for key, s, v, *_ in sink if key == "train/lr"]
    assert rates == list(enumerate(seen.lrs, 1))
    assert all(math.isfinite(v) for _, v in losses)


class NanAt:
    """A step whose loss is NaN from step `bad` on; it counts the steps taken."""

    memory_format = torch.preserve_format
    grad_clip = None  # what a diverged run's line advises by, with its optimizer's rate

    def __init__(self, bad: int) -> None:
        self.bad, self.taken = bad, 0
        self.optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)

    def __call__(self, x: Any, y: Any) -> Stepped:
        self.taken += 1
        loss = torch.tensor(math.nan if self.taken >= self.bad else 1.0 / self.taken)
        return Stepped(loss, torch.zeros(len(y), 2), 0.1)

    def check_not_grown(self) -> None:
        """TrainStep's check that the forward added no parameters: this step has no model."""


@pytest.mark.parametrize(("bad", "stops"), [(3, 10), (10, 10), (11, 20)])
def test_divergence_names_its_step_and_is_seen_at_the_next_log_step(bad: int, stops: int) -> None:
    """The loss is checked where it is read: a loss that is not finite is named with its own
    step, and the run stops at the flush that reads it, up to log_every - 1 steps later."""
    step = NanAt(bad)
    device = torch.device("cpu")
    batch = (torch.zeros(2, 1), torch.zeros(2, dtype=torch.long))
    rows = Rows()
    with pytest.raises(Diverged, match=f"at step {bad} "):
        fit(
            step,  # type: ignore[arg-type]
            model=nn.Linear(1, 2),
            batches=lambda epoch: [batch] * 40,
            state=Progress(),
            clock=EpochClock(device, 0, PhaseTimer(device, enabled=False)),
            sink=rows,
            reporter=NullReporter(),
            run=RunConfig(log_every=10),
            trainer="run",
            epochs=1,
        )
    assert step.taken == stops
    stored = [s for key, s, *_ in rows if key == "train/loss"]
    assert stored == list(range(1, bad + 1))  # up to the bad step, which is the last
