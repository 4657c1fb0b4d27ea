"""dlperf.models.course: the networks a course counts by hand, their parameters counted here
against the papers' and a hand calculation, their output channels, the inputs they are meant
for, and conv_stack's receptive field of N*F - N + 1."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dlperf.models.course import alexnet_paper, conv_stack, inception_naive, inception_reduced
from dlperf.models.registry import registered_input


def _params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_alexnet_paper_has_the_two_gpu_papers_60965224_parameters() -> None:
    with torch.device("meta"):  # no 240 MB of weights
        model = alexnet_paper()
        # The last layer alone changes with the classes: 4096 * (1000 - 10) weights + 990 biases
        ten = alexnet_paper(num_classes=10)
    assert _params(model) == 60_965_224
    assert _params(ten) == 60_965_224 - 4097 * 990
    assert model[-1].out_features == 1000 and ten[-1].out_features == 10


def test_alexnet_paper_maps_227x227_to_the_6x6x256_its_classifier_takes() -> None:
    with torch.device("meta"):
        model = alexnet_paper()
    flatten = [type(m) for m in model].index(nn.Flatten)
    features = model[:flatten].to_empty(device="cpu")  # the convolutions: 2.3M weights
    with torch.no_grad():
        assert features(torch.zeros(1, 3, 227, 227)).shape == (1, 256, 6, 6)
    assert model[flatten + 2].in_features == 256 * 6 * 6


def test_inception_naive_counts_by_hand_and_concatenates_the_input() -> None:
    model = inception_naive()
    # 1x1: 256*64 + 64; 3x3: 256*128*9 + 128; 5x5: 256*32*25 + 32; pooling has none
    assert _params(model) == 16_448 + 295_040 + 204_832
    assert model(torch.zeros(1, 256, 4, 4)).shape == (1, 64 + 128 + 32 + 256, 4, 4)


def test_inception_reduced_counts_by_hand_with_the_projections() -> None:
    model = inception_reduced()
    # 1x1 16,448; 3x3 reduce 256*96+96 and 3x3 96*128*9+128; 5x5 reduce 256*16+16 and
    # 5x5 16*32*25+32; pool projection 256*32+32
    assert _params(model) == 16_448 + 24_672 + 110_720 + 4_112 + 12_832 + 8_224
    assert model(torch.zeros(1, 256, 4, 4)).shape == (1, 64 + 128 + 32 + 32, 4, 4)


def test_inception_filter_counts_are_arguments() -> None:
    model = inception_reduced(in_channels=8, c1x1=1, c3x3_reduce=2, c3x3=3, c5x5_reduce=2,
                              c5x5=4, pool_proj=5)  # fmt: skip
    assert model(torch.zeros(1, 8, 5, 5)).shape == (1, 1 + 3 + 4 + 5, 5, 5)
    assert inception_naive(in_channels=8, c1x1=1, c3x3=2, c5x5=3)(torch.zeros(1, 8, 5, 5)).shape[
        1
    ] == (1 + 2 + 3 + 8)


def test_the_meant_for_inputs_are_the_papers_and_the_courses() -> None:
    assert registered_input("alexnet_paper") == [3, 227, 227]
    assert registered_input("inception_naive") == registered_input("inception_reduced")
    assert registered_input("inception_naive") == [256, 32, 32]
    assert registered_input("conv_stack") is None


@pytest.mark.parametrize(("n", "f"), [(1, 3), (3, 3), (2, 5)])
def test_conv_stack_sees_a_receptive_field_of_nf_minus_n_plus_1(n: int, f: int) -> None:
    model = conv_stack(n=n, f=f, channels=1, in_channels=1)
    for module in model.modules():  # all-positive weights: ReLU passes every path
        if isinstance(module, nn.Conv2d):
            nn.init.constant_(module.weight, 1.0)
            nn.init.zeros_(module.bias)
    x = torch.ones(1, 1, 21, 21, requires_grad=True)
    model(x)[0, 0, 10, 10].backward()
    assert x.grad is not None
    rows, cols = torch.nonzero(x.grad[0, 0], as_tuple=True)
    side = n * f - n + 1
    assert int(rows.max() - rows.min()) + 1 == side
    assert int(cols.max() - cols.min()) + 1 == side


def test_conv_stack_keeps_the_size_and_has_n_convolutions() -> None:
    model = conv_stack(n=4, f=3, channels=6, in_channels=2)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert len(convs) == 4 and convs[0].in_channels == 2
    assert all(c.in_channels == 6 for c in convs[1:])
    assert model(torch.zeros(1, 2, 9, 9)).shape == (1, 6, 9, 9)


@pytest.mark.parametrize(("n", "f"), [(0, 3), (3, 0)])
def test_conv_stack_refuses_no_layers_or_no_kernel(n: int, f: int) -> None:
    with pytest.raises(ValueError, match=f"n and f must be at least 1, got n={n}, f={f}"):
        conv_stack(n=n, f=f)
