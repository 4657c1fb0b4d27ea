"""Break-it round 32, an image folder's reading and two memory lines (fixer M).

Reviewer's notes: `detect make-shapes`' memory refusal said "0.0 GiB" of a small need, and
`resize`'s said "GB" of a size it computed in GiB: both are in the unit that shows them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dlperf.config import DataConfig
from dlperf.data import load_data, sources
from dlperf.detect import voc
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


# --- reviewer: memory lines in the unit that shows them ---------------------------------------


def test_make_shapes_says_a_small_need_in_its_own_unit(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: "takes about 0.0 GiB to make, more than this machine's 0.0 GiB of memory"."""
    monkeypatch.setattr(voc, "machine_memory", lambda: 16 * 2**10)
    r = cli("detect", "make-shapes", str(tmp_path / "sh"), "--images", "2", "--size", "100")
    one_line(r, 2, "--size 100: one image of 100×100 takes about 58.6 KiB to make, more than "
             "this machine's 16.0 KiB of memory", "give --size 52 or less")  # fmt: skip


def test_resize_over_max_memory_says_gib(tmp_path: Path) -> None:
    """Before: "takes 0.0 GB, more than data.max_memory_gb 1e-06": computed in GiB, said in
    GB, and a small size as 0.0."""
    path = tmp_path / "n.npz"
    images = np.zeros((20, 3, 4, 4), dtype=np.uint8)
    np.savez(path, images=images, labels=np.arange(20) % 2)
    cfg = DataConfig(name="npz", root=str(path), image_size=8, max_memory_gb=1e-6)
    with pytest.raises(sources.UserError) as e:
        load_data(cfg)
    assert e.value.message == (
        "data.image_size 8: npz at 8x8 takes 3.8 KiB, more than data.max_memory_gb 1e-06"
    )
