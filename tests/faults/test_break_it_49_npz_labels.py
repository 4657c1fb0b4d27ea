"""Break-it round 49, T1 C1: an npz whose labels are an object array of names (pandas'
`df["label"].values`) was refused, rightly (it is pickled), with one fix,
`numpy.asarray(labels, dtype=numpy.int64)`, which fails on 'cat'. The line now gives the way
for numbers and the way for names (numpy.unique, the names saved as 'classes'), and the way for
names works on those labels.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tests.conftest import CliResult
from tests.faults.test_break_it_23_data_a import describe


def test_object_labels_are_told_a_way_that_works_for_names(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    labels = np.array(["cat", "dog"] * 20, dtype=object)
    images = np.zeros((40, 1, 8, 8), dtype=np.uint8)
    np.savez(tmp_path / "objlab.npz", images=images, labels=labels)
    r = describe(cli, "npz", tmp_path / "objlab.npz")
    assert r.code == 2, r.err
    said = re.search(r"classes, labels = (numpy\.unique\(.*?return_inverse=True\))", r.err)
    assert said is not None, r.err  # before: only numpy.asarray(labels, dtype=numpy.int64)
    classes, numbered = eval(said[1], {"numpy": np, "labels": labels})  # the line's own fix
    assert list(classes) == ["cat", "dog"] and list(numbered[:4]) == [0, 1, 0, 1]
