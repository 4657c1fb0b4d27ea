"""dlperf.models.cifar_resnet: He et al.'s CIFAR ResNets, 6n+2 layers with option-A
shortcuts (a strided identity, zero-padded channels: no parameters), and ResNet-18 for 32x32
images. Parameter counts per depth are in tests/models/test_registry.py."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dlperf.models.cifar_resnet import BasicBlock, CifarResNet, resnet18_cifar


def test_an_option_a_shortcut_subsamples_and_zero_pads_the_channels() -> None:
    block = BasicBlock(16, 32, stride=2)
    x = torch.arange(2 * 16 * 4 * 4, dtype=torch.float32).view(2, 16, 4, 4)
    out = block.shortcut(x)
    assert out.shape == (2, 32, 2, 2)
    assert torch.equal(out[:, 8:24], x[:, :, ::2, ::2])  # the input, every other pixel
    assert not out[:, :8].any() and not out[:, 24:].any()  # 8 zero channels either side
    # no projection: the block's only parameters are its two convs and batch norms
    assert sum(p.numel() for p in block.parameters()) == 16 * 32 * 9 + 32 * 32 * 9 + 4 * 32


def test_a_shape_keeping_block_adds_its_input_as_it_is() -> None:
    block = BasicBlock(16, 16, stride=1)
    x = torch.randn(1, 16, 5, 5)
    assert block.shortcut(x) is x
    for m in (block.conv1, block.conv2):
        nn.init.zeros_(m.weight)
    block.eval()  # fresh batch norms then pass zeros through: the block is relu(x + 0)
    assert torch.equal(block(x), torch.relu(x))


def test_depth_is_6n_plus_2_with_three_stages() -> None:
    model = CifarResNet(20, num_classes=7, in_channels=1)
    blocks = list(model.layers)
    assert len(blocks) == 9  # n = 3 blocks per stage
    assert [b.conv1.out_channels for b in blocks] == [16] * 3 + [32] * 3 + [64] * 3
    assert [b.stride for b in blocks] == [1, 1, 1, 2, 1, 1, 2, 1, 1]
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert len(convs) + 1 == 20  # 19 convs and the linear head: the depth's layers
    assert model(torch.randn(2, 1, 32, 32)).shape == (2, 7)
    with pytest.raises(ValueError, match="depth must be 6n\\+2, got 21"):
        CifarResNet(21)


def test_resnet18_for_32px_keeps_the_resolution_in_its_stem() -> None:
    model = resnet18_cifar(num_classes=10, in_channels=1)
    assert (model.conv1.kernel_size, model.conv1.stride, model.conv1.in_channels) == (
        (3, 3), (1, 1), 1,
    )  # fmt: skip
    assert isinstance(model.maxpool, nn.Identity)
    stem = nn.Sequential(model.conv1, model.bn1, model.relu, model.maxpool)
    assert stem(torch.randn(1, 1, 32, 32)).shape == (1, 64, 32, 32)  # torchvision's: 8x8
    assert model(torch.randn(2, 1, 32, 32)).shape == (2, 10)
