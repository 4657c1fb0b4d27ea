"""Optimizers and learning-rate schedules (stepped once per training step)."""

from __future__ import annotations

import importlib
import math
from typing import Any

import torch
from torch import nn

from dlperf import stopping
from dlperf.config import ScheduleConfig, TrainConfig
from dlperf.models.transfer import split_params


def param_groups(model: nn.Module, cfg: TrainConfig) -> list[dict[str, Any]]:
    """The trainable parameters: one group, or the head's at train.lr then the backbone's at
    train.lr x backbone_lr_scale (the head first, so the logged rate is the peak rate's)."""
    if cfg.backbone_lr_scale == 1:
        return [{"params": [p for p in model.parameters() if p.requires_grad]}]
    backbone, head = ([p for p in params if p.requires_grad] for params in split_params(model))
    groups: list[dict[str, Any]] = [{"params": head}]
    if backbone:  # none when feature extraction froze it
        groups.append({"params": backbone, "lr": cfg.lr * cfg.backbone_lr_scale})
    return groups


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    params = param_groups(model, cfg)
    with stopping.deferred():
        # torch.optim imports torch._dynamo at an optimizer's first use (and with it torch.fx,
        # sympy, torch._inductor: some 870 modules, seconds). A Ctrl-C landing inside left
        # torch half-imported, its operators registered, and every later run in the process
        # (a notebook's) failed: the import is made here, whole, the Ctrl-C raised after it.
        importlib.import_module("torch._dynamo")
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(
            params, lr=cfg.lr, betas=(cfg.momentum, 0.999), weight_decay=cfg.weight_decay
        )
    return torch.optim.SGD(
        params,
        lr=cfg.lr,
        momentum=cfg.momentum,
        nesterov=cfg.nesterov,
        weight_decay=cfg.weight_decay,
    )


def lr_factor(epoch: float, cfg: ScheduleConfig, epochs: int, base_lr: float) -> float:
    """Multiplier of the peak rate at fractional epoch `epoch` (0 = start of training)."""
    if cfg.warmup_epochs and epoch < cfg.warmup_epochs:
        return epoch / cfg.warmup_epochs
    if cfg.kind == "multistep":
        return cfg.gamma ** sum(epoch >= m for m in cfg.milestones)
    if cfg.kind == "cosine":
        start = cfg.warmup_epochs
        progress = min(1.0, (epoch - start) / max(epochs - start, 1e-9))
        floor = cfg.min_lr / base_lr if base_lr else 0.0
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
    return 1.0


def build_scheduler(
    optimizer: torch.optim.Optimizer, cfg: TrainConfig, steps_per_epoch: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """`cfg.schedule` over `cfg.epochs` epochs of `steps_per_epoch` steps, stepped per step."""
    # One factor for every group: each keeps its own peak rate (head, scaled backbone).
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step / steps_per_epoch, cfg.schedule, cfg.epochs, cfg.lr)
    )
