"""Receptive fields worked out by hand with size += (k'-1) jump, start += ((k'-1)/2 - p) jump."""

from __future__ import annotations

import torch
from torch import nn

from dlperf.analytic.counting import analyze, analyze_module


def field(model: nn.Module, shape: list[int]) -> dict:
    return analyze_module(model, shape).receptive_field


def test_two_3x3_convs() -> None:
    rf = field(
        nn.Sequential(nn.Conv2d(1, 1, 3, padding=1), nn.Conv2d(1, 1, 3, padding=1)), [1, 8, 8]
    )
    assert rf == {"defined": True, "size": [5, 5], "jump": [1, 1], "start": [0.5, 0.5]}


def test_stride_multiplies_the_jump() -> None:
    net = nn.Sequential(nn.Conv2d(1, 1, 3, stride=2, padding=1), nn.Conv2d(1, 1, 3, padding=1))
    rf = field(net, [1, 8, 8])
    assert (rf["size"], rf["jump"], rf["start"]) == ([7, 7], [2, 2], [0.5, 0.5])


def test_resnet_stem_conv7_and_maxpool() -> None:
    net = nn.Sequential(nn.Conv2d(3, 4, 7, 2, 3), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
    rf = field(net, [3, 32, 32])
    assert (rf["size"], rf["jump"], rf["start"]) == ([11, 11], [4, 4], [0.5, 0.5])


def test_dilation_and_no_padding_move_the_start() -> None:
    rf = field(nn.Conv2d(1, 1, 3, dilation=2), [1, 9, 9])
    assert (rf["size"], rf["start"]) == ([5, 5], [2.5, 2.5])


def test_rectangular_kernel() -> None:
    rf = field(nn.Conv2d(1, 1, (1, 7), padding=(0, 3)), [1, 9, 9])
    assert rf["size"] == [1, 7]


def test_residual_network_with_strided_shortcuts() -> None:
    # conv1 3 -> +2x6 = 15 (jump 1) -> +2 +4x5 = 37 (jump 2) -> +4 +8x5 = 81 (jump 4);
    # the option-A shortcuts (slicing ::2) only ever see a subset of that field.
    rf = analyze("resnet20").receptive_field
    assert not rf["defined"]
    assert rf["reason"].startswith("global pooling mixes all positions: aten.mean in pool")
    assert (rf["last_spatial_layer"], rf["size"], rf["jump"]) == ("layers.8", [81, 81], [4, 4])


def test_global_pooling_ends_the_field_and_keeps_the_last_spatial_layer() -> None:
    net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2, 2))
    rf = field(net, [1, 8, 8])
    assert rf == {
        "defined": False,
        "reason": "global pooling mixes all positions: aten.mean in 1",
        "last_spatial_layer": "0",
        "size": [3, 3],
        "jump": [1, 1],
        "start": [1.5, 1.5],
    }


class SqueezeExcite(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return y * torch.sigmoid(y.mean((2, 3), keepdim=True))


def test_channel_gate_does_not_end_the_field() -> None:
    assert field(SqueezeExcite(), [2, 6, 6])["size"] == [3, 3]


def test_attention_is_undefined() -> None:
    rf = analyze("vit_b_16").receptive_field
    assert not rf["defined"]
    assert (rf["last_spatial_layer"], rf["size"], rf["jump"]) == ("conv_proj", [16, 16], [16, 16])
