"""Break-it round 30, review 3: the reader's notes on a set's files (a raw MNIST file kept
aside as NAME.kept is said once, at the first load).

C1. `dlperf distill` dropped them: the labelled data's (as_run's warnings) and the pool's
(its load_data) were never printed, and its loads are the first. Now each is a warning line.
C2. `_gunzip_raw` said "... is kept as NAME.kept" before the unpacked copy was renamed into
place: a failed rename said the opposite too and left the .kept link. Now said only once the
rename is done, and the link removed if it fails.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dlperf.config import Experiment
from dlperf.data import load_data
from tests.conftest import CliResult, write_distill_exp
from tests.faults.test_break_it_21_data import TRAIN_IMAGES, idx_bytes, write_mnist

Cli = Callable[..., CliResult]


def _kept_aside(root: Path, seed: int) -> tuple[Path, str]:
    """An MNIST folder under `root` whose raw training images are older than their .gz, of
    other contents (the user's file, kept aside at the first load); the note said of it."""
    raw = write_mnist(root)
    gz = raw / f"{TRAIN_IMAGES}.gz"
    pixels = np.random.default_rng(seed).integers(0, 256, (60, 28, 28))
    gz.write_bytes(gzip.compress(idx_bytes(pixels)))
    stamp = (raw / TRAIN_IMAGES).stat().st_mtime + 2  # written after the raw file
    os.utime(gz, (stamp, stamp))
    return raw, f"is kept as {raw / TRAIN_IMAGES}.kept"


def test_c1_distill_says_the_notes_of_its_labelled_data_and_of_its_pool(
    cli: Cli, tmp_path: Path
) -> None:
    """Before: the study ran without a word of either file kept aside."""
    labelled, said_labelled = _kept_aside(tmp_path / "a", 1)
    _, said_pool = _kept_aside(tmp_path / "b", 2)
    exp = write_distill_exp(tmp_path).read_text()
    exp = exp.replace('"digits"\nlimit = 64', f'"mnist"\nroot = "{tmp_path / "a"}"')
    (tmp_path / "dist.toml").write_text(exp)
    r = cli(
        "distill", str(tmp_path / "dist.toml"), "--unlabeled", f"mnist:root={tmp_path / 'b'}",
        "--top-k", "3", "--pretrain-epochs", "1", "--finetune-epochs", "1",
    )  # fmt: skip
    assert r.code == 0, r.err
    lines = " ".join(r.err.split()).split("warning: ")  # as the console wraps it
    for said in (said_labelled, said_pool):
        assert sum(said in line for line in lines) == 1, r.err
    assert (labelled / f"{TRAIN_IMAGES}.kept").exists()


def test_c2_a_failed_rename_says_nothing_kept_and_leaves_no_kept_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: "... is kept as NAME.kept" and "NAME is read: ... cannot be unpacked" both, and
    NAME.kept left beside the file that is read."""
    raw, _ = _kept_aside(tmp_path, 1)
    failed = os.replace

    def replace(src: str | Path, dst: str | Path) -> None:
        if Path(dst) == raw / TRAIN_IMAGES:
            raise PermissionError(13, "Permission denied", str(dst))
        failed(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    exp = Experiment.model_validate({"data": {"name": "mnist", "root": str(tmp_path)}})
    notes = load_data(exp.data).notes
    assert notes == [
        f"{raw / TRAIN_IMAGES} is read: the newer {raw / TRAIN_IMAGES}.gz cannot be unpacked "
        "in its folder (Permission denied)"
    ], notes
    assert not (raw / f"{TRAIN_IMAGES}.kept").exists()
    assert sorted(p.name for p in raw.iterdir() if p.name.startswith(".")) == []
