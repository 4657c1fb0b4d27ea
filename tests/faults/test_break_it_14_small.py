"""The fourteenth break-it round (issue 41: "every mistake one line, every count right"), the
small causes.

1. `dlperf data describe` of an image folder with a class named by 200 characters printed
matplotlib's "Tight layout not applied" warning four times, with dlperf's own source lines, at
exit 0: the bar chart's tick labels and the sample grid's row titles could not fit. Long class
names are now shortened in figures (the text output keeps them whole), and every figure's
tight_layout goes through `report.tight_layout`, which leaves a figure as drawn, silently,
where its labels cannot fit (the distill study's figure of a long recipe name did the same).

2. `--set 'data.std=[1e-300]'` was accepted, and the run diverged at step 1, blamed on the
model ("the model itself, not the learning rate"): 1/std overflows float32. A std below
`config.base.MIN_STD` (1e-6, far under any real image channel's) is refused in one line.

3. `dlperf predict` of a model that does no arithmetic (an `nn.Identity`, or a forward that
only copies its input) ended in ZeroDivisionError's traceback: PALEO's images/s divide by a
predicted time of 0, and FLOPs / peak by 0 FLOPs. Such a model is refused in one line: there
is nothing for either basis to predict (`dlperf analyze` still counts it).

4. A model file named with a suffix that does not exist (`nb.ipynb:Net`, a typo of a path in
the current directory) was "unknown model 'nb.ipynb:Net' (see `dlperf models`)": no registered
or torchvision model has a dot in its name, so a name with a suffix before its colon is a file's
and is told as a missing file.
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from matplotlib.figure import Figure

from dlperf.report import tight_layout
from dlperf.report.data import plot_counts, plot_samples
from dlperf.store import RunStore
from tests.conftest import REPO, CliResult
from tests.faults.test_break_it_4_inputs import _image_folder
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

LONG = "x" * 200
EXAMPLE = str(REPO / "examples/digits_smallcnn.toml")


def test_describe_of_a_class_with_a_long_name_prints_no_warning(cli: Cli, tmp_path: Path) -> None:
    _image_folder(tmp_path / "img", ["a", LONG], per_class=2)
    # What earlier tests in this worker left to the collector warns when collected (CI once
    # caught psycopg's "deleted while still open" here): collected before, not counted.
    gc.collect()
    with warnings.catch_warnings(record=True) as caught:  # the CLI's stderr, in-process
        warnings.simplefilter("always")
        result = cli(
            "data", "describe", "imagefolder",
            "--set", 'data.root="img"', "--set", "data.image_size=8", "--out", "d",
        )  # fmt: skip
    assert result.code == 0, result.err
    assert [str(w.message) for w in caught] == []
    assert LONG in result.out  # the table keeps the name whole
    assert sorted(p.suffix for p in (tmp_path / "d").iterdir()) == [".png", ".png"]


def test_the_figures_shorten_a_long_class_name(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        plot_counts(tmp_path / "c.png", "x", ["a", LONG], [2, 2])
        grey = torch.zeros(1, 8, 8, dtype=torch.uint8)
        plot_samples(tmp_path / "s.png", "x", ["a", LONG], [grey[None], grey[None]])
    assert (tmp_path / "c.png").stat().st_size > 0 and (tmp_path / "s.png").stat().st_size > 0


def test_tight_layout_leaves_a_figure_whose_labels_cannot_fit_as_drawn() -> None:
    def figure() -> Figure:
        fig = Figure(figsize=(2, 2))
        fig.subplots().set_xticks([0, 1], ["a", LONG], rotation=90)
        return fig

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        figure().tight_layout()  # matplotlib's own: the case is real
        assert [str(w.message)[:24] for w in caught] == ["Tight layout not applied"]
        caught.clear()
        fig = figure()
        before = fig.axes[0].get_position().bounds
        tight_layout(fig)
    assert caught == []
    assert fig.axes[0].get_position().bounds == before
    fitting = Figure(figsize=(4, 3))
    ax = fitting.subplots()
    before = ax.get_position().bounds
    tight_layout(fitting)
    assert ax.get_position().bounds != before  # where it fits, the layout is tightened


MODELS = """
import torch.nn as nn


class Copy(nn.Module):
    def forward(self, x):
        return x.clone()


def identity(num_classes=10, in_channels=1):
    return nn.Identity()


def copy(num_classes=10, in_channels=1):
    return Copy()
"""


@pytest.mark.parametrize("factory", ["identity", "copy"])
def test_predict_of_a_model_that_does_no_arithmetic_is_one_line(
    cli: Cli, db: str, tmp_path: Path, factory: str
) -> None:
    (tmp_path / "idle.py").write_text(MODELS)
    result = cli("predict", f"idle.py:{factory}", "--input", "1,8,8", "--device", "K80")
    one_line(result, 2, f"model idle.py:{factory} does no arithmetic (0 FLOPs at input 1,8,8")
    counted = cli("analyze", f"idle.py:{factory}", "--input", "1,8,8", "--json")
    assert counted.code == 0, counted.err
    # with --measure: refused before anything is measured, and no run is stored (before the
    # check moved, the rounds ran and a failed run was stored)
    measured = cli("predict", f"idle.py:{factory}", "--input", "1,8,8", "--measure", "--reps", "1")
    one_line(measured, 2, f"model idle.py:{factory} does no arithmetic")
    assert "preparing" not in measured.err
    assert RunStore.open(db).list_runs() == []


def test_a_std_whose_inverse_overflows_is_refused_in_one_line(cli: Cli) -> None:
    result = cli("config", "show", EXAMPLE, "--set", "data.std=[1e-300]")
    one_line(result, 2, "data.std.0: must be at least 1e-06 (got 1e-300)")


def test_a_std_at_the_floor_is_taken(cli: Cli) -> None:
    result = cli("config", "show", EXAMPLE, "--set", "data.std=[1e-6]")
    assert result.code == 0, result.err


@pytest.mark.parametrize("name", ["nb.ipynb:Net", "modle.py:Net", "net.txt:build"])
def test_a_missing_model_file_with_a_suffix_is_told_as_a_file(cli: Cli, name: str) -> None:
    path = name.rpartition(":")[0]
    for command in (("analyze", name, "--input", "1,8,8"), ("export", name, "--out", "m.onnx")):
        result = cli(*command)
        one_line(result, 2, f"model file {path} not found")


def test_a_registered_name_with_a_colon_is_still_a_models(cli: Cli) -> None:
    result = cli("analyze", "resnet2O:x", "--input", "1,8,8")
    one_line(result, 2, "unknown model")
