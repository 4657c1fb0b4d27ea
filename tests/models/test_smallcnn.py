"""dlperf.models.smallcnn: the Keras MNIST example's network, its shapes and its size."""

from __future__ import annotations

import torch
from torch import nn

from dlperf.models import create_model
from dlperf.models.registry import registered_factory
from dlperf.models.smallcnn import smallcnn


def seq(model: nn.Module) -> nn.Sequential:
    assert isinstance(model, nn.Sequential)
    return model


def params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_registered_under_its_name() -> None:
    assert registered_factory("smallcnn") is smallcnn


def test_mnist_shape_has_the_keras_examples_parameter_count() -> None:
    model = smallcnn()
    out = model(torch.zeros(2, 1, 28, 28))
    assert out.shape == (2, 10)
    # by hand: conv 1*32*9+32=320, conv 32*64*9+64=18,496, fc 64*12*12*128+128=1,179,776,
    # fc 128*10+10=1,290; the Keras example's summary says 1,199,882
    assert params(model) == 320 + 18_496 + 1_179_776 + 1_290 == 1_199_882


def test_the_lazy_layer_serves_8x8_digits_and_rgb_cifar() -> None:
    digits = seq(smallcnn(num_classes=10))
    assert digits(torch.zeros(1, 1, 8, 8)).shape == (1, 10)
    # 8 -> 6 -> 4 -> pool 2: 64*2*2 features
    assert digits[7].in_features == 64 * 2 * 2

    cifar = seq(smallcnn(num_classes=3, in_channels=3))
    assert cifar(torch.zeros(1, 3, 32, 32)).shape == (1, 3)
    assert cifar[0].in_channels == 3
    assert cifar[7].in_features == 64 * 14 * 14


def test_the_layers_read_in_the_documented_order() -> None:
    kinds = [type(m) for m in seq(smallcnn())]
    assert kinds == [
        nn.Conv2d, nn.ReLU, nn.Conv2d, nn.ReLU, nn.MaxPool2d, nn.Dropout,
        nn.Flatten, nn.LazyLinear, nn.ReLU, nn.Dropout, nn.Linear,
    ]  # fmt: skip
    model = seq(smallcnn())
    assert [m.p for m in model if isinstance(m, nn.Dropout)] == [0.25, 0.5]


def test_eval_mode_is_deterministic_and_train_mode_drops_out() -> None:
    torch.manual_seed(0)
    model = smallcnn()
    x = torch.randn(4, 1, 12, 12)
    model.eval()
    assert torch.equal(model(x), model(x))
    model.train()
    torch.manual_seed(1)
    a = model(x)
    torch.manual_seed(2)
    assert not torch.equal(a, model(x))


def test_create_model_builds_it_with_the_datas_classes() -> None:
    model = create_model("smallcnn", num_classes=4, in_channels=1)
    assert model(torch.zeros(1, 1, 8, 8)).shape == (1, 4)
