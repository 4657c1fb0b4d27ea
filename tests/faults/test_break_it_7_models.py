"""The seventh break-it round (issue 41), models: a training output checked for its columns and
its dtype as well as its rows, and a factory's TypeError told against the kwargs given.

During training only the output's row count was checked: scores that grow from 10 to 13
columns after the up-front check trained on silently (finished, val acc 0.076), and scores
that turn int64 ended the run in a 62-line traceback from the loss. A `[model]` kwarg of the
wrong type made the factory raise a TypeError told with the hint "give the argument a default,
or its value in [model] kwargs", which the user had done.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_break_it_6_scale import _args, _experiment

Cli = Callable[..., CliResult]

EXP = """
[model]
name = "{model}"
[data]
name = "digits"
limit = 200
[train]
epochs = 1
batch_size = 32
lr = 0.05
[run]
threads = 1
warmup_steps = 1
"""

# Right for the up-front checks (two forwards in training mode: the classifier check's and the
# backward check's), then wrong from the first training step in the way each case names.
LATER = """
from torch import nn

class Net(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.f = nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes + 3))
        self.n = num_classes
        self.calls = 0

    def forward(self, x):
        y = self.f(x)
        if self.training:
            self.calls += 1
            if self.calls > 2:
                return {wrong}
        return y[:, : self.n]
"""


def one_line_failure(result: CliResult, store: RunStore, said: str) -> None:
    """The run failed (exit 1) with the one line `said`, no traceback, stored as its error."""
    assert result.code == 1, (result.code, result.out, result.err)
    assert "Traceback" not in result.err, result.err
    err = " ".join(result.err.split())  # the console wraps the line at its width
    assert f"run 1 failed: {said}" in err, result.err
    [run] = store.list_runs()
    assert run.status == "failed"
    assert run.error == said


@pytest.mark.parametrize(
    ("wrong", "said"),
    [
        ("y", "model Net returned shape [32, 13] for a batch of 32 images: expected "
              "[32, 10], one score per class (10) for each image"),
        ("(y[:, : self.n] * 100).long()", "model Net returned torch.int64 scores for a batch "
              "of 32 images: expected float scores (logits)"),
    ],
    ids=["columns", "dtype"],
)  # fmt: skip
def test_output_that_turns_wrong_after_the_up_front_check_fails_the_run_in_one_line(
    cli: Cli, tmp_path: Path, store: RunStore, wrong: str, said: str
) -> None:
    model = tmp_path / "later.py"
    model.write_text(LATER.format(wrong=wrong))
    exp = tmp_path / "exp.toml"
    exp.write_text(EXP.format(model=f"{model}:Net"))
    one_line_failure(cli("run", str(exp)), store, said)


WIDTH = """
from torch import nn

def Net(num_classes=10, in_channels=1, width: int = 4):
    return nn.Sequential(
        nn.Conv2d(in_channels, width, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(width, num_classes),
    )

def Needs(width, depth, num_classes=10):
    return nn.Linear(width * depth, num_classes)
"""


def refused(result: CliResult) -> str:
    """Exit 2, no traceback: what was said, its lines wrapped by the console joined again."""
    assert result.code == 2, (result.code, result.err)
    assert "Traceback" not in result.err, result.err
    return " ".join(result.err.split())


def test_factory_type_error_names_the_kwargs_given(cli: Cli, tmp_path: Path) -> None:
    model = tmp_path / "wmodel.py"
    model.write_text(WIDTH)
    result = cli(
        "predict", f"{model}:Net", "--input", "1,8,8", "--device", "V100",
        "--set", "model.kwargs.width=[4]",
    )  # fmt: skip
    said = refused(result)
    assert said.startswith(f"error: factory {model}:Net failed: TypeError: "), said
    # before: "(give the argument a default, or its value in [model] kwargs)", which was done
    assert said.endswith("(check the values given in [model] kwargs: width=[4])"), said


def test_factory_missing_argument_keeps_its_hint(cli: Cli, tmp_path: Path) -> None:
    """A required argument not given is still told to be given, kwargs or none."""
    model = tmp_path / "wmodel.py"
    model.write_text(WIDTH)
    hint = "(give the argument a default, or its value in [model] kwargs)"
    for given in ([], ["--set", "model.kwargs.width=4"]):
        said = refused(cli("analyze", f"{model}:Needs", "--input", "1,8,8", *given))
        assert "missing" in said and said.endswith(hint), said


@pytest.mark.faults  # over 10 s under load: make test-faults
def test_scale_worker_fails_the_point_on_an_output_grown_wider(
    cli: Cli, db: str, tmp_path: Path
) -> None:
    """The worker's step holds the output to the classes its model was checked against, as
    a plain run's does (before: finished, exit 0)."""
    exp = _experiment(tmp_path, LATER.format(wrong="y"))
    r = cli(*_args(exp, 8, workers=1))  # every rank's output grows
    assert r.code == 1, r.err
    assert "Traceback" not in r.err and 'File "' not in r.err, r.err
    said = "model Net returned shape [8, 13] for a batch of 8 images: expected [8, 10]"
    assert said in " ".join(r.err.split()), r.err
    (run,) = RunStore.open(db).list_runs(kind="scale")
    assert run.status == "failed"
    assert run.error is not None and run.error.startswith(said), run.error
