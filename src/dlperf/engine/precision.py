"""Precision names, as `run.precision` and the analysis commands spell them, to torch dtypes."""

from __future__ import annotations

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(device: torch.device, precision: str) -> torch.autocast:
    """Autocast at `precision` on `device`'s kind; disabled for fp32."""
    return torch.autocast(device.type, DTYPES[precision], precision != "fp32")
