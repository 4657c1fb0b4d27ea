"""The twenty-third break-it round, P1 (the user's own models), fixer B: what a model file
leaves in the process, and the lines that name a model file's factory.

- C2: a model file's `sys.setrecursionlimit(80)` at import stayed: the next deep import of
  dlperf's (torch._dynamo, as the optimizer is built) failed in an 85-line RecursionError
  traceback, and an API caller's process kept the limit. A lowered limit is now put back,
  with a one-line warning, as the stop handlers, the working directory and torch's defaults
  are.
- C3: the os._exit guard stayed installed for the rest of the process: a model file's
  `atexit.register(lambda: os._exit(3))` ended a finished command in Python's "Exception
  ignored in atexit callback ... ModelOsExit: 3" traceback, exit 0. Once the process is
  exiting os._exit is the real one: the model's status, dlperf's output flushed first, and
  one line saying the status is the model's.
- C7: factory-lookup lines with an empty or wrong fix: "has no factory 'build' (found: )" for
  an empty file and for `build = 5`, "found: Linear" offering a class the file imported,
  "model file c not found" for "c:d/net.py" (split at a directory's colon), and "use
  path/to/file.py:factory" for a stored run whose model file is gone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.errors import UserError
from dlperf.models.registry import create_model, load_factory, noting, rebuilding
from tests.conftest import CliResult
from tests.faults.test_break_it_21_models import _model
from tests.faults.test_break_it_22_models import _unwrapped

DEADLINE_S = 300


# --- C2: the recursion limit ---------------------------------------------------------------------

# As low as it can be where the file runs (Python refuses a limit under the current depth):
# under pytest the stack is deeper than the CLI's, and 80 would be refused, not set.
LOWERS = """
import sys
def _depth():
    frame, n = sys._getframe(), 0
    while frame is not None:
        frame, n = frame.f_back, n + 1
    return n
sys.setrecursionlimit(_depth() + 30)
"""


def test_a_lowered_recursion_limit_is_put_back_with_one_line(tmp_path: Path) -> None:
    before = sys.getrecursionlimit()
    spec = _model(tmp_path, LOWERS)
    try:
        with noting() as notes:
            create_model(spec, num_classes=10, in_channels=1)
        after = sys.getrecursionlimit()
    finally:
        sys.setrecursionlimit(before)
    assert after == before  # before: the model's, for the rest of the caller's process
    (note,) = notes
    assert "lowered Python's recursion limit to" in note and "as it was imported" in note, note
    assert f"put back to {before}" in note, note


def test_a_raised_recursion_limit_is_kept_unsaid(tmp_path: Path) -> None:
    before = sys.getrecursionlimit()
    spec = _model(tmp_path, f"import sys; sys.setrecursionlimit({before + 500})")
    try:
        with noting() as notes:
            create_model(spec, num_classes=10, in_channels=1)
        after = sys.getrecursionlimit()
    finally:
        sys.setrecursionlimit(before)
    assert after == before + 500 and notes == []  # a deep model's forward may need it


def test_a_run_of_a_model_that_lowers_the_recursion_limit_trains(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    before = sys.getrecursionlimit()
    _model(tmp_path, LOWERS)
    (tmp_path / "exp.toml").write_text(
        '[model]\nname = "model.py:build"\n[data]\nname = "digits"\nlimit = 64\n'
        '[train]\nepochs = 1\nbatch_size = 32\n[run]\nthreads = 1\nout_dir = "out"\n'
    )
    try:
        done = cli("run", "exp.toml")
        after = sys.getrecursionlimit()
    finally:
        sys.setrecursionlimit(before)
    assert done.code == 0, done.err  # before: a RecursionError traceback, the run failed
    assert after == before
    assert "Traceback" not in done.err and "RecursionError" not in done.err, done.err
    said = _unwrapped(done.err)
    assert said.count(_unwrapped("lowered Python's recursion limit to")) == 1, done.err


# --- C3: os._exit in an exit handler ---------------------------------------------------------

ATEXIT_LAMBDA = "import atexit, os\natexit.register(lambda: os._exit(3))"
ATEXIT_BOUND = "import atexit, os\natexit.register(os._exit, 3)"  # no Python frame calls it


def _analyze(tmp_path: Path, spec: str) -> subprocess.CompletedProcess[str]:
    command = ["analyze", spec, "--input", "1,8,8", "--json"]
    return subprocess.run(
        [sys.executable, "-m", "dlperf", *command],
        cwd=tmp_path,
        capture_output=True,  # a pipe: stdout is block-buffered, as in `> out.json`
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=DEADLINE_S,
    )


@pytest.mark.faults  # a real process's exit (an in-process one would end pytest): 10-30 s
@pytest.mark.parametrize("body", [ATEXIT_LAMBDA, ATEXIT_BOUND], ids=["lambda", "bound"])
def test_os_exit_in_a_model_exit_handler_is_the_real_one(tmp_path: Path, body: str) -> None:
    done = _analyze(tmp_path, _model(tmp_path, body))
    # before: exit 0 and "Exception ignored in atexit callback ... ModelOsExit: 3" (lambda), or
    # "... ValueError: call stack is not deep enough" (bound)
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    # The model's status: os._exit does not return, and the command's work is done
    assert done.returncode == 3, done.stderr
    assert json.loads(done.stdout)["model"]  # dlperf's document flushed before the exit
    if body == ATEXIT_LAMBDA:
        said = _unwrapped(done.stderr)
        assert _unwrapped("model.py (line 3) called os._exit(3) as the process exited") in said
        assert said.count("os._exit") == 1, done.stderr


def test_os_exit_in_forward_still_fails_in_process(tmp_path: Path) -> None:
    """The guard still holds while dlperf calls the model, after an exit handler's import."""
    from dlperf.errors import ModelOsExit

    path = tmp_path / "fw.py"
    path.write_text(
        "import atexit, os, torch.nn as nn\n"
        "class N(nn.Module):\n"
        "    def __init__(self, num_classes=10, in_channels=1):\n"
        "        super().__init__(); self.f = nn.Linear(64, num_classes)\n"
        "    def forward(self, x):\n"
        "        os._exit(4)\n"
        "def build(num_classes=10, in_channels=1): return N(num_classes)\n"
    )
    model = create_model(f"{path}:build", num_classes=10, in_channels=1)
    import torch

    with pytest.raises(ModelOsExit) as raised:
        model(torch.zeros(1, 64))
    assert raised.value.code == 4


# --- C7: the lines that name a factory ------------------------------------------------------


def _refused(spec: str) -> UserError:
    with pytest.raises(UserError) as raised:
        load_factory(spec)
    return raised.value


@pytest.mark.parametrize("text", ["", "import torch\nfrom torch.nn import Linear\nx = 1\n"])
def test_a_file_that_defines_no_factory_says_what_to_write(tmp_path: Path, text: str) -> None:
    path = tmp_path / "net.py"
    path.write_text(text)
    e = _refused(f"{path}:build")
    # before: "has no factory 'build' (found: )", or "(found: Linear)": torch's class
    assert e.message == f"model file {path} defines no function or nn.Module class", e
    assert e.hint is not None and "def build(num_classes=10)" in e.hint, e
    assert "Linear" not in str(e)


def test_a_factory_name_that_is_no_callable_says_what_it_is(tmp_path: Path) -> None:
    path = tmp_path / "net.py"
    path.write_text("build = 5\n")
    e = _refused(f"{path}:build")
    assert e.message == f"{path}: 'build' is an int, not a factory", e  # before: "no factory"
    assert e.hint is not None and "def build(num_classes=10)" in e.hint, e


def test_found_names_only_what_the_file_defines(tmp_path: Path) -> None:
    (tmp_path / "helper.py").write_text(
        "import torch.nn as nn\ndef make_head(num_classes=10): return nn.Linear(4, num_classes)\n"
    )
    path = tmp_path / "net.py"
    path.write_text(
        "import functools, dataclasses, torch\n"
        "from torch import nn\n"
        "from torch.nn import Linear, Sequential\n"
        "from helper import make_head\n"
        "@dataclasses.dataclass\n"
        "class Settings:\n"
        "    width: int = 4\n"
        "class Net(nn.Module):\n"
        "    def __init__(self, num_classes=10):\n"
        "        super().__init__(); self.f = nn.Linear(64, num_classes)\n"
        "def make(num_classes=10): return Net(num_classes)\n"
        "small = functools.partial(Linear, 64)\n"
        "ready = Net()\n"
    )
    e = _refused(f"{path}:build")
    assert e.message == f"{path} has no factory 'build'", e
    # before: also Linear, Sequential, Settings, ready (an instance), and functools' names
    assert e.hint == "found: make_head, Net, make, small", e


def test_a_colon_in_a_directory_is_no_factory(tmp_path: Path) -> None:
    (tmp_path / "c:d").mkdir()
    (tmp_path / "c:d" / "net.py").write_text("X = 1\n")
    spec = f"{tmp_path}/c:d/net.py"
    e = _refused(spec)
    assert e.message == f"model '{spec}' names a file but no factory", e  # before: "c not found"
    assert e.hint is not None and e.hint.endswith(f"{spec}:build"), e
    # A factory after it is found as before
    (tmp_path / "c:d" / "net.py").write_text(
        "import torch.nn as nn\ndef build(num_classes=10): return nn.Linear(4, num_classes)\n"
    )
    assert callable(load_factory(f"{spec}:build"))


def test_a_stored_run_whose_model_file_is_gone_says_restore_it(tmp_path: Path) -> None:
    spec = f"{tmp_path / 'gone.py'}:build"
    with rebuilding("run 51"):
        e = _refused(spec)
    assert e.message == f"model file {tmp_path / 'gone.py'} not found", e
    # before: "use path/to/file.py:factory", a fix a stored run cannot take
    assert e.hint is not None and e.hint.startswith("restore the file run 51 was trained with")
    assert _refused(spec).hint == "use path/to/file.py:factory"  # a name the user typed
