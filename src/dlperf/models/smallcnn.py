"""The small reference CNN (the Keras MNIST example's network):
two 3x3 convolutions (32, 64), max-pool, dropout 0.25, FC 128, dropout 0.5, FC classes.

The first fully connected layer is lazy so that one definition serves 8x8 digits,
28x28 MNIST and 32x32 CIFAR; `materialize` runs a dry batch before the optimizer is built.
"""

from __future__ import annotations

from torch import nn

from dlperf.models.registry import register_model


@register_model
def smallcnn(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(in_channels, 32, 3),
        nn.ReLU(inplace=True),
        nn.Conv2d(32, 64, 3),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Dropout(0.25),
        nn.Flatten(),
        nn.LazyLinear(128),
        nn.ReLU(inplace=True),
        nn.Dropout(0.5),
        nn.Linear(128, num_classes),
    )
