"""ResNets for 32x32 images.

- CIFAR ResNet-20/32/44/56/110: He et al., "Deep Residual Learning for Image Recognition",
  CVPR 2016, section 4.2: a 3x3 conv with 16 filters, then 3 stages of n basic blocks with
  16, 32, 64 filters (6n+2 layers), global average pooling and a linear head. Shortcuts
  that change shape use option A (strided identity, zero-padded channels), so the
  parameter counts match the paper (0.27M for ResNet-20).
- ResNet-18 for 32x32 (the kuangliu/pytorch-cifar recipe): torchvision's ResNet-18 with a
  3x3 stride-1 stem and no max-pool.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from dlperf.models.registry import register_model


class BasicBlock(nn.Module):
    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.pad = planes - in_planes if stride != 1 or in_planes != planes else 0
        self.stride = stride

    def shortcut(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1 and self.pad == 0:
            return x
        x = x[:, :, :: self.stride, :: self.stride]
        return F.pad(x, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    def __init__(self, depth: int, num_classes: int = 10, in_channels: int = 3) -> None:
        super().__init__()
        if (depth - 2) % 6:
            raise ValueError(f"depth must be 6n+2, got {depth}")
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        blocks: list[nn.Module] = []
        in_planes = 16
        for planes, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(n):
                blocks.append(BasicBlock(in_planes, planes, stride if i == 0 else 1))
                in_planes = planes
        self.layers = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d | nn.Linear):
                nn.init.kaiming_normal_(m.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.pool(self.layers(x))
        logits: torch.Tensor = self.fc(torch.flatten(x, 1))
        return logits


for _depth in (20, 32, 44, 56, 110):
    register_model(partial(CifarResNet, _depth), f"resnet{_depth}")


@register_model
def resnet18_cifar(num_classes: int = 10, in_channels: int = 3) -> nn.Module:
    from torchvision.models import resnet18

    model: nn.Module = resnet18(num_classes=num_classes)
    model.conv1 = nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False)
    model.maxpool = nn.Identity()
    return model
