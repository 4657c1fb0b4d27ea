"""MAC conventions (dlperf.analytic.conventions): dlperf's own and the peers' (torchinfo,
ptflops, fvcore), each on one small network worked out by hand from the peer's code.

The network: Conv2d(3, 8, 3, padding=1) with bias, BatchNorm2d(8), ReLU, MaxPool2d(2),
Flatten, Linear(128, 10) with bias, on one 3x8x8 image. Its parts:
- conv: 64 output positions x 8 filters x 27 products = 13,824 weight products; its
  216 + 8 parameters; 512 outputs (8 x 8 x 8), 8 x 64 = 512 bias adds
- batch norm (eval, affine): 512 inputs, 16 parameters
- ReLU: 512 outputs; max pooling: 512 inputs, 128 outputs
- linear: 128 x 10 = 1,280 weight products, 1,290 parameters, 10 bias adds
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dlperf.analytic.counting import analyze, analyze_module
from dlperf.errors import UserError
from tests.conftest import CliResult

Cli = Callable[..., CliResult]


def net() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(128, 10),
    )  # fmt: skip


EXPECTED = {
    # weight products only
    "dlperf": 13_824 + 1_280,
    # torchinfo: each leaf's parameters x its output positions: the conv's (216 + 8) x 64
    # (N x H x W), batch norm's 16 x 1 (N), the linear layer's 1,290 x 1 (N)
    "torchinfo": 224 * 64 + 16 + 1_290,
    # ptflops: conv 13,824 + 512 bias adds; batch norm 512 inputs x 2 (affine); ReLU 512
    # outputs; max pooling 512 inputs; linear 1,280 + 10 bias adds
    "ptflops": 13_824 + 512 + 2 * 512 + 512 + 512 + 1_290,
    # fvcore: conv and linear products without bias; batch norm in eval 2 per element
    # (affine); nothing for ReLU or max pooling
    "fvcore": 13_824 + 2 * 512 + 1_280,
}


@pytest.mark.parametrize(("convention", "macs"), EXPECTED.items())
def test_each_convention_on_a_hand_worked_network(convention: str, macs: int) -> None:
    a = analyze_module(net(), [3, 8, 8])
    a.macs_convention = convention
    t = a.totals()
    assert t["macs"] == macs == sum(row["macs"] for row in a.to_dict()["layers"])
    # FLOPs stay dlperf's whatever the MACs count
    assert t["flops"] == 2 * (13_824 + 1_280) + 512 + 4 * 512 + 512 + 4 * 128 + 10
    assert a.to_dict()["conventions"]["macs"] == convention


def test_the_peers_count_per_batch_as_dlperf_does() -> None:
    a = analyze_module(net(), [3, 8, 8], batch=3)
    a.macs_convention = "torchinfo"
    assert a.totals()["macs"] == 3 * EXPECTED["torchinfo"]
    a.macs_convention = "fvcore"
    assert a.totals()["macs"] == 3 * EXPECTED["fvcore"]
    a.macs_convention = "ptflops"  # its linear bias adds are per row, too
    assert a.totals()["macs"] == 3 * EXPECTED["ptflops"]


class FunctionalPool(nn.Module):
    """MobileNetV2's head pools with F.adaptive_avg_pool2d, not a module."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_avg_pool2d(x, (1, 1))


def test_fvcore_counts_norms_without_affine_and_upsampling() -> None:
    """fvcore: batch norm in eval 1 per element without an affine weight; a norm computing
    statistics 4 per element (5 with one); bilinear upsampling 4 per output, nearest 1;
    adaptive average pooling 1 per input."""
    cases = [
        (nn.BatchNorm2d(2, affine=False), [2, 3, 3], 18),
        (nn.LayerNorm(6), [4, 6], 5 * 24),
        (nn.GroupNorm(1, 2, affine=False), [2, 3, 3], 4 * 18),
        (nn.Upsample(scale_factor=2, mode="bilinear"), [1, 3, 3], 4 * 36),
        (nn.Upsample(scale_factor=2, mode="nearest"), [1, 3, 3], 36),
        (nn.AdaptiveAvgPool2d(1), [2, 4, 4], 32),
        (FunctionalPool(), [2, 4, 4], 32),  # ATen sees `mean`; fvcore's tracer the pool
    ]
    for module, shape, macs in cases:
        a = analyze_module(module, shape)
        a.macs_convention = "fvcore"
        assert a.totals()["macs"] == macs, module


def test_ptflops_counts_layer_norm_once_and_upsampling_per_output() -> None:
    """ptflops doubles a norm's count only when the module has `affine` (LayerNorm has
    `elementwise_affine`), and counts nn.Upsample 1 per output whatever the mode."""
    for module, shape, macs in [
        (nn.LayerNorm(6), [4, 6], 24),
        (nn.Linear(6, 2), [3, 6], 3 * (6 + 1) * 2),  # per row: weights and a bias add
        # a 2x2 kernel window of 3 x 2 products per input position (9), a bias add per
        # output (2 x 4 x 4)
        (nn.ConvTranspose2d(3, 2, 2, stride=2, padding=1), [3, 3, 3], 9 * 4 * 3 * 2 + 32),
        (nn.InstanceNorm2d(2, affine=True), [2, 3, 3], 36),
        (nn.Upsample(scale_factor=2, mode="bilinear"), [1, 3, 3], 36),
        (nn.GELU(), [5], 5),
        (nn.Sigmoid(), [5], 0),  # no hook in ptflops' table
    ]:
        a = analyze_module(module, shape)
        a.macs_convention = "ptflops"
        assert a.totals()["macs"] == macs, module


def test_a_peer_convention_is_refused_where_it_cannot_be_honoured() -> None:
    with pytest.raises(UserError, match="the peers count a forward pass only"):
        analyze("resnet20", train=True, macs_convention="fvcore")
    with pytest.raises(UserError, match="use dlperf, torchinfo, ptflops, fvcore"):
        analyze("resnet20", macs_convention="thop")


def test_cli_says_the_convention_in_the_table_and_the_json(cli: Cli) -> None:
    doc = json.loads(cli("analyze", "resnet20", "--json").out)
    assert doc["conventions"]["macs"] == "dlperf"
    assert doc["conventions"]["macs_counts"].startswith("weight products only")
    table = cli("analyze", "resnet20").out
    assert "MACs (dlperf)" in table and "weight products only" in table
    given = cli("analyze", "resnet20", "--macs-convention", "torchinfo", "--json")
    doc = json.loads(given.out)
    assert doc["conventions"]["macs"] == "torchinfo"
    # resnet20's convolutions have no bias; torchinfo adds its 2 x 16/32/64 batch-norm
    # parameters once per image and the head's 650 parameters: 40,551,040 weight products
    # minus the head's 640, plus the rest
    bn = 2 * (16 * 7 + 32 * 6 + 64 * 6)
    assert doc["totals"]["macs"] == 40_551_040 - 640 + bn + 650
    table = cli("analyze", "resnet20", "--macs-convention", "ptflops").out
    assert "MACs (ptflops)" in table and "ptflops (pytorch backend)" in table
    set_key = cli("analyze", "resnet20", "--set", "analyze.macs_convention=fvcore", "--json")
    assert json.loads(set_key.out)["conventions"]["macs"] == "fvcore"
