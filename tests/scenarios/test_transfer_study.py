"""The offline transfer study, smaller: pre-train the small CNN on mnist5k, then fine-tune
from it and train from scratch on 200 of scikit-learn's digits."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.config import build_experiment
from dlperf.experiment.run import run_experiment
from dlperf.store import RunStore

pytestmark = pytest.mark.scenario

SEEDS = (0, 1, 2)


def test_pretraining_on_mnist5k_beats_scratch_on_200_digits(tmp_path: Path) -> None:
    """The offline study (examples/mnist5k_pretrain.toml, digits_transfer.toml), smaller:
    measured here, fine-tuning led scratch by 0.10, 0.04, 0.03 on seeds 0..2 (mean 0.06; 0.11,
    0.04, 0.03 with two threads). One thread: on a busy machine two threads of so small a model
    wait on each other (56 s and 29 CPU-s against 155 s and 86 CPU-s at load 6 on 2 cores).
    Three fine-tuning epochs instead of six are no cheaper way: scratch led on seed 0."""
    store = RunStore.open(f"sqlite:///{tmp_path / 'dlperf.db'}")
    common = {"run": {"threads": 1, "warmup_steps": 1, "out_dir": str(tmp_path / "runs")}}
    pretrain = build_experiment(
        {
            "model": {"name": "smallcnn"},
            "data": {"name": "mnist5k", "limit": 2000},
            "train": {"epochs": 2, "batch_size": 64, "lr": 0.05, "schedule": {"kind": "cosine"}},
            **common,
        }
    )
    source = run_experiment(pretrain, store)["run_id"]

    def accuracy(mode: str, seed: int) -> float:
        exp = build_experiment(
            {
                "model": {"name": "smallcnn", "weights": f"run:{source}", "transfer": mode},
                "data": {"name": "digits", "image_size": 28, "limit": 200},
                "train": {
                    "epochs": 6,
                    "batch_size": 32,
                    "lr": 0.05,
                    "schedule": {"kind": "cosine"},
                },
                "run": {**common["run"], "seed": seed, "checkpoint": False},
            }
        )
        return run_experiment(exp, store)["test_accuracy"]

    margins = [accuracy("finetune", s) - accuracy("scratch", s) for s in SEEDS]
    assert sum(margins) / len(margins) > 0.02, margins
