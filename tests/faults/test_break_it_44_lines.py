"""Break-it round 44, fixer F7: one line per message, a count's plural, track's NumPy values.

1. T1's C1 (cases 37, 38): round 41 made `console.warn`'s warnings one line at any width, but
   the library's own warnings go through its reporter (`RichReporter.log`: the thread count a
   model's forward set, a default dtype a model file set at import, parameters no gradient
   reaches), which printed them through rich's line breaking: past 160 columns in a log (or
   COLUMNS, or a terminal's width) a warning was two lines, so `grep warning:` got half of it.
   Now stderr's console never breaks a line (`soft_wrap`): every message the reporter prints
   (its warnings and notes, a task's line, its progress lines), `gone`'s note and `tell`'s
   `saved` lines are one line at any width, on a terminal too (the terminal folds it).
2. T1's case 49: `data describe` of a one-class folder said "1 classes"; `data samples` "1 train
   images" and "wrote 1 images". Now "1 class", "1 train image", "wrote 1 image" (and the
   per-class table's "1 more class", the statistics' "the 1 training image").
3. `dlperf.track`'s `log` kept a one-element tensor (`torch.tensor([1.5])`) as a metric but
   refused a one-element NumPy array (`np.array([1.5])`, NumPy 2 no longer converts it with
   float()). Now a NumPy array of one real number, whatever its shape, is that number, as
   torch's is; one of several numbers, none, a complex, bool, text or date is still refused in
   one `UserError` line.
"""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

import dlperf
from dlperf.cli import console
from dlperf.cli.data import _shown, _title
from dlperf.errors import UserError
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

LONG = "warning: the model set torch's thread count to 3 in its forward; " + "and so on " * 25


# --- 1: the reporter's lines --------------------------------------------------------------------


@pytest.mark.parametrize("width", [160, 40], ids=["a log's 160 columns", "COLUMNS=40"])
def test_every_reporter_line_is_one_line_off_a_terminal(
    width: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(console.err, "width", width)  # as COLUMNS sets it at import
    monkeypatch.setattr(console.RichReporter, "interval_s", 0.0)  # a progress line each advance
    path = "/tmp/" + "/".join(f"a-long-folder-name-{i}" for i in range(12))
    rep = console.RichReporter()
    capsys.readouterr()
    rep.log(LONG)
    rep.task(f"reading {path}")  # no total: a line of its own
    rep.task(f"reading {path}", total=3)
    rep.advance(1, status=path)
    console.gone(list(range(100, 160)), "runs compare")
    console.tell([], path)
    lines = [line.rstrip() for line in capsys.readouterr().err.splitlines()]
    ids = ", ".join(map(str, range(100, 160)))
    assert lines == [
        LONG.rstrip(),  # before: broken at `width`
        f"reading {path} ...",
        f"reading {path}: 1/3 {path}",
        f"note: runs {ids} were deleted while runs compare read the store; left out",
        f"saved {path}",
    ], lines


def test_a_reporter_warning_is_one_line_on_a_narrow_terminal(tmp_path: Path) -> None:
    """On a terminal, beside the live bar, at COLUMNS=40: rich broke the line (a newline after
    each 40 columns); now the terminal folds it, as it does `console.warn`'s."""
    script = (
        "from dlperf.cli import console\n"
        "with console.reporter() as rep:\n"
        "    rep.task('reading', total=3)\n"
        f"    rep.log({LONG!r})\n"
        "    rep.advance(1)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM", "LINES")}
    main, other = pty.openpty()
    with subprocess.Popen(
        [sys.executable, "-c", script], stdin=other, stdout=other, stderr=other,
        env={**env, "COLUMNS": "40", "TERM": "xterm"}, cwd=tmp_path,
    ) as child:  # fmt: skip
        os.close(other)
        said = b""
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the child's end of the terminal closed
                break
            if not chunk:
                break
            said += chunk
        assert child.wait(timeout=300) == 0, said
    os.close(main)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", said.decode())  # rich's cursor moves
    assert LONG.rstrip() in text, text  # before: a newline every 40 columns


# Its forward gives 3 scores, not 10: the run is refused at the dry checks, after the build
# said its warning (no training, a cheap test of the warning's real path).
F64_MODEL = """
import torch, torch.nn as nn
torch.set_default_dtype(torch.float64)  # at import: dlperf puts float32 back and says so
def make(num_classes=10, in_channels=1):
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, 3))
"""


def test_a_model_files_warning_is_one_line_through_the_cli(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """T1's case 37: the default-dtype warning engine/build.py gives through the reporter."""
    model = tmp_path / "f64.py"
    model.write_text(F64_MODEL)
    monkeypatch.setattr(console.err, "width", 60)  # the warning is longer whatever tmp_path is
    sets = ["--set", f"model.name={model}:make", "--set", "data.limit=64"]
    r = cli("run", str(tiny_exp(epochs=1)), *sets)
    one_line(r, 2, "returns shape [2, 3]")
    (warning,) = [line for line in r.err.splitlines() if line.startswith("warning: ")]
    assert warning.startswith(f"warning: model file {model} set torch's default dtype"), r.err
    assert warning.rstrip().endswith("in which dlperf builds and trains models"), r.err


# --- 2: a count of one ---------------------------------------------------------------------------


def _one_class(root: Path) -> Path:
    """An image folder of one class, "only": 7 training images and 1 of validation."""
    for split, n in (("train", 7), ("val", 1)):
        (root / split / "only").mkdir(parents=True)
        for i in range(n):
            pixels = np.full((12, 12, 3), 40 * i, np.uint8)
            Image.fromarray(pixels).save(root / split / "only" / f"{i}.png")
    return root


def test_data_describe_of_one_class_says_it_in_the_singular() -> None:
    """Its title, from the summary (the command draws two figures besides: seconds)."""
    summary = {"name": "imagefolder", "classes": ["only"], "image_shape": [3, 12, 12]}
    assert _title(summary) == "imagefolder: 1 class, images 3x12x12"  # was 1 classes
    summary["classes"] = ["a", "b"]
    assert _title(summary) == "imagefolder: 2 classes, images 3x12x12"


def test_data_samples_of_one_image_says_it_in_the_singular(cli: Cli, tmp_path: Path) -> None:
    root = _one_class(tmp_path / "set")
    sets = ["--set", f"data.root={root}", "--set", "data.image_size=12"]
    r = cli("data", "samples", "imagefolder", *sets, "--split", "val", "--out", "s")
    assert r.code == 0, r.err
    assert r.out.splitlines()[0] == "imagefolder: 1 val image", r.out  # was 1 val images
    assert "wrote 1 image to s" in r.err.splitlines(), r.err  # was wrote 1 images


def test_the_class_table_says_one_more_class_in_the_singular() -> None:
    rows = _shown({f"c{i}": i for i in range(201)})
    assert ["... 1 more class (all in --json)", None] in rows, rows
    rows = _shown({f"c{i}": i for i in range(202)})
    assert ["... 2 more classes (all in --json)", None] in rows, rows


def test_the_statistics_of_one_training_image_are_said_in_the_singular() -> None:
    from dlperf.data.describe import Description

    splits = {"train": 1, "val": 0, "test": 0}
    shape = (3, 12, 12)
    desc = Description(
        "x", ["a"], [1], splits, shape, (0.5,), (0.1,), 1, True, [], [], None, None, []
    )
    assert desc.stats_basis == "the 1 training image"  # was all 1 training images


# --- 3: track's NumPy values ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        (np.array([1.5]), 1.5),
        (np.array([[2.5]], dtype=np.float32), 2.5),
        (np.array(3.5), 3.5),
        (np.float32(1.5), 1.5),
        (np.float16(0.5), 0.5),
        (np.int64(3), 3.0),
        (np.array([7], dtype=np.uint8), 7.0),
        (torch.tensor([4.5]), 4.5),
    ],
    ids=["1-element", "1x1 float32", "0-d", "float32", "float16", "int64", "uint8", "tensor"],
)
def test_log_keeps_one_number_of_numpy_as_of_torch(db: str, value: Any, kept: float) -> None:
    with dlperf.track("n", store=db) as run:
        run.log(1, x=value)  # before: "metric train/x is a number, got a numpy.ndarray ..."
    assert dlperf.Store(db).metrics(run.id, "train/x") == [(1, kept)]
    assert type(dlperf.Store(db).run(run.id).summary["final"]["train/x"]) is float


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (np.array([1.0, 2.0]), "a numpy.ndarray of shape (2,)"),
        (np.array([]), "a numpy.ndarray holding []"),
        (np.array([True]), "a numpy.ndarray of shape (1,)"),
        (np.array(["1.5"]), "a numpy.ndarray of shape (1,)"),
        (np.array("1.5"), "ndarray array('1.5', dtype='<U3')"),
        (np.array([1], dtype="datetime64[s]"), "a numpy.ndarray of shape (1,)"),
        (torch.tensor([1.0, 2.0]), "a torch.Tensor of shape (2,)"),
    ],
    ids=["many", "none", "bool", "text", "0-d text", "date", "tensor"],
)
def test_log_still_refuses_what_is_not_one_real_number(db: str, value: Any, said: str) -> None:
    with dlperf.track("r", store=db) as run, pytest.raises(UserError) as e:
        run.log(1, x=value)
    assert str(e.value) == f"metric train/x is a number, got {said}"
    assert "\n" not in str(e.value)
    assert dlperf.Store(db).metric_keys(run.id) == []


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (np.array([1 + 2j]), "a numpy.ndarray of shape (1,)"),
        (np.array([[1 + 0j]]), "a numpy.ndarray of shape (1, 1)"),
    ],
    ids=["complex", "complex 1x1"],
)
def test_log_refuses_a_complex_array_as_complex(db: str, value: Any, said: str) -> None:
    """Round 69 named the reason: a complex value is refused as complex, not as a number."""
    with dlperf.track("r", store=db) as run, pytest.raises(UserError) as e:
        run.log(1, x=value)
    assert str(e.value) == f"metric train/x is a real number, not a complex one, got {said}"
    assert dlperf.Store(db).metric_keys(run.id) == []
