"""Break-it round 28, a reviewer's findings on the round's data fixes (fixer J).

C1. A data.root that is a link to nothing there (a drive not mounted) was "a file, not a folder".
C2. An .npz whose labels have a gap was told to renumber them (class 8 silently became 7), not
    to name its classes in 'classes'.
C3. An unreadable file or folder whose name is not UTF-8 was told `chmod a+r 'bad\\xff.png'`,
    a name that is not there.
C4. distill.pretrain imported the private _seed_keeping_all of data.sources.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import CliResult
from tests.faults.test_break_it_28_data import describe, image_set, mode_bits_bind, npz
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


@pytest.mark.parametrize("name", ["imagefolder", "mnist", "cifar10"])
def test_a_data_root_linked_to_nothing_is_said_so(cli: Cli, tmp_path: Path, name: str) -> None:
    """Before: "data.root ROOT is a file, not a folder"."""
    root, target = tmp_path / "data", tmp_path / "mnt" / "ds"
    root.symlink_to(target)
    r = describe(cli, root, name)
    one_line(r, 2, f"data.root {root} is a link to {target}, which is not there")
    assert "a file" not in r.err and "download" not in r.err


def test_npz_labels_with_a_gap_are_told_to_name_their_classes(cli: Cli, tmp_path: Path) -> None:
    """Before: the one fix was "save labels=numpy.unique(labels, return_inverse=True)[1]",
    which makes class 8 class 7 without a word."""
    path = npz(tmp_path / "c.npz", np.array([0, 1, 2, 3, 4, 5, 6, 8, 9] * 4))
    r = describe(cli, path, "npz")
    fix = (
        "name its 10 classes: numpy.savez(..., classes=[...]) with 10 names, or number them "
        "0, 1, ... (class 8 becomes 7, and so on): "
        "save labels=numpy.unique(labels, return_inverse=True)[1]"
    )
    one_line(r, 2, f"{path}: labels 0..9 leave class 7 with no image", fix)


@pytest.mark.parametrize("what", ["file", "folder"])
def test_a_fix_for_a_name_that_is_not_utf8_names_the_file(
    cli: Cli, tmp_path: Path, what: str
) -> None:
    """Before: "chmod a+r '.../bad\\xff.png'", a file that is not there; run by bash, the fix
    given now makes the file readable."""
    root = image_set(tmp_path / "set")
    cat = os.fsencode(root / "train" / "cat")
    bad = Path(os.fsdecode(cat + (b"/bad\xff.png" if what == "file" else b"/bad\xff")))
    if what == "file":
        (root / "train" / "cat" / "0.png").rename(bad)
    else:
        bad.mkdir()
    bad.chmod(0o000)
    try:
        with mode_bits_bind():
            r = describe(cli, root)
        quoted = f"$'{root / 'train' / 'cat'}/bad\\xff{'.png' if what == 'file' else ''}'"
        one_line(r, 2, f"chmod {'a+r' if what == 'file' else '-R a+rX'} {quoted}, or run as")
        fix = r.err.splitlines()[-1].split("(")[-1].split(", or run as")[0]
        subprocess.run(["bash", "-c", fix], check=True, timeout=30)
        assert bad.stat().st_mode & 0o444 == 0o444
    finally:
        bad.chmod(0o755)


def test_pretrain_uses_the_public_seed_keeping_all() -> None:
    from dlperf.data import sources
    from dlperf.distill import pretrain

    assert pretrain.seed_keeping_all is sources.seed_keeping_all
    assert not hasattr(sources, "_seed_keeping_all")
