"""Break-it round 35, P1 (the user's own models): review of the fixers' commits (R1).

- C1, its second case: a complex parameter under run.precision = "fp16" passed the dry checks
  as the float16 ones had, and ended the run in the same scaler traceback
  ('"_amp_foreach_non_finite_check_and_unscale_cpu" not implemented for 'ComplexFloat''):
  the gradient scaler unscales real float32 gradients alone. Refused with the float16 ones.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dlperf.engine.checks import check_scaled_dtypes
from dlperf.errors import UserError


def test_c1_a_complex_parameter_under_fp16_is_refused_up_front() -> None:
    model = nn.Module()
    model.w = nn.Parameter(torch.zeros(2, 2, dtype=torch.cfloat))
    model.mid = nn.Linear(2, 2).half()
    with pytest.raises(UserError) as caught:
        check_scaled_dtypes(model, "'cplx.py:net'", "fp16")
    assert caught.value.message == (
        "model 'cplx.py:net': its trained parameters w (complex64), mid.weight, mid.bias "
        '(float16) have gradients that run.precision = "fp16"\'s gradient scaler cannot unscale'
    )
    check_scaled_dtypes(model, "'cplx.py:net'", "bf16")  # no scaler: it trains
