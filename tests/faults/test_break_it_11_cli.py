"""The eleventh break-it round (the command line): a model's BaseException, closed streams, a
message of several lines, and converge CSVs that fit more than one way.

A model whose forward raised a BaseException that is not an Exception (GeneratorExit, its own
subclass) printed Python's traceback through dlperf's frames. `dlperf config keys >&-` was an
AttributeError traceback at import (console asked the missing stdout whether it was a
terminal), exit 1, and `dlperf run nonexist.toml 2>&-` exited 1 rather than 2 (`config show`
here: the same failure, without importing torch). A model file raising
RuntimeError("first\\nsecond") at import, or a forward raising one, printed its message over
several lines, and a CSV header `"met\\nric"` split `did you mean` over two. And `converge fit`
took `step,metric,metric` (one of the two columns) and a row with more fields than the header
(the extras dropped) without a word.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.converge.tables import read_numbers
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_break_it_9_misc import _one_line as one_line
from tests.faults.test_break_it_10_models import _exp as exp
from tests.faults.test_break_it_10_models import _told_as_the_models as told_as_the_models

Cli = Callable[..., CliResult]

MODELS = """
import torch
from torch import nn


class Base(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.fc = nn.Linear(in_channels * 8 * 8, num_classes)
        self.calls = 0

    def forward(self, x):
        return self.fc(x.flatten(1))


class MyBase(BaseException):
    pass


class RaisesBase(Base):
    def forward(self, x):
        raise MyBase("custom BaseException from the model")


def raises_base(num_classes=10, in_channels=1):
    return RaisesBase(num_classes, in_channels)


class GenExit(Base):
    def forward(self, x):
        raise GeneratorExit


def raises_genexit(num_classes=10, in_channels=1):
    return GenExit(num_classes, in_channels)


class LateBase(Base):
    def forward(self, x):
        # training forwards only: the checks' eval-mode ones grew in round 25 (the run's batch
        # size, the evaluation splits' last batches), and a count of all raised before the run
        if self.training:
            self.calls += 1
            if self.calls > 4:  # past the checks' forwards: mid-training
                raise MyBase("late at call 5")
        return super().forward(x)


def late_base(num_classes=10, in_channels=1):
    return LateBase(num_classes, in_channels)


class Interrupts(Base):
    def forward(self, x):
        raise KeyboardInterrupt


def raises_kbi(num_classes=10, in_channels=1):
    return Interrupts(num_classes, in_channels)


class MultiLine(Base):
    def forward(self, x):
        raise ValueError("line one\\nline two\\u2028line three")


def multiline_raise(num_classes=10, in_channels=1):
    return MultiLine(num_classes, in_channels)
"""


@pytest.fixture
def models(tmp_path: Path) -> Path:
    path = tmp_path / "models.py"
    path.write_text(MODELS)
    return path


# --- 4. a BaseException from the model ---------------------------------------------------------


@pytest.mark.parametrize(
    ("factory", "said"),
    [
        ("raises_base", "MyBase: custom BaseException from the model"),
        ("raises_genexit", "GeneratorExit"),
    ],
)
def test_a_models_base_exception_on_its_first_forward_is_the_models(
    cli: Cli, tmp_path: Path, models: Path, store: RunStore, factory: str, said: str
) -> None:
    # before: Python's traceback through dlperf's and Typer's frames, exit 1
    told_as_the_models(cli("run", str(exp(tmp_path, f"{models}:{factory}"))), said)
    assert store.list_runs() == []  # refused before anything is recorded, as an Exception is


def test_a_models_base_exception_mid_training_is_the_models_and_the_run_failed(
    cli: Cli, tmp_path: Path, models: Path, store: RunStore
) -> None:
    # before: the run was stored failed, and the traceback printed all the same
    told_as_the_models(
        cli("run", str(exp(tmp_path, f"{models}:late_base"))), "MyBase: late at call 5"
    )
    assert [run.status for run in store.list_runs()] == ["failed"]


def test_a_models_keyboard_interrupt_is_still_ctrl_c(
    cli: Cli, tmp_path: Path, models: Path
) -> None:
    result = cli("run", str(exp(tmp_path, f"{models}:raises_kbi")))
    assert result.code == 130, result
    assert "the model raised" not in result.err


# --- 8. a closed stdout or stderr --------------------------------------------------------------

GUARD_S = 60


def _closed(stream: int, *args: str) -> tuple[int, str]:
    """`dlperf ARGS` started with file descriptor `stream` (1 or 2) closed, as `>&-` does; its
    exit code and what it wrote to the other stream."""
    proc = subprocess.Popen(
        ["bash", "-c", f'exec "$0" "$@" {stream}>&-', sys.executable, "-m", "dlperf", *args],
        stdout=subprocess.PIPE if stream == 2 else None,
        stderr=subprocess.PIPE if stream == 1 else None,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=GUARD_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"dlperf {' '.join(args)} still running after {GUARD_S} s")
    return proc.returncode, out if stream == 2 else err


def test_a_closed_stdout_loses_the_output_and_keeps_the_exit_code(db: str) -> None:
    # before: AttributeError: 'NoneType' object has no attribute 'isatty', exit 1
    assert _closed(1, "config", "keys") == (0, "")
    assert _closed(1, "runs", "list", "--json") == (0, "")


def test_a_closed_stderr_keeps_a_bad_inputs_exit_code(db: str, tmp_path: Path) -> None:
    # before: exit 1 (the same AttributeError, told to nobody)
    code, out = _closed(2, "config", "show", str(tmp_path / "nonexist.toml"))
    assert (code, out) == (2, "")  # the error line is lost, not moved to stdout
    assert _closed(2, "runs", "list", "--json") == (0, "[]\n")


def test_a_closed_descriptor_is_held_on_dev_null() -> None:
    # so that no file the command opens next (the run store) takes descriptor 1
    code = (
        "import os, sys; import dlperf.cli.console; "
        "print(os.readlink('/proc/self/fd/1'), sys.stdout is not None, file=sys.stderr)"
    )
    proc = subprocess.run(
        ["bash", "-c", 'exec "$0" "$@" >&-', sys.executable, "-c", code],
        stderr=subprocess.PIPE, text=True, timeout=GUARD_S,
    )  # fmt: skip
    assert (proc.returncode, proc.stderr) == (0, f"{os.devnull} True\n")


# --- 9. a message of several lines -------------------------------------------------------------


def test_a_model_files_multi_line_import_error_is_one_line(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "ml.py"
    path.write_text('raise RuntimeError("first\\nsecond\\rthird\\u2028fourth")\n')
    # before: "error: model file ml.py failed to import: RuntimeError: first" and three more lines
    line = one_line(cli("run", str(exp(tmp_path, f"{path}:net"))))
    assert line.endswith("RuntimeError: first\\nsecond\\rthird\\u2028fourth"), line


def test_a_models_multi_line_message_is_its_first_line(
    cli: Cli, tmp_path: Path, models: Path
) -> None:
    result = cli("run", str(exp(tmp_path, f"{models}:multiline_raise")))
    # before: "error: the model raised ValueError: line one", then "line two", ...
    told_as_the_models(result, "ValueError: line one\\nline two\\u2028line three")


def _csv(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "curve.csv"
    path.write_text(text, newline="")
    return path


def test_a_header_with_a_newline_is_named_escaped(cli: Cli, tmp_path: Path) -> None:
    path = _csv(tmp_path, 'step,"met\nric"\n1,2.0\n2,1.5\n3,1.2\n')
    # before: "... has no column 'metric' (did you mean 'met" and "ric'?)"
    assert one_line(cli("converge", "fit", "--csv", str(path), "--y", "metric")) == (
        f"error: {path} has no column 'metric' (did you mean 'met\\nric'?)"
    )
    assert one_line(cli("converge", "fit", "--csv", str(path), "--y", "zzz")) == (
        f"error: {path} has no column 'zzz' (columns: step, met\\nric)"
    )
    with pytest.raises(UserError) as e:  # the library's own line, for the API too
        read_numbers(path, ["metric"])
    assert str(e.value) == f"{path} has no column 'metric' (did you mean 'met\\nric'?)"


# --- 10. a CSV that fits more than one way -----------------------------------------------------

CURVE = "".join(f"{i},{2.0 / i},{1.0 / i}\n" for i in range(1, 8))


def test_a_column_named_twice_is_refused(cli: Cli, tmp_path: Path) -> None:
    path = _csv(tmp_path, "step,metric,metric\n" + CURVE)
    # before: exit 0, the fit of one of the two (csv.DictReader keeps the last)
    assert one_line(cli("converge", "fit", "--csv", str(path), "--x", "step", "--y", "metric")) == (
        f"error: {path}: column 'metric' is named 2 times in the header (give each column "
        "its own name)"
    )


def test_a_column_named_twice_but_not_read_is_no_matter(cli: Cli, tmp_path: Path) -> None:
    path = _csv(
        tmp_path, "step,metric,note,note\n" + "".join(f"{i},{2.0 / i},a,b\n" for i in range(1, 8))
    )
    result = cli("converge", "fit", "--csv", str(path), "--x", "step", "--y", "metric")
    assert result.code == 0, result


def test_a_row_with_more_fields_than_the_header_is_refused(cli: Cli, tmp_path: Path) -> None:
    path = _csv(tmp_path, 'step,metric\n1,2.0\n2,1.5\n"3",1.2,extra\n4,1.0\n5,0.9\n')
    # before: exit 0, the extra field dropped (csv.DictReader put it under the key None)
    assert one_line(cli("converge", "fit", "--csv", str(path), "--y", "metric")) == (
        f"error: {path}:4: 3 fields where the header has 2 (quote a field that holds a comma)"
    )
