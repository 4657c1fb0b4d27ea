"""Break-it round 50, T2 C1: a stop signal that landed while `import torch` imported NumPy
was lost. torch's C start-up (`from torch._C import *`) imports NumPy and, when that import
raises, clears the error and goes on without NumPy: the KeyboardInterrupt the handler raised
there never reached dlperf, and `dlperf run` trained to its end and exited 0 (1 try in 15
with SIGTERM 2 s after the start, on SQLite and PostgreSQL alike). A stop signal that lands
while modules are being imported is now raised once they are (`stopping._imports_running`),
where nothing can clear it; a second signal is held with it (round 52), a third raises at once.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dlperf import stopping
from dlperf.store import RunStore

SOURCE = str(Path(stopping.__file__).parents[1])  # the dlperf under test, in the subprocess too

# A module whose import is signalled and clears what that raised, as torch's C start-up does.
SWALLOWER = """
import signal

finished = False
try:
    signal.raise_signal(signal.SIGTERM)
except BaseException:  # torch's C code: PyErr_Clear() of a failed NumPy import
    pass
{more}
finished = True
"""


@pytest.fixture
def importable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., str]]:
    """stopping's handlers installed, and a maker of modules to import from tmp_path."""
    stopping.install()
    monkeypatch.syspath_prepend(str(tmp_path))
    made: list[str] = []

    def make(more: str = "") -> str:
        name = f"swallower_{len(made)}"
        (tmp_path / f"{name}.py").write_text(SWALLOWER.format(more=more))
        made.append(name)
        return name

    yield make
    for name in made:
        sys.modules.pop(name, None)


def test_a_stop_that_an_import_clears_is_raised_once_the_import_is_done(
    importable: Callable[..., str],
) -> None:
    name = importable()
    with pytest.raises(KeyboardInterrupt):
        importlib.import_module(name)  # before: imported, the stop gone
    assert sys.modules[name].finished  # the import ran to its end, as torch's must
    assert stopping.exit_code(0) == 143


def test_a_third_signal_during_the_import_raises_at_once(
    importable: Callable[..., str],
) -> None:
    """An import that never ends must not hold a stop off for good. (The second only marks
    the stop since round 52: raised inside torch's start-up, it aborted the process.)"""
    name = importable(more="signal.raise_signal(signal.SIGINT)\nsignal.raise_signal(signal.SIGINT)")
    with pytest.raises(KeyboardInterrupt) as caught:
        importlib.import_module(name)
    assert name not in sys.modules  # cut inside: importlib takes the half-made module out
    assert stopping.exit_code(0) == 143  # the first signal's
    # raised once: not again as the import unwound (it was not cleared)
    assert caught.value.__context__ is None and sys.getprofile() is None


def test_a_second_signal_that_the_import_clears_too_is_raised_once_it_is_done(
    importable: Callable[..., str],
) -> None:
    """Round 51, T2 C1: Ctrl-C pressed twice as torch started (the first seemed to do nothing)
    was lost both times when torch cleared the second as well, and the command ran."""
    cleared = "try:\n    signal.raise_signal(signal.SIGINT)\nexcept BaseException:\n    pass"
    name = importable(more=cleared)
    with pytest.raises(KeyboardInterrupt):
        importlib.import_module(name)  # before round 51: imported, both stops gone
    assert sys.modules[name].finished
    assert stopping.exit_code(0) == 143


# `dlperf run` with SIGTERM sent as torch's start-up imports NumPy: exactly T2's moment.
SIGNALLED_AT_NUMPY = f"""
import os, runpy, signal, sys

sys.path.insert(0, {SOURCE!r})


class Signal:
    def find_spec(self, name, path, target=None):
        if name == "numpy._core._add_newdocs":  # torch._C's import of NumPy, half done
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGTERM)
        return None


sys.meta_path.insert(0, Signal())
sys.argv = ["dlperf", *sys.argv[1:]]
runpy.run_module("dlperf", run_name="__main__")
"""


def test_dlperf_run_signalled_as_torch_imports_numpy_stops(
    tmp_path: Path, tiny_exp: Callable[..., Path]
) -> None:
    exp = tiny_exp(epochs=1)
    db = tmp_path / "s.db"
    done = subprocess.run(
        [sys.executable, "-c", SIGNALLED_AT_NUMPY, "--db", str(db), "run", str(exp)],
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    # before: 0, the run trained and stored finished
    assert done.returncode == 143, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    runs = RunStore.open(str(db), create=False).list_runs() if db.exists() else []
    assert [r.status for r in runs] in ([], ["killed"]), runs
