"""Break-it round 29, the user's data sets (fixer A2).

C1. An image folder at a data.image_size whose one decoded image cannot fit in memory was
    decoded anyway: the kernel's OOM killer ended the process (under ulimit -v, "out of
    memory: MemoryError" blaming the limit), where npz and synthetic sets are refused up front.
C2. A distill pool whose labels are all -1 (STL-10's and scikit-learn's "unlabelled" marker)
    was "label -1 is negative (labels are class indices 0, 1, ...)".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dlperf.config import DataConfig
from dlperf.config.experiment import machine_memory
from dlperf.data import loaders, sources
from dlperf.distill import pool
from dlperf.errors import UserError
from dlperf.formatting import binary_size
from tests.conftest import CliResult
from tests.distill.test_pool import labelled_data
from tests.faults.test_break_it_29_data import image_folder
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

HUGE = 1_000_000  # one RGB image at this side is terabytes, on any machine


# --- C1: an image size no machine can decode ---------------------------------------------------


@pytest.fixture
def no_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    """Were the check gone, decoding an image of HUGE pixels a side would OOM-kill the
    machine's processes, not fail this test."""

    def refused(path: str, size: int) -> None:
        raise AssertionError(f"decoded {path} at {size}x{size}")

    monkeypatch.setattr(sources, "decode_file", refused)
    monkeypatch.setattr(loaders, "decode_file", refused)


def said(side: int) -> tuple[str, int]:
    """What one image decoded at `side` takes, and the largest side that fits."""
    memory = machine_memory()
    needed = sources.DECODE_BYTES * side * side
    said = (
        f"one image decoded at {side}x{side} takes {binary_size(needed)}, more than this "
        f"machine's {binary_size(memory)} of memory"
    )
    return said, math.isqrt(memory // sources.DECODE_BYTES)


@pytest.mark.usefixtures("no_decoding")
def test_an_image_size_beyond_memory_is_refused_before_an_image_is_decoded(
    cli: Cli, tmp_path: Path
) -> None:
    """Before: the OOM killer's `Killed`, exit 137, no line (a MemoryError under ulimit -v)."""
    root = image_folder(tmp_path / "if")
    line, fits = said(HUGE)
    sets = ("--set", f"data.root={root}", "--set", f"data.image_size={HUGE}")
    one_line(
        cli("data", "describe", "imagefolder", *sets),
        2,
        f"error: data.image_size {HUGE}: {line} (set data.image_size to at most {fits})",
    )
    # one image at a time fits (a quarter of the memory), the 8 images at once do not
    memory = machine_memory()
    many = math.isqrt(memory // sources.DECODE_BYTES) // 2
    in_memory = ("--set", f"data.image_size={many}", "--set", "data.in_memory=true")
    all_fit = math.isqrt(memory // (sources.DECODE_BYTES + 2 * 3 * 8))  # + the 8 and a copy
    one_line(
        cli("data", "describe", "imagefolder", *sets[:2], *in_memory),
        2,
        f"error: data.image_size {many}: the 8 images decoded into memory at {many}x{many} take ",
        f"(set data.image_size to at most {all_fit}, or data.in_memory = false)",
    )


@pytest.mark.usefixtures("no_decoding")
def test_a_pool_at_an_image_size_beyond_memory_names_the_pools_key(tmp_path: Path) -> None:
    """The same check, of a distill pool: its own image_size and the teacher's."""
    spec = f"imagefolder:root={image_folder(tmp_path / 'pool')},image_size={HUGE}"
    cfg = DataConfig(name="imagefolder", root=str(tmp_path / "pool"), image_size=HUGE)
    with pytest.raises(UserError) as caught:
        pool.load(spec, cfg, labelled_data())  # the teacher takes 1x4x4
    assert str(caught.value) == (
        f"--unlabeled {spec}: image_size {HUGE}: {said(HUGE)[0]} "
        f"(set --unlabeled imagefolder:root={tmp_path / 'pool'},image_size=4, the teacher's)"
    )


# --- C2: a pool labelled -1 --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "unmeasured"),
    [
        ([-1, -1, -1], "the pool has no labels"),
        ([-1, 0, 1], "1 of the pool's 3 images has no label (-1)"),
    ],
)
def test_a_pool_labelled_minus_one_is_a_pool_without_labels(
    tmp_path: Path, labels: list[int], unmeasured: str
) -> None:
    """Before: "label -1 is negative (labels are class indices 0, 1, ...)", exit 2."""
    images = np.full((3, 1, 4, 4), 9, np.uint8)
    np.savez(tmp_path / "marked.npz", images=images, labels=np.array(labels))
    np.savez(tmp_path / "bare.npz", images=images)

    def pooled(name: str) -> pool.Pool:
        root = str(tmp_path / name)
        return pool.load(f"npz:root={root}", DataConfig(name="npz", root=root), labelled_data())

    marked = pooled("marked.npz")
    assert marked.hidden is None
    assert marked.unmeasured == f"pseudo-label precision is not measured: {unmeasured}"
    if len(set(labels)) == 1:  # the same pool as one saved without labels: its selections
        assert marked.digest == pooled("bare.npz").digest
    # -1 means "no label" to a pool only: a set to train on still refuses it
    with pytest.raises(UserError, match="label -1 is negative"):
        sources.read_npz(tmp_path / "marked.npz", every_class=True)
