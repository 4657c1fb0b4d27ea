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


class Product(nn.Module):
    """One product of the flattened image h (1 x 64) and a weight w (64 x 10), written as
    `op`: fvcore's tracer records the torch-level call (aten::matmul for `@`, aten::mm for
    torch.mm), and its op table counts addmm, bmm, einsum, matmul and linear, not mm, mv,
    dot, baddbmm or addmv."""

    def __init__(self, op: str) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(64, 10))
        self.b = nn.Parameter(torch.zeros(10))
        self.op = op

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w, b = x.flatten(1), self.w, self.b
        products: dict[str, Callable[[], torch.Tensor]] = {
            "matmul": lambda: h @ w,
            "torch.matmul": lambda: torch.matmul(h, w),
            "linear": lambda: F.linear(h, w.t(), b),
            "addmm": lambda: torch.addmm(b, h, w),
            "bmm": lambda: torch.bmm(h[None], w[None])[0],
            "einsum": lambda: torch.einsum("bi,ij->bj", h, w),
            # fvcore's matmul: the first operand's elements x the second's last dimension,
            # whatever the broadcast (dlperf's own count: 3 x 640)
            "broadcast": lambda: torch.matmul(h, w.expand(3, 64, 10)).mean(0),
            "mm": lambda: torch.mm(h, w),
            "mv": lambda: torch.mv(w.t(), h[0])[None],
            "addmv": lambda: torch.addmv(b, w.t(), h[0])[None],
            "dot": lambda: torch.dot(h[0], h[0]) * w.sum(0)[None],
            "baddbmm": lambda: torch.baddbmm(b[None, None], h[None], w[None])[0],
        }
        return products[self.op]()


FVCORE_PRODUCTS = {"matmul": 640, "torch.matmul": 640, "linear": 640, "addmm": 640, "bmm": 640,
                   "einsum": 640, "broadcast": 640, "mm": 0, "mv": 0, "addmv": 0, "dot": 0,
                   "baddbmm": 0}  # fmt: skip


@pytest.mark.parametrize(("op", "macs"), FVCORE_PRODUCTS.items())
def test_fvcore_counts_the_products_its_op_table_has(op: str, macs: int) -> None:
    a = analyze_module(Product(op), [1, 8, 8])
    a.macs_convention = "fvcore"
    assert a.totals()["macs"] == macs


class Attention(nn.Module):
    def __init__(self, masked: bool) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.mask = torch.zeros(4, 4) if masked else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.attn(x, x, x, attn_mask=self.mask)[0]
        return out


def test_fvcore_counts_attention_and_spectral_norm_as_its_tracer_sees_them() -> None:
    """nn.MultiheadAttention (4 positions of 8, 2 heads) runs, as fvcore traces it, a packed
    input projection (linear: 32 x 24 = 768), q @ k^T and p @ v (bmm: 2 x 4 x 4 x 4 = 128
    each) and the output projection (linear: 32 x 8 = 256); with a mask q @ k^T is a
    baddbmm, which fvcore does not count. spectral_norm's torch.mv and torch.dot are not
    counted either: the Linear's 16 x 16 products alone."""
    for module, shape, macs in [
        (Attention(masked=False), [4, 8], 768 + 128 + 128 + 256),
        (Attention(masked=True), [4, 8], 768 + 128 + 256),
        (nn.utils.parametrizations.spectral_norm(nn.Linear(16, 16)), [16], 256),
    ]:
        a = analyze_module(module, shape)
        a.macs_convention = "fvcore"
        assert a.totals()["macs"] == macs, module
