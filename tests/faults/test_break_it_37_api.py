"""Break-it round 37, the Python API (fixer F1).

C1. `run.log` kept a NumPy complex number (np.complex64(1+2j), a complex 0-d array) as its real
    part, with NumPy's ComplexWarning, where Python's complex and a complex tensor are refused:
    float() takes NumPy's. A complex value is refused as Python's is.
C2. `run.log` of a nested tensor ended in torch's "Internal error: NestedTensorImpl doesn't
    support sizes", raised while the refusal's text read its shape; it is the one line.
C3. An exception whose own __str__ raises, ending a `dlperf.track` block or a `dlperf run`,
    left the run `running` (read as lost), replaced the user's exception with the __str__'s, and
    in the dry check printed both tracebacks: its text is now `<str() failed>` where it is
    formatted, the run is marked failed and the user's exception is raised as it was.
C4. `sys.exit(0)` (or None) inside a `dlperf.track` block, a script's successful end, marked the
    run failed ("SystemExit: 0"); it ends the run as leaving the block does, finished with its
    summary. Any other exit code is still failed.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import dlperf
from dlperf.errors import UserError, error_text
from dlperf.store.record import RunRecord
from tests.conftest import CliResult
from tests.faults.test_break_it_10_models import _exp as exp

Cli = Callable[..., CliResult]


def _run(db: str) -> RunRecord:
    (run,) = dlperf.Store(db).runs()
    return run


# --- C1: a NumPy complex number ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (1 + 2j, "complex (1+2j)"),
        (np.complex64(1 + 2j), "complex64 np.complex64(1+2j)"),
        (np.complex128(3 + 0j), "complex128 np.complex128(3+0j)"),
        (np.array(1 + 2j), "ndarray array(1.+2.j)"),
    ],
    ids=["python", "complex64", "complex128 of no imaginary part", "0-d array"],
)
def test_log_refuses_a_numpy_complex_number_as_a_python_one(db: str, value: Any, said: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # before: NumPy's ComplexWarning, from api.py
        with dlperf.track("c", store=db) as run, pytest.raises(UserError) as e:
            run.log(1, c=value)
    # before: stored as its real part, [(1, 1.0)], and kept as the run's final train/c
    assert str(e.value) == f"metric train/c is a real number, not a complex one, got {said}"
    assert _run(db).summary["final"] == {}


# --- C2: a nested tensor ----------------------------------------------------------------------


def test_log_refuses_a_nested_tensor_in_one_line(db: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's: nested tensors are a prototype
        nested = torch.nested.nested_tensor([torch.tensor([1.0]), torch.tensor([1.0, 2.0])])
    # before: RuntimeError: Internal error: NestedTensorImpl doesn't support sizes
    with dlperf.track("n", store=db) as run, pytest.raises(UserError) as e:
        run.log(1, n=nested)
    assert str(e.value) == (
        "metric train/n is a number, got Tensor nested_tensor([ tensor([1.]), tensor([1., 2.]) ])"
    )


# --- C3: an exception whose __str__ raises ----------------------------------------------------


class StrBroke(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str broke")


def test_error_text_of_an_exception_whose_str_raises() -> None:
    assert error_text(StrBroke()) == "<str() failed>"
    assert error_text(ValueError("bad")) == "bad"


def test_track_marks_failed_and_raises_the_users_exception_whose_str_raises(db: str) -> None:
    raised = StrBroke()
    with pytest.raises(StrBroke) as e, dlperf.track("s", store=db) as run:
        run.log(1, loss=1.0)
        raise raised
    # before: RuntimeError: str broke, and the run left running
    assert e.value is raised
    assert (_run(db).status, _run(db).error) == ("failed", "StrBroke: <str() failed>")


MODELS = """
from torch import nn


class StrBroke(Exception):
    def __str__(self):
        raise RuntimeError("str broke")


class Net(nn.Module):
    def __init__(self, num_classes, training_only):
        super().__init__()
        self.fc = nn.Linear(64, num_classes)
        self.training_only = training_only

    def forward(self, x):
        if not self.training_only or (self.training and x.shape[0] == 16):
            raise StrBroke()
        return self.fc(x.flatten(1))


def mid_training(num_classes=10, in_channels=1):
    return Net(num_classes, True)


def first_forward(num_classes=10, in_channels=1):
    return Net(num_classes, False)
"""


@pytest.mark.parametrize(("factory", "runs"), [("mid_training", ["failed"]), ("first_forward", [])])
def test_run_tells_a_models_exception_whose_str_raises_and_marks_the_run_failed(
    cli: Cli, db: str, tmp_path: Path, factory: str, runs: list[str]
) -> None:
    models = tmp_path / "models.py"
    models.write_text(MODELS)
    result = cli("run", str(exp(tmp_path, f"{models}:{factory}")))
    # before: "the model raised RuntimeError: str broke" and the run lost (mid-training), or
    # both exceptions' tracebacks, 86 lines (its first forward, in the dry check)
    assert result.code == 1
    assert result.err.startswith("error: the model raised StrBroke: <str() failed>\n"), result.err
    assert "str broke" not in result.err and "During handling" not in result.err
    assert [(r.status, r.error) for r in dlperf.Store(db).runs()] == [
        (status, "StrBroke: <str() failed>") for status in runs
    ]


# --- C4: sys.exit inside a track block --------------------------------------------------------


@pytest.mark.parametrize("code", [0, None])
def test_a_successful_sys_exit_in_track_ends_the_run_finished(db: str, code: int | None) -> None:
    with pytest.raises(SystemExit) as e, dlperf.track("done-early", store=db) as run:
        run.log(1, loss=0.5)
        sys.exit(code)
    assert e.value.code == code
    # before: failed, "SystemExit: 0"
    assert (_run(db).status, _run(db).error) == ("finished", None)
    assert _run(db).summary["final"] == {"train/loss": 0.5}


@pytest.mark.parametrize("code", [3, "bad input"])
def test_a_failing_sys_exit_in_track_marks_the_run_failed(db: str, code: int | str) -> None:
    with pytest.raises(SystemExit), dlperf.track("x", store=db) as run:
        run.log(1, loss=0.5)
        sys.exit(code)
    assert (_run(db).status, _run(db).error) == ("failed", f"SystemExit: {code}")


def test_a_sys_exit_after_ctrl_c_in_track_leaves_the_run_killed(db: str) -> None:
    with pytest.raises(KeyboardInterrupt), dlperf.track("x", store=db) as run:
        run.log(1, loss=0.5)
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            sys.exit(0)  # a handler that ends the script quietly: the run was still stopped
    assert _run(db).status == "killed"
