"""`[distill]`: teacher-student training on pseudo-labels (`dlperf distill`)."""

# Section is a pydantic model, which copies a field's mutable default per instance; ruff
# knows that of pydantic's own BaseModel only, not of a subclass imported from base.py.
# ruff: noqa: RUF012

from __future__ import annotations

import json
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


class Unlabeled(str):
    """distill.unlabeled's value and where it was given, for the pool's errors to name: a
    value from the file's [distill] section or from --set named a --unlabeled the user never
    typed. `source` is the config's words, as its other keys' errors say them ("dist.toml",
    "dist.toml with --set"); "" for the --unlabeled flag."""

    source: str

    def __new__(cls, spec: str, source: str = "") -> Unlabeled:
        self = super().__new__(cls, spec)
        self.source = source
        return self

    def where(self) -> str:
        """The value as its errors begin: where it came from and what it was."""
        return f"{self.source}: {self.given(self)}" if self.source else self.given(self)

    def given(self, spec: str) -> str:
        """How to give `spec` instead, where this value was given: the flag, or the key."""
        if not self.source:
            return f"--unlabeled {spec}"
        return f"distill.unlabeled = {json.dumps(spec, ensure_ascii=False)}"
