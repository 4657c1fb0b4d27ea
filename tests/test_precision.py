"""dlperf.precision: names to dtypes, what a count at a precision describes, autocast."""

from __future__ import annotations

import pytest
import torch

from dlperf import precision
from dlperf.config.base import PRECISIONS


def test_dtypes_cover_every_configured_precision_and_map_to_their_torch_dtype() -> None:
    assert set(precision.DTYPES) == set(PRECISIONS)
    assert precision.DTYPES["fp32"] is torch.float32
    assert precision.DTYPES["bf16"] is torch.bfloat16
    assert precision.DTYPES["fp16"] is torch.float16


def test_counted_as_fp32_is_plain() -> None:
    assert precision.counted_as("fp32") == "fp32"


@pytest.mark.parametrize("name", ["bf16", "fp16"])
def test_counted_as_a_low_precision_says_the_model_is_cast_not_autocast(name: str) -> None:
    text = precision.counted_as(name)
    assert text.startswith(f"the model cast to {name} ")
    assert f"a {name} run trains under autocast" in text
    assert "stay fp32" in text


def test_autocast_is_disabled_for_fp32() -> None:
    ctx = precision.autocast(torch.device("cpu"), "fp32")
    with ctx:
        y = torch.ones(2, 2) @ torch.ones(2, 2)
    assert y.dtype is torch.float32


def test_autocast_bf16_on_cpu_runs_matmul_in_bf16() -> None:
    with precision.autocast(torch.device("cpu"), "bf16"):
        y = torch.ones(2, 2) @ torch.ones(2, 2)
    assert y.dtype is torch.bfloat16
    assert torch.equal(y.float(), torch.full((2, 2), 2.0))


def test_autocast_refuses_an_unknown_precision_name() -> None:
    with pytest.raises(KeyError):
        precision.autocast(torch.device("cpu"), "fp8")
