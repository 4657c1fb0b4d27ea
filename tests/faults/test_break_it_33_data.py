"""Break-it round 33, the user's own data, detection and resume (fixer F2).

C1. An .npz's class names saved under another key (`names`, CIFAR's `label_names`) were
    dropped without a word: the run, its export and infer called the classes 0, 1, ... Every
    member dlperf does not read is now named in a warning of `run` and `data describe`, and
    one holding names is told to be saved as `classes`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from dlperf.data import sources
from tests.conftest import CliResult

Cli = Callable[..., CliResult]


# --- C1: an .npz's names under another key -------------------------------------------------------


def pets(path: Path, **more: object) -> Path:
    """An .npz of 12 grey 8x8 images of two classes and the arrays `more`."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 255, (12, 1, 8, 8), dtype=np.uint8)
    np.savez(path, images=images, labels=np.array([0, 1] * 6), **more)  # type: ignore[arg-type]
    return path


def test_an_npz_array_not_read_is_named_in_a_warning(cli: Cli, tmp_path: Path) -> None:
    """Before: `data describe` said classes ["0", "1"], warnings [], of a file whose `names`
    array held cat and dog."""
    path = pets(tmp_path / "pets.npz", names=np.array(["cat", "dog"]))
    r = cli("data", "describe", "npz", "--set", f"data.root={path}", "--json")
    assert r.code == 0, r.err
    said = (
        f"{path}: its array 'names' is not read: dlperf takes class names from 'classes' "
        "(save classes=names)"
    )
    assert json.loads(r.out)["warnings"] == [said]
    assert f"warning: {said}" in r.err.splitlines(), r.err


def test_npz_arrays_not_read_are_said_in_one_line(tmp_path: Path) -> None:
    """Names as bytes (CIFAR's label_names) are names too; other arrays are named as unread;
    a file of only what dlperf reads says nothing."""
    names = np.array([b"cat", b"dog"])
    files = np.array([f"{i}.png" for i in range(12)])  # text, but one per image: no names
    path = pets(tmp_path / "p.npz", label_names=names, files=files, y_test=np.zeros(3))
    notes: list[str] = []
    sources.read_npz(path, notes=notes)
    assert notes == [
        f"{path}: its array 'label_names' is not read: dlperf takes class names from 'classes' "
        "(save classes=label_names)",
        f"{path}: its arrays 'files' and 'y_test' are not read: dlperf reads 'images', "
        "'labels' and 'classes'",
    ]
    # with `classes` given, another array of names is only one more array not read
    path = pets(tmp_path / "q.npz", classes=np.array(["a", "b"]), names=np.array(["c", "d"]))
    sources.read_npz(path, notes=(notes := []))
    assert notes == [
        f"{path}: its array 'names' is not read: dlperf reads 'images', 'labels' and 'classes'"
    ]
    sources.read_npz(pets(tmp_path / "r.npz", classes=np.array(["a", "b"])), notes=(notes := []))
    assert notes == []
