"""The example experiments validate, name real models, and (on bundled data) train."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.config import load_experiment
from dlperf.models import create_model

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.toml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_is_valid(path: Path) -> None:
    exp = load_experiment(path)
    channels = 1 if "mnist" in exp.data.name or exp.data.name == "digits" else 3
    create_model(exp.model.name, in_channels=channels)
    if exp.data.mean is not None:
        assert len(exp.data.mean) == len(exp.data.std) == channels


def test_there_are_examples() -> None:
    assert {p.name for p in EXAMPLES} >= {
        "cifar10_resnet18_kuangliu.toml",
        "cifar10_resnet44_cutout16.toml",
        "mnist_smallcnn.toml",
        "digits_smallcnn.toml",
    }


SWEEPS = sorted((Path(__file__).resolve().parents[1] / "examples" / "sweeps").glob("*.toml"))


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.name)
def test_sweep_example_is_valid(path: Path) -> None:
    from dlperf.sweep import load_sweep

    sweep = load_sweep(path)
    assert len(sweep.points) >= 4 and sweep.axes


def test_the_classic_studies_are_shipped_small_and_full() -> None:
    assert {p.name for p in SWEEPS} >= {
        f"{study}{size}.toml"
        for study in ("transfer_lr", "cutout_batchaug")
        for size in ("", "_full")
    }
