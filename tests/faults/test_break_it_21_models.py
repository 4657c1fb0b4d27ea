"""The twenty-first break-it round, P1 (the user's own models): what a model file does to the
process as it is imported, or in its factory.

- C1: a model file that set SIGINT/SIGTERM to SIG_IGN (or a handler of its own that calls
  sys.exit(0)) replaced dlperf's stop handlers: Ctrl-C and SIGTERM no longer stopped the run
  (only SIGKILL did, the run then read back as lost), or ended it as "the model called
  sys.exit(0)". The handlers there before the import and before the factory call are now
  put back, with a one-line warning.
- C6: a model file's os.chdir moved where relative outputs landed (run.out_dir, export --out):
  the working directory is put back, with a one-line warning.
- C7: a child process a model file started outlived dlperf with no word: it is named (pid and
  command) in a one-line warning, and left running (it is the user's).
- C8a: an `async def` factory's one-line refusal was followed by Python's three-line
  "coroutine ... was never awaited" RuntimeWarning: the coroutine is closed first.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from pathlib import Path

import pytest
from torch import nn

from dlperf.errors import UserError
from dlperf.models.registry import build_from_factory, create_model, load_factory, noting
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.forked import dlperf_process

DEADLINE_S = 300

# Sets the stop signals' handlers at import (SIG_IGN) or in its factory (its own SIGINT
# handler ending the process as a success), and writes `training` beside itself once its
# forward has run often enough to be past the dry checks, inside the first epoch.
STOPPER = """
import signal, sys
from pathlib import Path
import torch.nn as nn

if "import" in Path(__file__).with_name("where").read_text():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def bye(signum, frame):
    print("bye")
    sys.exit(0)


class Net(nn.Module):
    def __init__(self, num_classes, in_channels):
        super().__init__()
        self.fc = nn.Linear(in_channels * 64, num_classes)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls == 30:
            Path(__file__).with_name("training").write_text("")
        return self.fc(x.flatten(1))


def build(num_classes=10, in_channels=1):
    if "factory" in Path(__file__).with_name("where").read_text():
        signal.signal(signal.SIGINT, bye)
    return Net(num_classes, in_channels)
"""

LONG_RUN = """
[model]
name = "model.py:build"
[data]
name = "digits"
[train]
epochs = 100000
batch_size = 32
lr = 0.05
[run]
threads = 1
"""


def _unwrapped(text: str) -> str:
    """`text` without its whitespace: the console wraps lines at its width, inside a long
    word (a path) too."""
    return "".join(text.split())


def _wait_for(path: Path, proc: BaseProcess, err: Path) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not path.exists():
        if not proc.is_alive():
            raise AssertionError(f"the run ended ({proc.exitcode}): {err.read_text()}")
        assert time.monotonic() < deadline, f"no {path.name} after {DEADLINE_S} s"
        time.sleep(0.02)


@pytest.mark.faults  # a real run in a process of its own: 10-30 s on a busy machine
@pytest.mark.parametrize(
    ("where", "stop"),
    [("import", signal.SIGINT), ("factory", signal.SIGINT)],
)
def test_a_model_file_that_sets_stop_handlers_still_stops_on_ctrl_c(
    db: str, tmp_path: Path, where: str, stop: signal.Signals
) -> None:
    (tmp_path / "model.py").write_text(STOPPER)
    (tmp_path / "where").write_text(where)
    (tmp_path / "exp.toml").write_text(LONG_RUN)
    err = tmp_path / "stderr.txt"
    # forked, in tmp_path (db's cwd): the model file's handlers meet dlperf's, as at a start
    proc = dlperf_process(["--db", db, "run", "exp.toml"], err)
    try:
        _wait_for(tmp_path / "training", proc, err)
        assert proc.pid is not None
        os.kill(proc.pid, stop)
        # before: SIG_IGN, it trained on; its own handler, exit 1
        proc.join(timeout=DEADLINE_S)
        code = proc.exitcode
    finally:
        proc.kill()
        proc.join()
    said = err.read_text()
    assert code == 128 + stop, said
    assert RunStore.open(db).get_run(1).status == "killed"
    names = "SIGINT and SIGTERM handlers" if where == "import" else "SIGINT handler"
    when = "as it was imported" if where == "import" else "in its factory"
    warning = f"warning: model file {tmp_path / 'model.py'} set its own {names} {when}; the one"
    assert _unwrapped(said).count(_unwrapped(warning)) == 1, said
    assert said.count("handler") == 1, said
    assert "bye" not in said


def _model(tmp_path: Path, body: str, name: str = "model.py") -> str:
    path = tmp_path / name
    path.write_text(
        "import torch.nn as nn\n"
        f"{body}\n"
        "def build(num_classes=10, in_channels=1):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, num_classes))\n"
    )
    return f"{path}:build"


def test_a_model_file_that_ignores_sigint_at_import_has_it_put_back(tmp_path: Path) -> None:
    """SIGINT and SIGTERM both put back: the run stopped by SIGINT above proves the stop end
    to end; a second run stopped by SIGTERM re-proved it at a process start, SIGTERM's handler
    being put back by the same loop over the stop signals (checked here) and its stop being
    any SIGTERM's (test_run_faults.py)."""
    spec = _model(
        tmp_path,
        "import signal\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)",
    )
    # Python's own handler first, as dlperf starts with it: a pytest worker (xdist's, or a
    # shell's background job) may already ignore SIGINT, and then the model changes nothing.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    previous_term = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with noting() as notes:
            create_model(spec)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, previous_term)
    assert len(notes) == 1, notes
    assert "SIGINT and SIGTERM handlers as it was imported" in notes[0], notes


def test_a_model_file_that_changes_directory_has_it_put_back(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _model(tmp_path, f"import os\nos.chdir({str(elsewhere)!r})")
    (tmp_path / "exp.toml").write_text(
        '[model]\nname = "model.py:build"\n[data]\nname = "digits"\nlimit = 64\n'
        '[train]\nepochs = 1\nbatch_size = 32\n[run]\nthreads = 1\nout_dir = "out"\n'
    )
    done = cli("run", "exp.toml")
    assert done.code == 0, done.err
    assert Path.cwd() == tmp_path  # before: elsewhere, for the rest of the process
    assert list((tmp_path / "out").rglob("checkpoint.pt")), done.err  # before: under elsewhere
    assert not (elsewhere / "out").exists()
    warning = (
        f"warning: model file {tmp_path / 'model.py'} changed the working directory to "
        f"{elsewhere} as it was imported; set back to {tmp_path}"
    )
    assert _unwrapped(done.err).count(_unwrapped(warning)) == 1, done.err
    assert _unwrapped(done.err).count("workingdirectory") == 1, done.err


def test_a_factory_that_changes_directory_has_it_put_back(tmp_path: Path) -> None:
    path = tmp_path / "model.py"
    path.write_text(
        "import os, torch.nn as nn\n"
        "def build(num_classes=10):\n"
        f"    os.chdir({str(tmp_path.parent)!r})\n"
        "    return nn.Linear(4, num_classes)\n"
    )
    here = os.getcwd()
    try:
        with noting() as notes:
            create_model(f"{path}:build")
        assert os.getcwd() == here
    finally:
        os.chdir(here)
    assert len(notes) == 1 and "in its factory" in notes[0], notes


def test_a_child_process_started_at_import_is_named(tmp_path: Path) -> None:
    # The import waits for the child's first line: Popen returns once the child's exec has
    # closed its close-on-exec pipe, before the kernel has set up the new program's arguments,
    # and /proc/PID/cmdline read in that window is empty (the note said "process N ()").
    spec = _model(
        tmp_path,
        "import subprocess, sys\n"
        "CODE = 'import sys; print(1, flush=True); sys.stdin.read()'\n"
        "P = subprocess.Popen([sys.executable, '-c', CODE],"
        " stdin=subprocess.PIPE, stdout=subprocess.PIPE)\n"
        "P.stdout.readline()",
    )
    with noting() as notes:
        fn = load_factory(spec)
    child: subprocess.Popen[bytes] = sys.modules[fn.__module__].P  # type: ignore[attr-defined]
    try:
        assert child.poll() is None  # left running: it is the model's
        (note,) = notes  # before: nothing said
        assert f"started process {child.pid} (" in note, note
        assert (
            "import sys; print(1, flush=True); sys.stdin.read()" in note and "outlives" in note
        ), note
    finally:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.close()
        child.wait(timeout=60)
        child.stdout.close()


def test_without_a_collector_the_notes_are_warnings(tmp_path: Path) -> None:
    spec = _model(tmp_path, f"import os\nos.chdir({str(tmp_path.parent)!r})", "moves.py")
    here = os.getcwd()
    try:
        with pytest.warns(RuntimeWarning, match="changed the working directory"):
            create_model(spec)
        assert os.getcwd() == here
    finally:
        os.chdir(here)


def test_an_async_factory_is_refused_without_a_never_awaited_warning(tmp_path: Path) -> None:
    path = tmp_path / "fac.py"
    path.write_text(
        "import torch.nn as nn\nasync def coro(num_classes=10):\n    return nn.Linear(64, 10)\n"
    )
    spec = f"{path}:coro"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            build_from_factory(load_factory(spec), spec, {"num_classes": 10})
        except UserError as e:
            said = str(e)
        else:
            raise AssertionError("an async factory was taken")
        gc.collect()
    assert said.startswith(f"factory {spec} returned coroutine, not a torch.nn.Module"), said
    assert "async def" in said, said
    never = [w for w in caught if "never awaited" in str(w.message)]
    assert not never, never  # before: RuntimeWarning: coroutine 'coro' was never awaited


def test_a_sound_model_file_says_nothing(tmp_path: Path) -> None:
    spec = _model(tmp_path, "X = 1")
    with noting() as notes:
        model = create_model(spec)
    assert isinstance(model, nn.Module) and notes == []
