"""`[distill]`: teacher-student training on pseudo-labels (`dlperf distill`)."""

# Section is a pydantic model, which copies a field's mutable default per instance; ruff
# knows that of pydantic's own BaseModel only, not of a subclass imported from base.py.
# ruff: noqa: RUF012

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from dlperf.config.base import Count, Points, Rate, Section
from dlperf.config.experiment import Job
from dlperf.parsing import absolute_model_name


class DistillConfig(Section):
    """`dlperf distill`: teacher-student training on pseudo-labels (Yalniz et al. 2019)."""

    unlabeled: str | None = None
    """The unlabelled images: NAME[:KEY=VALUE,...] (a data set and data.* keys, e.g.
    "mnist5k:image_size=8"), or NAME:holdout=F (a share of the experiment's own training split,
    its labels hidden)."""
    top_k: Annotated[Points[Count], Field(min_length=1)] = [100]
    """Images kept per class, one student each: the K the teacher scores highest."""
    top_p: Count = 1
    """Classes an image may be kept for: its P highest-scored."""
    teacher: Count | None = None
    """A finished stored run to use as the teacher; None: train it from the experiment."""
    student: str | None = None
    """The student's model name; None: the experiment's model."""
    pretrain_epochs: Count | None = None
    """Epochs of the student's pre-training on pseudo-labels; None: train.epochs."""
    finetune_epochs: Count | None = None
    """Epochs of the student's fine-tuning on the labelled data; None: train.epochs."""
    finetune_lr: Rate | None = None
    """Learning rate of the fine-tuning; None: train.lr."""
    score_batch: Count = 256
    """Images per forward pass when the teacher scores the unlabelled set."""

    @field_validator("student")
    @classmethod
    def _file_absolute(cls, student: str | None) -> str | None:
        # As model.name is resolved, so that a student naming the experiment's model file is it
        return None if student is None else absolute_model_name(student)


class DistillJob(Job):
    distill: DistillConfig
