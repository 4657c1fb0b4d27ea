"""Checks that a model and its data go together, made before anything is recorded or exported,
so that a mismatch is one line of bad input rather than a failure mid-run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from dlperf.errors import UserError

if TYPE_CHECKING:
    from dlperf.data import ImageData


def dry_forward(
    model: nn.Module, shape: Sequence[int], rejects: str, device: torch.device | None = None
) -> None:
    """One forward of two zero images of `shape`, in eval mode and without gradients: sizes
    lazy layers (neither the optimizer nor the exporter can use uninitialised parameters) and
    turns a model that rejects the shape into the error "`rejects`: first line of the cause"."""
    model.eval()
    try:
        with torch.no_grad():
            model(torch.zeros(2, *shape, device=device))
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0]
        if out_of_memory(e):
            raise UserError(
                f"out of memory in a forward of two {tuple(shape)} images on {device or 'cpu'}: "
                f"{first}",
                "a smaller model or input, or a device with more memory",
            ) from None
        raise UserError(f"{rejects}: {first}") from None


# What cuBLAS, cuDNN and torch's CPU allocator say when an allocation fails: a plain
# RuntimeError, not torch's OutOfMemoryError.
OOM_MESSAGES = (
    "out of memory",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUDNN_STATUS_ALLOC_FAILED",
    "DefaultCPUAllocator: not enough memory",
)


def out_of_memory(e: BaseException) -> bool:
    """Whether `e` says the device (or the host) ran out of memory."""
    if isinstance(e, MemoryError | torch.cuda.OutOfMemoryError):
        return True
    return isinstance(e, RuntimeError) and any(m in str(e) for m in OOM_MESSAGES)


def check_batch_fits(batch_size: int, data: ImageData) -> None:
    """A training batch must not be larger than the training split: with the last partial
    batch dropped, an epoch would have no steps."""
    if batch_size > len(data.train):
        raise UserError(
            f"train.batch_size {batch_size} is larger than the {len(data.train)} "
            f"training images of {data.name}",
            f"use train.batch_size <= {len(data.train)}",
        )
