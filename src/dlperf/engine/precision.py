"""Precision names to torch dtypes; the names are `dlperf.config.Precision`, as run.precision
and the analysis commands spell them (tests/test_config.py checks the two agree)."""

from __future__ import annotations

import torch

DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


def autocast(device: torch.device, precision: str) -> torch.autocast:
    """Autocast at `precision` on `device`'s kind; disabled for fp32."""
    return torch.autocast(device.type, DTYPES[precision], precision != "fp32")
