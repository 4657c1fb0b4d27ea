"""The seventeenth break-it round, part G (numbers under odd settings): what `dlperf run` says.

- 1: a `target.accuracy` with a validation split of 0 images (data.val_fraction 0, or 0.0001
  of digits' images, which rounds to none) trained, exit 0, and stored epochs_to_target null,
  "never reached", for a target never measured. It is refused up front, nothing stored.
- 2: "images too small" advised setting data.image_size to resize them when data.image_size
  was what made them too small (4x4). It now names the key, its value and the smallest size.
- 3: `run --resume` of a run kept with run.checkpoint = false said "it stopped before its
  first epoch ended" after 3 epochs; it now says the run kept no checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import digits

Cli = Callable[..., CliResult]

BASE = """
[model]
name = "smallcnn"
[data]
name = "digits"
limit = 64
[train]
epochs = 1
batch_size = 32
lr = 0.05
[run]
threads = 1
warmup_steps = 1
"""


@pytest.fixture
def base(tmp_path: Path) -> Path:
    path = tmp_path / "base.toml"
    path.write_text(BASE)
    return path


@pytest.mark.parametrize(
    ("fraction", "said"),
    [
        ("0.0", "data.val_fraction = 0"),
        # 0.0001 of digits' 1,437 images that are not held out for the test: none.
        ("0.0001", "data.val_fraction = 0.0001 rounds to no image of digits"),
    ],
)
def test_a_target_without_validation_images_is_refused(
    cli: Cli, store: RunStore, base: Path, fraction: str, said: str
) -> None:
    sets = ["--set", f"data.val_fraction={fraction}", "--set", "target.accuracy=0.5"]
    result = cli("run", str(base), *sets, "--json")
    assert result.code == 2, (result.out, result.err)
    assert result.err == (
        f"error: target.accuracy is measured on the validation split, which is empty: {said} "
        "(raise data.val_fraction, or drop target.accuracy)\n"
    )
    assert store.list_runs() == []


def test_no_validation_images_without_a_target_still_trains(cli: Cli, base: Path) -> None:
    result = cli("run", str(base), "--set", "data.val_fraction=0.0", "--json")
    assert result.code == 0, result.err


def test_an_image_size_too_small_names_the_key(cli: Cli, store: RunStore, base: Path) -> None:
    result = cli("run", str(base), "--set", "data.image_size=4")
    assert result.code == 2, (result.out, result.err)
    assert result.err == (
        "error: data.image_size = 4 is too small for the model: the smallest side it takes "
        "is 6 (set data.image_size = 6 or more)\n"
    )
    assert store.list_runs() == []


def test_resuming_a_run_without_checkpoints_says_so(cli: Cli, store: RunStore) -> None:
    """Killed after 3 epochs with run.checkpoint = false: nothing to resume from, and why."""
    config = digits().to_dict()
    config["run"]["checkpoint"] = False
    run_id = store.create_run("stopped", "run", config, "cafe")
    store.log_metrics(run_id, [("epoch/train_loss", epoch, 0.5) for epoch in (1, 2, 3)])
    store.finish_run(run_id, "killed", error="interrupted")
    result = cli("run", "--resume", str(run_id))
    assert result.code == 2, (result.out, result.err)
    assert result.err == (
        f"error: run {run_id} has no checkpoint to resume from (it kept no checkpoint: "
        "run.checkpoint = false; run it again)\n"
    )
