"""Break-it round 26, P2 causes 8 and 12: distill's pool and converge's tables.

8: a pool listing the teacher's class names in another order (its labels numbered by its own
list) had its pseudo-label precision null, nothing said, though it holds the teacher's
classes. Its labels are mapped to the teacher's by name; a pool whose names are not the
teacher's says why its precision is not measured.
12: a CSV whose header is repeated mid-file (two logs concatenated) was told "'step' is not
a number: 'step'". The line is named as a repeat of the header, with the fix.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from dlperf.config import load_experiment
from dlperf.data import load_data
from dlperf.distill import pool
from tests.cli.test_app import one_line_error
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

# --- 8: a pool with the teacher's classes in another order ---------------------------------


def _npz(path: Path, classes: list[str], labels: list[int], seed: int) -> Path:
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (len(labels), 1, 8, 8), dtype=np.uint8)
    np.savez(path, images=images, labels=np.array(labels), classes=np.array(classes))
    return path


@pytest.mark.parametrize(
    ("classes", "hidden", "unmeasured"),
    [
        (["a", "b", "c"], [0, 1, 2, 0, 1, 2], None),  # the teacher's order, as before
        (["c", "a", "b"], [2, 0, 1, 2, 0, 1], None),  # before: None, unsaid
        (["b", "c"], [1, 2, 1, 2, 1, 2], None),  # some of the teacher's classes
        (
            ["a", "b", "dog"],
            None,
            "the pool's class dog is not among the teacher's (a, b, c)",
        ),
    ],
)
def test_a_pool_s_labels_are_mapped_to_the_teacher_s_classes_by_name(
    tmp_path: Path, classes: list[str], hidden: list[int] | None, unmeasured: str | None
) -> None:
    labelled_path = _npz(tmp_path / "l.npz", ["a", "b", "c"], [i % 3 for i in range(30)], 0)
    exp = load_experiment(None, ['data.name="npz"', f'data.root="{labelled_path}"'])
    labelled = load_data(exp.data)
    labels = [i % len(classes) for i in range(6)]
    _npz(tmp_path / "p.npz", classes, labels, 1)
    spec = f"npz:root={tmp_path / 'p.npz'}"
    cfg, _ = pool.parse(spec, exp)
    got = pool.load(spec, cfg, labelled)
    if hidden is None:
        assert got.hidden is None
    else:
        assert got.hidden is not None and got.hidden.tolist() == hidden
        assert got.hidden.dtype == torch.int64
    assert got.unmeasured == (
        None if unmeasured is None else f"pseudo-label precision is not measured: {unmeasured}"
    )


# --- 12: a header repeated mid-file ---------------------------------------------------------


def test_a_header_repeated_mid_file_is_named_as_such(cli: Cli, tmp_path: Path) -> None:
    """Before: "...:22: 'step' is not a number: 'step'" (and 'local_bsz' for speed fit)."""
    curve = tmp_path / "loss.csv"
    rows = [f"{s},{2.0 / (s + 1) + 0.1:.6f}" for s in range(1, 41)]
    curve.write_text("\n".join(["step,loss", *rows[:20], "step,loss", *rows[20:]]) + "\n")
    fix = "remove it: if two logs were joined, check that the rows after it go on from those before"
    r = cli("converge", "fit", "--csv", str(curve), "--x", "step", "--y", "loss")
    one_line_error(r, f"{curve}:22: the line repeats the header (two logs concatenated?)")
    assert fix in r.err
    speed = tmp_path / "speed.csv"
    head = "placement,local_bsz,step_time,sync_time"
    speed.write_text(f"{head}\n1,32,0.04,0.0005\n1,64,0.07,0.0005\n {head.replace(',', ', ')}\n")
    r = cli("converge", "speed", "fit", "--csv", str(speed), "--model", "pollux")
    one_line_error(r, f"{speed}:4: the line repeats the header (two logs concatenated?)")
    assert fix in r.err
