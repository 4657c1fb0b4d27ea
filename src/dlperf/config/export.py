"""`[export]`: the ONNX file's form and the parity tolerance of `dlperf export`."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from dlperf.config.base import Count, NonNegative, Section
from dlperf.config.experiment import Job


class ExportConfig(Section):
    """`dlperf export`: the ONNX file's form, a registry model's input and classes, and the
    parity tolerance."""

    input: Annotated[list[Count], Field(min_length=3, max_length=3)] | None = None
    """C,H,W of a registry model's input; its normalisation is then mean 0.5, std 0.5. None:
    3,224,224 with ImageNet's mean and std."""
    # At least 2, as a run's data.num_classes: a softmax over one score is 1.0 for every image.
    num_classes: Annotated[int, Field(ge=2, lt=2**31)] | None = None
    """Classes of a registry model, at least 2; None: the model's (10)."""
    opset: Count | None = None
    """ONNX opset; None: the exporter's."""
    dynamic_batch: bool = False
    """Any batch size; false: a fixed batch of 1."""
    single_file: bool = False
    """Weights inside the .onnx file, no MODEL.onnx.data beside it."""
    rtol: NonNegative = 1e-3
    """Parity: relative tolerance, |onnx - torch| <= atol + rtol * |torch|."""
    atol: NonNegative = 1e-5
    """Parity: absolute tolerance."""


class ExportJob(Job):
    export: ExportConfig
