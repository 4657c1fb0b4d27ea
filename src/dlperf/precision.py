"""Precision names to torch dtypes; the names are `dlperf.config.Precision`, as run.precision
and the analysis commands spell them (tests/test_config.py checks the two agree)."""

from __future__ import annotations

import torch

DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


def counted_as(precision: str) -> str:
    """What a count or a kernel timing at `precision` describes. They cast the model and its
    input to the dtype, while a run at the same precision trains under autocast, which keeps
    reductions, losses and normalisation in fp32: the same name, a different program."""
    if precision == "fp32":
        return "fp32"
    return (
        f"the model cast to {precision} (a {precision} run trains under autocast: "
        "reductions, losses and normalisation stay fp32)"
    )


def autocast(device: torch.device, precision: str) -> torch.autocast:
    """Autocast at `precision` on `device`'s kind; disabled for fp32."""
    return torch.autocast(device.type, DTYPES[precision], precision != "fp32")
