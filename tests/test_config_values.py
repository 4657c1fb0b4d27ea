"""Values the config accepts are usable: a rate the optimizer cannot apply, or a synthetic
shape that cannot fit in memory, is refused where the config is read (`config show` as well
as `run`) in one line naming the key, instead of an overflow or allocator traceback later.
And what is accepted, at the top of every range, trains or fails softly (Diverged), never
with a traceback."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from dlperf.config import Experiment
from dlperf.experiment.run import run_experiment
from dlperf.formatting import binary_size
from dlperf.store import RunStore
from tests.conftest import CliResult


def _one_line(result: CliResult) -> str:
    lines = result.err.strip().splitlines()
    assert result.code == 2, result.err
    assert len(lines) == 1 and lines[0].startswith("error: "), result.err
    return lines[0]


@pytest.mark.parametrize(
    ("assignment", "said"),
    [
        ("train.lr=1e308", "train.lr: must be at most 1e+12 (got 1e+308)"),
        ("train.lr=1e13", "train.lr: must be at most 1e+12 (got 10000000000000.0)"),
        ("train.weight_decay=1e308", "train.weight_decay: must be at most 1 (got 1e+308)"),
        ("train.backbone_lr_scale=1e308", "train.backbone_lr_scale: must be at most 100"),
        ("train.schedule.gamma=1e308", "train.schedule.gamma: must be at most 1 (got 1e+308)"),
        ("detect.lr=1e308", "'detect.lr' is 'train.lr' now (give it as train.lr)"),
        ("distill.finetune_lr=1e308", "distill.finetune_lr: must be at most 1e+12"),
    ],
)
def test_config_show_refuses_a_rate_no_optimizer_can_apply(
    cli: Callable[..., CliResult], assignment: str, said: str
) -> None:
    line = _one_line(cli("config", "show", "--set", assignment))
    assert line.startswith("error: config with --set: ") and said in line, line


def test_a_run_at_lr_1e308_is_one_line_and_stores_nothing(
    cli: Callable[..., CliResult], store: RunStore, tiny_exp: Callable[..., Path]
) -> None:
    line = _one_line(cli("run", str(tiny_exp(epochs=1)), "--set", "train.lr=1e308"))
    assert line.endswith("tiny.toml with --set: train.lr: must be at most 1e+12 (got 1e+308)")
    assert store.list_runs() == []


HUGE = ["--set", "data.name=synthetic", "--set", "data.shape=[3,100000,100000]"]


def _memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def test_a_synthetic_shape_too_large_for_memory_says_what_it_needs(
    cli: Callable[..., CliResult], store: RunStore, tiny_exp: Callable[..., Path]
) -> None:
    # 2048 + 256 + 256 images of 3 x 100000 x 100000 bytes: 2560 x 3e10 bytes.
    needed = 2560 * (3 * 100_000 * 100_000 + 8)  # and an 8-byte label each: 69.8 TiB
    expected = (
        "data.shape [3, 100000, 100000]: the synthetic set's 2560 images (data.size 2048, "
        f"256 validation, 256 test) and their labels take {binary_size(needed)}, more than this "
        f"machine's {binary_size(_memory())} of memory (give a smaller data.shape or data.size)"
    )
    for command in (["config", "show"], ["run", str(tiny_exp(epochs=1))]):
        line = _one_line(cli(*command, *HUGE))
        assert line.endswith(expected), line
    assert store.list_runs() == []


def test_the_size_counts_as_well_as_the_shape(cli: Callable[..., CliResult]) -> None:
    line = _one_line(cli("config", "show", *HUGE[:2], "--set", "data.size=2000000000"))
    assert "data.shape [3, 32, 32]: the synthetic set's 2500000000 images" in line


def test_a_synthetic_set_that_fits_is_accepted(cli: Callable[..., CliResult]) -> None:
    result = cli("config", "show", *HUGE[:2], "--set", "data.shape=[3,64,64]")
    assert result.code == 0, result.err


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_the_largest_rates_accepted_train_or_diverge_softly(tmp_path: Path, optimizer: str) -> None:
    """At the top of every range (and a momentum just below 1, which AdamW's first step
    divides by), a run ends finished or failed with the one-line Diverged reason, never in an
    overflow inside the optimizer."""
    torch.set_num_threads(1)
    exp = Experiment.model_validate(
        {
            "model": {"name": "smallcnn"},
            "data": {"name": "digits", "limit": 64},
            "train": {
                "epochs": 1,
                "batch_size": 32,
                "optimizer": optimizer,
                "lr": 1e12,
                "momentum": 0.999999,
                "weight_decay": 1.0,
                "backbone_lr_scale": 100.0,
                "schedule": {"kind": "multistep", "milestones": [1], "gamma": 1.0},
            },
            "run": {"threads": 1, "warmup_steps": 1, "out_dir": str(tmp_path / "runs")},
        }
    )
    result = run_experiment(exp, RunStore.open(f"sqlite:///{tmp_path / 'dlperf.db'}"))
    assert result["status"] == "finished" or result["error"].startswith("loss became"), result
