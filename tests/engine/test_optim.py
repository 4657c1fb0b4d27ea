"""dlperf.engine.optim: parameter groups (head at train.lr, backbone scaled), the optimizer a
config builds, and the learning-rate factor of each schedule checked by hand."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from dlperf.config import ScheduleConfig, TrainConfig
from dlperf.engine.optim import build_optimizer, build_scheduler, lr_factor, param_groups


def net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(2, 3))


def test_warmup_is_linear_from_zero() -> None:
    cfg = ScheduleConfig(kind="cosine", warmup_epochs=2)
    assert lr_factor(0, cfg, 10, 0.1) == 0
    assert lr_factor(0.5, cfg, 10, 0.1) == pytest.approx(0.25)
    assert lr_factor(1.5, cfg, 10, 0.1) == pytest.approx(0.75)


def test_multistep_multiplies_by_gamma_at_each_milestone_reached() -> None:
    cfg = ScheduleConfig(kind="multistep", milestones=[3, 6], gamma=0.5)
    assert [lr_factor(e, cfg, 10, 0.1) for e in (0, 2.99, 3, 5, 6, 9)] == [
        1, 1, 0.5, 0.5, 0.25, 0.25
    ]  # fmt: skip


def test_cosine_falls_from_one_to_the_floor_after_the_warmup() -> None:
    cfg = ScheduleConfig(kind="cosine", warmup_epochs=2, min_lr=0.01)
    floor = 0.01 / 0.1
    assert lr_factor(2, cfg, 10, 0.1) == pytest.approx(1.0)
    # halfway through the 8 epochs after the warm-up: cos(pi/2) = 0
    assert lr_factor(6, cfg, 10, 0.1) == pytest.approx(floor + (1 - floor) * 0.5)
    assert lr_factor(10, cfg, 10, 0.1) == pytest.approx(floor)
    assert lr_factor(20, cfg, 10, 0.1) == pytest.approx(floor)  # clamped past the end
    assert lr_factor(5, ScheduleConfig(kind="cosine"), 10, 0.0) == pytest.approx(
        0.5 * (1 + math.cos(math.pi * 0.5))
    )  # a zero rate has no floor to divide by


def test_constant_is_one_after_the_warmup() -> None:
    assert lr_factor(0.5, ScheduleConfig(warmup_epochs=1), 10, 0.1) == 0.5
    assert lr_factor(1, ScheduleConfig(warmup_epochs=1), 10, 0.1) == 1.0


def test_one_group_of_the_trainable_parameters_without_a_backbone_scale() -> None:
    model = net()
    model[0].weight.requires_grad_(False)
    [group] = param_groups(model, TrainConfig())
    assert len(group["params"]) == 3 and "lr" not in group


def test_the_head_comes_first_and_the_backbone_gets_the_scaled_rate() -> None:
    model = net()
    head, backbone = param_groups(model, TrainConfig(lr=0.2, backbone_lr_scale=0.1))
    assert head["params"] == list(model[2].parameters()) and "lr" not in head
    assert backbone["params"] == list(model[0].parameters())
    assert backbone["lr"] == pytest.approx(0.02)


def test_a_frozen_backbone_gives_no_group_of_its_own() -> None:
    model = net()
    for p in model[0].parameters():
        p.requires_grad_(False)
    groups = param_groups(model, TrainConfig(backbone_lr_scale=0.1))
    assert len(groups) == 1


def test_the_optimizer_takes_the_config() -> None:
    sgd = build_optimizer(net(), TrainConfig(lr=0.3, momentum=0.8, nesterov=True))
    assert isinstance(sgd, torch.optim.SGD)
    assert sgd.defaults["nesterov"] is True and sgd.defaults["momentum"] == 0.8
    adamw = build_optimizer(net(), TrainConfig(optimizer="adamw", momentum=0.7, weight_decay=0.1))
    assert isinstance(adamw, torch.optim.AdamW)
    assert adamw.defaults["betas"] == (0.7, 0.999) and adamw.defaults["weight_decay"] == 0.1


def test_the_scheduler_steps_per_step_and_keeps_each_groups_peak() -> None:
    cfg = TrainConfig(
        lr=0.2, backbone_lr_scale=0.5, epochs=4, schedule=ScheduleConfig(warmup_epochs=1)
    )
    optimizer = build_optimizer(net(), cfg)
    scheduler = build_scheduler(optimizer, cfg, steps_per_epoch=4)
    assert [g["lr"] for g in optimizer.param_groups] == [0, 0]  # step 0 of the warm-up
    for _ in range(2):
        optimizer.step()
        scheduler.step()
    # step 2 of 4 in the first epoch: half the warm-up
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([0.1, 0.05])
