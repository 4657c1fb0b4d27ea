"""What issue 41's earlier break-it rounds left (docs/faults.md): a one-class set described
without a word, a sweep point refused up front stored as a failed run, an npz of the wrong
layout or size refused with the model's kernel-size message, and a model whose own scores are
NaN blamed on the learning rate. Each through the real entry point."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult


def _npz(path: Path, shape: tuple[int, ...], labels: np.ndarray | None = None) -> None:
    images = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    np.savez(path, images=images, labels=np.arange(shape[0]) % 2 if labels is None else labels)


def test_describing_a_one_class_set_warns_as_run_refuses_it(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    _npz(tmp_path / "one.npz", (16, 1, 8, 8), np.zeros(16, dtype=np.int64))
    result = cli("data", "describe", "npz", "--set", "data.root=one.npz", "--json")
    assert result.code == 0, result.err  # read-only: it describes what is there
    said = (
        "the training split of npz holds images of class 0 only: a classifier needs at least "
        "2 classes, and `dlperf run` refuses it (give it images of at least 2 classes (one "
        "folder per class for imagefolder))"
    )
    # before: nothing on stderr, and no warnings in the JSON
    assert result.err == f"warning: {said}\n", result.err
    assert json.loads(result.out)["warnings"] == [said]


def test_a_sweep_point_refused_up_front_refuses_the_sweep_and_stores_nothing(
    cli: Callable[..., CliResult], tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    tiny_exp(epochs=1)
    (tmp_path / "bs.toml").write_text(
        'base = "tiny.toml"\n[set]\n"data.limit" = 64\n[grid]\n"train.batch_size" = [32, 100]\n'
    )
    result = cli("sweep", "bs.toml")
    # before: point 1 trained, point 2 was stored as a failed run, exit 0
    assert result.code == 2, result.err
    assert result.err == (
        "error: bs.toml point 2 (train.batch_size=100): train.batch_size 100 is larger than the "
        "64 training images of digits (use train.batch_size <= 64)\n"
    )
    runs = cli("runs", "list", "--json")
    assert runs.code == 0 and json.loads(runs.out) == []


@pytest.mark.parametrize(
    ("shape", "said"),
    [
        (
            (16, 8, 8, 1),
            "error: x.npz: images of shape (8, 8, 1) look channels-last (N, H, W, C): the model "
            "takes (N, C, H, W) (store them so: images = np.transpose(images, (0, 3, 1, 2)))",
        ),
        (
            (16, 8, 8, 3),
            "error: x.npz: images of shape (8, 8, 3) look channels-last (N, H, W, C): the model "
            "takes (N, C, H, W) (store them so: images = np.transpose(images, (0, 3, 1, 2)))",
        ),
        (
            (16, 1, 1, 1),
            "error: npz images of 1x1 are too small for the model: the smallest it takes is 6x6 "
            "(give larger images, or set data.image_size to resize them)",
        ),
    ],
)
def test_an_npz_of_the_wrong_layout_or_size_says_what_is_wrong(
    cli: Callable[..., CliResult],
    tiny_exp: Callable[..., Path],
    store: RunStore,
    tmp_path: Path,
    shape: tuple[int, ...],
    said: str,
) -> None:
    _npz(tmp_path / "x.npz", shape)
    exp = str(tiny_exp(epochs=1))
    data = ("--set", "data.name=npz", "--set", "data.root=x.npz", "--set", "train.batch_size=4")
    result = cli("run", exp, *data)
    assert result.code == 2, result.err
    # before: "the model rejects npz images of shape (8, 8, 1): Calculated padded input size
    # per channel: (8 x 1). Kernel size: (3 x 3). Kernel size can't be greater than ..."
    assert result.err == said + "\n", result.err
    assert store.list_runs() == []


NAN_NETS = """
import torch
from torch import nn


class Scores(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.h = nn.Linear(in_channels * 64, num_classes)

    def forward(self, x):
        return self.h(x.flatten(1)) + x.sum() * float("nan")


class Init(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.h = nn.Linear(in_channels * 64, num_classes)
        nn.init.constant_(self.h.bias, float("nan"))

    def forward(self, x):
        return self.h(x.flatten(1))
"""


@pytest.mark.parametrize("net", ["Scores", "Init"])
def test_a_model_whose_own_scores_are_nan_says_so_before_the_run_is_stored(
    cli: Callable[..., CliResult],
    tiny_exp: Callable[..., Path],
    store: RunStore,
    tmp_path: Path,
    net: str,
) -> None:
    (tmp_path / "nets.py").write_text(NAN_NETS)
    result = cli("run", str(tiny_exp(epochs=1)), "--set", f"model.name=nets.py:{net}")
    # before: exit 1, a failed run: "loss became nan at step 1 (epoch 1); try a lower train.lr"
    assert result.code == 2, result.err
    assert result.err == (
        f"error: model '{tmp_path / 'nets.py'}:{net}' gives NaN or inf scores for finite images "
        "before any "
        "training step: the model itself, not the learning rate (look at its forward and the "
        "initial values of its layers)\n"
    ), result.err
    assert store.list_runs() == []
