"""Break-it round 35, P1 (the user's own models), fixer F1b.

- C8: nn.FractionalMaxPool2d/3d, which subclass nn.Module rather than one of torch's pooling
  bases, were "other" rows: `--activations conv-pool-fc` left their outputs out (266 for the
  330 of the same network with MaxPool2d), and F.fractional_max_pool2d in a forward was not
  said uncounted as F.max_pool2d is. They are pooling rows now.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dlperf.api import analyze


@pytest.mark.parametrize(
    "pool",
    [
        nn.MaxPool2d(2),
        nn.FractionalMaxPool2d(2, output_size=4),
        nn.FractionalMaxPool2d(2, output_ratio=0.5),
    ],
    ids=["max", "fractional-size", "fractional-ratio"],
)
def test_c8_fractional_max_pooling_is_a_pool_row(pool: nn.Module) -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), pool, nn.Flatten(), nn.Linear(64, 10))
    report = analyze(model, (3, 8, 8), activations="conv-pool-fc")
    row = report.to_dict()["layers"][1]
    assert (row["role"], row["activations"]) == ("pool", 64)
    assert report.totals["activations"] == 256 + 64 + 10


def test_c8_fractional_max_pool3d_is_a_pool_row() -> None:
    model = nn.Sequential(
        nn.Conv3d(1, 2, 3, padding=1),
        nn.FractionalMaxPool3d(2, output_size=2),
        nn.Flatten(),
        nn.Linear(16, 10),
    )
    report = analyze(model, (1, 4, 4, 4), activations="conv-pool-fc")
    assert report.to_dict()["layers"][1]["role"] == "pool"
    assert report.totals["activations"] == 128 + 16 + 10


class _Functional(nn.Module):
    """A user's block pooling with F.fractional_max_pool2d in its forward."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.fractional_max_pool2d(self.conv(x), 2, output_size=4)


def test_c8_a_functional_fractional_max_pool_is_said_uncounted() -> None:
    """As F.max_pool2d in a forward is: a layer call whose output no row counts, said."""
    model = nn.Sequential(_Functional(), nn.Flatten(), nn.Linear(64, 10))
    with pytest.warns(UserWarning, match=r"F\.fractional_max_pool2d x1"):
        analyze(model, (3, 8, 8), activations="conv-pool-fc")
