"""Optimizers and learning-rate schedules (stepped once per training step)."""

from __future__ import annotations

import importlib
import math
from typing import Any

import torch
from torch import nn

from dlperf import stopping
from dlperf.config import ScheduleConfig, TrainConfig
from dlperf.errors import MemoryRanOut, error_text, limit_words
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


def load_optimizers() -> None:
    """Import what an optimizer's first use imports: torch._dynamo (and with it torch.fx,
    sympy, torch._inductor: some 870 modules, seconds, and about 270 MiB of address space:
    VmPeak 3,222,256 KiB after `import dlperf, torch`, 3,499,228 after it, measured).
    `run` and `run --resume` call it before the run is recorded or taken over: made at the
    first optimizer build, under a `ulimit -v` just above torch's own check it ran out after,
    and the run was stored `failed` with "MemoryError: " (a resumed one too, `killed` before).
    Short of memory under a set limit, one line naming the limit (MemoryRanOut, exit 1)."""
    try:
        with stopping.deferred():
            # A Ctrl-C landing inside left torch half-imported, its operators registered, and
            # every later run in the process (a notebook's) failed: the import is made whole,
            # the Ctrl-C raised after it.
            importlib.import_module("torch._dynamo")
    except (MemoryError, SystemError) as e:  # an extension's init that ran out: SystemError
        words = limit_words()
        if words is None:  # the machine's memory, not a limit's: as it was raised
            raise
        said = error_text(e)
        raise MemoryRanOut(
            f"cannot load torch._dynamo, which the optimizers need: {type(e).__name__}"
            + (f": {said}" if said else ""),
            words,
        ) from None


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    params = param_groups(model, cfg)
    load_optimizers()  # loaded already where a run was checked before it was recorded
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
