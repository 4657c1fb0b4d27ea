"""The one training step: the hand-written loop it replaces, its schedule, clipping, mixed
precision and timer hook. (A scale worker applying it: tests/test_distributed_scale.py.)"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dlperf.config import ScheduleConfig, TrainConfig
from dlperf.engine.optim import lr_factor
from dlperf.engine.step import build_step, steps_per_epoch

CPU = torch.device("cpu")
SCHEDULE = ScheduleConfig(kind="cosine", warmup_epochs=0.5)
CFG = TrainConfig(epochs=2, lr=0.1, grad_clip=0.5, label_smoothing=0.1, schedule=SCHEDULE)
STEPS_PER_EPOCH = 4


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 3))


def batches(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(8, 1, 4, 4, generator=g), torch.randint(3, (8,), generator=g))] * n


def flat(m: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in m.parameters()])


def test_the_step_is_the_hand_written_loop() -> None:
    """zero grad, forward, loss, backward, clip, step, schedule: the same weights bit for bit,
    and the learning rate of each step from the schedule."""
    mine, theirs = model(), model()
    step = build_step(mine, CFG, "fp32", CPU, STEPS_PER_EPOCH)
    optimizer = torch.optim.SGD(
        theirs.parameters(), lr=CFG.lr, momentum=CFG.momentum, weight_decay=CFG.weight_decay
    )
    factor = lambda s: lr_factor(s / STEPS_PER_EPOCH, SCHEDULE, CFG.epochs, CFG.lr)  # noqa: E731
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    criterion = nn.CrossEntropyLoss(label_smoothing=CFG.label_smoothing)
    for i, (x, y) in enumerate(batches(2 * STEPS_PER_EPOCH)):
        stepped = step(x, y)
        optimizer.zero_grad()
        loss = criterion(theirs(x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(theirs.parameters(), CFG.grad_clip)
        optimizer.step()
        scheduler.step()
        assert stepped.lr == pytest.approx(CFG.lr * factor(i), abs=1e-12)
        assert torch.equal(stepped.loss, loss.detach())
    assert torch.equal(flat(mine), flat(theirs))


def test_clipping_bounds_every_update() -> None:
    """Plain SGD moves the weights by lr x the clipped gradient: at most lr x grad_clip."""
    cfg = TrainConfig(lr=0.1, momentum=0.0, weight_decay=0.0, grad_clip=1e-3)
    m = model()
    step = build_step(m, cfg, "fp32", CPU, STEPS_PER_EPOCH)
    for x, y in batches(3):
        before = flat(m)
        step(x, y)
        moved = (flat(m) - before).norm().item()
        # The gradient's norm is far above the clip, so the bound is reached.
        assert moved == pytest.approx(cfg.lr * cfg.grad_clip, rel=1e-3)


def test_bf16_autocasts_forward_and_loss() -> None:
    step = build_step(model(), CFG, "bf16", CPU, STEPS_PER_EPOCH)
    stepped = step(*batches(1)[0])
    assert stepped.output.dtype == torch.bfloat16 and torch.isfinite(stepped.loss)
    assert not step.scaler.is_enabled()  # bf16 has fp32's exponent: no scaling needed


def test_fp16_scales_the_loss_and_skips_an_overflowing_step() -> None:
    m = model()
    try:
        step = build_step(m, CFG, "fp16", CPU, STEPS_PER_EPOCH)
        step(*batches(1)[0])
    except RuntimeError as e:  # fp16 autocast or gradient scaling missing on this CPU build
        pytest.skip(str(e))
    scale, before = step.scaler.get_scale(), flat(m)
    x, y = batches(1)[0]
    step(x * torch.inf, y)  # every gradient overflows
    assert torch.equal(flat(m), before)  # the optimizer step was skipped
    assert step.scaler.get_scale() == scale / 2


def test_the_timer_hook_marks_the_phases_in_order() -> None:
    class Marks(list):
        def mark(self, phase: str) -> None:
            self.append(phase)

    marks = Marks()
    step = build_step(model(), CFG, "fp32", CPU, STEPS_PER_EPOCH, timer=marks)
    step(*batches(1)[0])
    assert marks == ["forward", "backward", "optimizer"]


def test_the_step_optimizes_the_model_and_calls_the_forward_module() -> None:
    """The forward may be a wrapper (DDP, DataParallel, torch.compile); the optimizer and the
    clipping act on the model's parameters, which the wrapper shares."""
    m = model()
    calls = []

    def forward(x: torch.Tensor) -> torch.Tensor:
        calls.append(len(x))
        return m(x)

    before = flat(m)
    step = build_step(m, TrainConfig(), "fp32", CPU, STEPS_PER_EPOCH, forward=forward)
    step(*batches(1)[0])
    assert calls == [8] and not torch.equal(flat(m), before)


def test_a_distributed_optimizer_is_scheduled_and_reduced_before_clipping() -> None:
    """Horovod's shape, without Horovod: `distribute` wraps the optimizer dlperf builds and
    the schedule drives the wrapper; `reduced` surrounds clipping and the update, so that the
    all-reduce comes before the gradients are clipped."""
    events: list[str] = []

    class Wrapper(torch.optim.SGD):
        def step(self, closure: object = None) -> None:
            events.append("step")
            super().step()

    def distribute(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        return Wrapper(optimizer.param_groups)

    class Reduced:
        def __enter__(self) -> None:
            events.append("reduce")

        def __exit__(self, *_: object) -> None:
            events.append("done")

    m = model()
    clip = torch.nn.utils.clip_grad_norm_
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(nn.utils, "clip_grad_norm_", lambda *a: events.append("clip") or clip(*a))
        step = build_step(m, CFG, "fp32", CPU, STEPS_PER_EPOCH, distribute=distribute)
        step.reduced = Reduced
        lrs = [step(x, y).lr for x, y in batches(3)]
    assert isinstance(step.optimizer, Wrapper) and step.scheduler.optimizer is step.optimizer
    assert events == ["reduce", "clip", "step", "done"] * 3
    assert lrs == [CFG.lr * lr_factor(i / STEPS_PER_EPOCH, SCHEDULE, 2, CFG.lr) for i in range(3)]


@pytest.mark.parametrize(
    ("samples", "batch", "partial", "steps"),
    [
        (100, 32, False, 3),
        (100, 32, True, 4),
        (96, 32, True, 3),
        (10, 32, False, 1),
        (0, 8, True, 1),
    ],
)
def test_steps_per_epoch_counts_full_batches_or_the_partial_last_one(
    samples: int, batch: int, partial: bool, steps: int
) -> None:
    """The one count every trainer's schedule, the scale study and max-batch use: never
    fewer than one step."""
    assert steps_per_epoch(samples, batch, partial) == steps
