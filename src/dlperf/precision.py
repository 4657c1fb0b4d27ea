"""Precision names to torch dtypes; the names are `dlperf.config.Precision`, as run.precision
and the analysis commands spell them (tests/test_config.py checks the two agree)."""

from __future__ import annotations

import torch

from dlperf.errors import UserError

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


def check_default_dtype() -> None:
    """Refuse a torch default dtype other than float32 (the caller's torch.set_default_dtype):
    dlperf builds models in it and casts them to a precision, so under float64 a run stored as
    fp32 trained in float64, and analyze failed on its fp32 input blaming the model."""
    dtype = torch.get_default_dtype()
    if dtype != torch.float32:
        raise UserError(
            f"torch's default dtype is {dtype} (torch.set_default_dtype); dlperf builds models "
            "in float32 and casts them to the precision asked for",
            "set it back with torch.set_default_dtype(torch.float32)",
        )
