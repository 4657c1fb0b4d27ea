"""Precision names, as `run.precision` and the analysis commands spell them, to torch dtypes."""

from __future__ import annotations

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
