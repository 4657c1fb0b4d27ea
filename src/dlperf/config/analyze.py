"""`[analyze]`: the input, batch and precision a model is counted at (`dlperf analyze`, and
the counting `dlperf predict` predicts from)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from dlperf.config.base import Count, Precision, Section
from dlperf.config.experiment import Job


class AnalyzeConfig(Section):
    """`dlperf analyze`, and the counting `dlperf predict` predicts from: the input, batch and
    precision a model is counted at, and what the totals include."""

    input: Annotated[list[Count], Field(min_length=1)] | None = None
    """Input shape without the batch, e.g. [3, 224, 224]; None: 3,224,224 for torchvision's
    models, 3,32,32 otherwise."""
    batch: Count = 1
    """Batch size."""
    train: bool = False
    """Count a training step: forward + backward and training memory."""
    precision: Precision = "fp32"
    """fp32 | fp16 | bf16: the dtype of weights and activations."""
    classes: Count | None = None
    """Output classes; None: 1000 for torchvision's models, 10 for dlperf's, a model file's
    factory's own num_classes default."""
    bias: bool = True
    """Count parameters with biases (false: without parameters named *bias, as tables that
    ask for params 'without biases' do)."""
    activations: Literal["all", "conv-pool-fc"] = "all"
    """Whose outputs the activation totals count: all (every row) or conv-pool-fc
    (convolution, pooling and linear layers only, as course tables count them)."""
    macs_convention: Literal["dlperf", "torchinfo", "ptflops", "fvcore"] = "dlperf"
    """Whose MACs to count: dlperf (weight products only; bias adds, normalisation and
    pooling in FLOPs), or torchinfo's, ptflops' or fvcore's, to reproduce a table they made."""


class AnalyzeJob(Job):
    counts_only: ClassVar[bool] = True
    analyze: AnalyzeConfig
