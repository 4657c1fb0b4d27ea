"""`[detect]`: what is detection's own in `dlperf detect finetune | eval` (the detector, its
splits, how AP is measured). Training reads the experiment's [train] and [run] like every
trainer, over detection's recipe (`PRESET`) instead of the classifier's defaults."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from dlperf.config.base import Section
from dlperf.config.experiment import Job

# The recipe that learns the make-shapes set from random weights on a 2-core CPU within
# 5 minutes (docs/course.md): AdamW at 3e-3 reaches mAP 0.38 in 10 epochs where SGD at 0.05
# stays at 0.01, and 0.58 in 20, where the boxes that matter score above detect run's 0.5.
# It lies beneath the user's file: a [train] that gives only lr keeps the 20 epochs.
PRESET: dict[str, Any] = {
    "train": {
        "epochs": 20,
        "batch_size": 8,
        "optimizer": "adamw",
        "lr": 0.003,
        "weight_decay": 1e-4,
        "schedule": {"kind": "cosine"},
    },
    # The first step allocates and fills the allocator's and the kernels' caches.
    "run": {"warmup_steps": 1},
}

# The [detect] keys of dlperf 0.x that [train] and [run] hold now: a file or --set that
# still gives one is refused with its new name (configs.check_keys).
MOVED = {
    "epochs": "train.epochs",
    "batch": "train.batch_size",
    "optimizer": "train.optimizer",
    "lr": "train.lr",
    "momentum": "train.momentum",
    "weight_decay": "train.weight_decay",
    "seed": "run.seed",
    "threads": "run.threads",
    "precision": "run.precision",
}


class DetectConfig(Section):
    """`dlperf detect finetune | eval`: the detector, its data splits and how AP is measured
    (training's recipe is [train] and [run])."""

    model: str = "ssdlite320_mobilenet_v3_large"
    """ssdlite320_mobilenet_v3_large | ssd300_vgg16 | ssd300_mobilenet_v1."""
    # The model-dependent rules (a multiple of 32; 300 only for the SSD300s) are checked where
    # the detector is built, as for `detect export --size`; this is the range they share.
    size: Annotated[int, Field(ge=96, le=640)] | None = None
    """Square input side, a multiple of 32 (the SSD300s: 300 only); None: the side the
    weights were trained at; without weights, the images' longer side rounded up to a
    multiple of 32, from 96 up to the model's (320 or 300): 96 for make-shapes' set."""
    train_split: str = "train"
    """ImageSets/Main split to train on."""
    val_split: str = "val"
    """ImageSets/Main split AP@0.5 is measured on, before and after."""
    ap_method: Literal["area", "11point"] = "area"
    """area: all-point AP (VOC2010+); 11point: the VOC2007 devkit's."""


class DetectJob(Job):
    preset: ClassVar[dict[str, Any]] = PRESET
    detect: DetectConfig

    def check(self) -> str | None:
        """Detection honours train.grad_clip, nesterov and schedule and run.device; these it
        cannot, and says so rather than ignore them."""
        train, run = self.experiment.train, self.experiment.run
        refused = {
            # the detector's forward takes a list of images of their own sizes
            "run.compile": run.compile,
            "run.channels_last": run.channels_last,
            # its loss is SSD's (box regression + hard-negative mining), not cross-entropy
            "train.label_smoothing": train.label_smoothing != 0,
            # a detector has no single classifier head to set apart from a backbone
            "train.backbone_lr_scale": train.backbone_lr_scale != 1,
            "run.profile.enabled": run.profile.enabled,
            "run.timing": run.timing == "phases",
        }
        given = [key for key, on in refused.items() if on]
        if not given:
            return None
        return f"{', '.join(given)}: detection cannot honour {'them' if len(given) > 1 else 'it'}"
