"""`[infer]`: `dlperf infer` and `dlperf infer bench`."""

# Section is a pydantic model, which copies a field's mutable default per instance; ruff
# knows that of pydantic's own BaseModel only, not of a subclass imported from base.py.
# ruff: noqa: RUF012

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from dlperf.config.base import Count, Points, Section
from dlperf.config.experiment import Job


class InferConfig(Section):
    """`dlperf infer` (classify images) and `dlperf infer bench` (ONNX Runtime against
    PyTorch)."""

    topk: Count = 5
    """Classes per image."""
    batch: Annotated[Points[Count], Field(min_length=1)] = [1, 8, 32]
    """bench: batch sizes, one row each. Left unset, a file exported without --dynamic-batch
    is measured at its one batch instead, with a note."""
    threads: Count | None = None
    """bench: intra-op threads of both contenders; None: all cores this process may use."""
    repeats: Count = 20
    """bench: timed calls per contender and batch."""
    torch: str | None = None
    """bench: the PyTorch contender, a stored run ID or a registry name; None: the model the
    ONNX file's metadata names."""

    @field_validator("torch", mode="before")
    @classmethod
    def _run_id(cls, value: object) -> object:
        """A bare run ID (`--set infer.torch=3`, `torch = 3`) is read as TOML's integer."""
        return str(value) if type(value) is int else value


class InferJob(Job):
    infer: InferConfig
