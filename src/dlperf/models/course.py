"""The networks a course on deep-learning systems asks students to count by hand.

- `alexnet_paper`: Krizhevsky, Sutskever and Hinton, "ImageNet Classification with Deep
  Convolutional Neural Networks", NIPS 2012, figure 2 on a 227x227 input, the two-GPU
  grouping of conv2, conv4 and conv5 included: 60,965,224 parameters for 1,000 classes.
  (torchvision's `alexnet` is the one-GPU variant of "One weird trick", 61,100,840.)
- `inception_naive`, `inception_reduced`: Szegedy et al., "Going Deeper with Convolutions",
  CVPR 2015, figure 2 (a) and (b). The filter counts are arguments whose defaults are
  table 1's inception (3a): 64 1x1, 96 3x3 reduce, 128 3x3, 16 5x5 reduce, 32 5x5, 32 pool
  proj; the course applies them to a 32x32x256 input.
- `conv_stack`: N FxF convolutions of stride 1, whose receptive field is (NF - N + 1)^2.
"""

from __future__ import annotations

import torch
from torch import nn

from dlperf.models.registry import meant_for, register_model


def _conv(in_channels: int, out_channels: int, kernel: int) -> nn.Sequential:
    """A convolution keeping the map's size, then ReLU (GoogLeNet's every convolution)."""
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, kernel, padding=kernel // 2), nn.ReLU(inplace=True)
    )


class InceptionNaive(nn.Module):
    """Figure 2 (a): 1x1, 3x3 and 5x5 convolutions and 3x3 max pooling side by side, their
    outputs concatenated (c1x1 + c3x3 + c5x5 + in_channels channels)."""

    def __init__(self, in_channels: int, c1x1: int, c3x3: int, c5x5: int) -> None:
        super().__init__()
        self.branch1x1 = _conv(in_channels, c1x1, 1)
        self.branch3x3 = _conv(in_channels, c3x3, 3)
        self.branch5x5 = _conv(in_channels, c5x5, 5)
        self.branch_pool = nn.MaxPool2d(3, stride=1, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        branches = (self.branch1x1, self.branch3x3, self.branch5x5, self.branch_pool)
        return torch.cat([branch(x) for branch in branches], dim=1)


class InceptionReduced(nn.Module):
    """Figure 2 (b): 1x1 convolutions reduce the channels before the 3x3 and 5x5 ones and
    project the pooled map (c1x1 + c3x3 + c5x5 + pool_proj channels)."""

    def __init__(
        self,
        in_channels: int,
        c1x1: int,
        c3x3_reduce: int,
        c3x3: int,
        c5x5_reduce: int,
        c5x5: int,
        pool_proj: int,
    ) -> None:
        super().__init__()
        self.branch1x1 = _conv(in_channels, c1x1, 1)
        self.branch3x3 = nn.Sequential(
            _conv(in_channels, c3x3_reduce, 1), _conv(c3x3_reduce, c3x3, 3)
        )
        self.branch5x5 = nn.Sequential(
            _conv(in_channels, c5x5_reduce, 1), _conv(c5x5_reduce, c5x5, 5)
        )
        self.branch_pool = nn.Sequential(
            nn.MaxPool2d(3, stride=1, padding=1), _conv(in_channels, pool_proj, 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        branches = (self.branch1x1, self.branch3x3, self.branch5x5, self.branch_pool)
        return torch.cat([branch(x) for branch in branches], dim=1)


@register_model
@meant_for(3, 227, 227)
def alexnet_paper(num_classes: int = 1000, in_channels: int = 3) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(in_channels, 96, 11, stride=4), nn.ReLU(inplace=True),
        nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=2.0), nn.MaxPool2d(3, 2),
        nn.Conv2d(96, 256, 5, padding=2, groups=2), nn.ReLU(inplace=True),
        nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=2.0), nn.MaxPool2d(3, 2),
        nn.Conv2d(256, 384, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(384, 384, 3, padding=1, groups=2), nn.ReLU(inplace=True),
        nn.Conv2d(384, 256, 3, padding=1, groups=2), nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2),
        nn.Flatten(),
        nn.Dropout(0.5), nn.Linear(256 * 6 * 6, 4096), nn.ReLU(inplace=True),
        nn.Dropout(0.5), nn.Linear(4096, 4096), nn.ReLU(inplace=True),
        nn.Linear(4096, num_classes),
    )  # fmt: skip


@register_model
@meant_for(256, 32, 32)
def inception_naive(
    in_channels: int = 256, c1x1: int = 64, c3x3: int = 128, c5x5: int = 32
) -> nn.Module:
    return InceptionNaive(in_channels, c1x1, c3x3, c5x5)


@register_model
@meant_for(256, 32, 32)
def inception_reduced(
    in_channels: int = 256,
    c1x1: int = 64,
    c3x3_reduce: int = 96,
    c3x3: int = 128,
    c5x5_reduce: int = 16,
    c5x5: int = 32,
    pool_proj: int = 32,
) -> nn.Module:
    return InceptionReduced(in_channels, c1x1, c3x3_reduce, c3x3, c5x5_reduce, c5x5, pool_proj)


@register_model
def conv_stack(n: int = 3, f: int = 3, channels: int = 64, in_channels: int = 3) -> nn.Module:
    if n < 1 or f < 1:
        raise ValueError(f"n and f must be at least 1, got n={n}, f={f}")
    layers: list[nn.Module] = []
    for i in range(n):
        layers += [nn.Conv2d(in_channels if i == 0 else channels, channels, f, padding=f // 2)]
        layers += [nn.ReLU(inplace=True)]
    return nn.Sequential(*layers)
