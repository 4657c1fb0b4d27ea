"""Break-it round 52, fixer F2: a second stop signal while torch's start-up imports held the
first.

T2 C2. Round 50 held a stop signal that lands while modules are imported until they are;
round 51 raised a second one at once, inside the import, and again once the imports ended if
it read as cleared (a refcount check). SIGTERM then Ctrl-C as torch started (a scheduler, then
its user) raised the interrupt inside `torch._C._c10d_init()`, where pybind11 cannot pass it
on: `terminate called after throwing an instance of 'pybind11::error_already_set'`, SIGABRT,
exit 134 and a C++ stack; elsewhere C code swallowed and kept it, the refcount check missed
it, and the command trained to its end, exit 0, its run stored `finished` (1 try in 10). Now a
second signal while imports hold the first is only marked: the held stop is raised once the
imports end, exit 128 + the first signal (143, or 130 for Ctrl-C twice), and only a third
raises at once, so an import that never ends (a model file's loop) still gives way.
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

SOURCE = str(Path(stopping.__file__).parents[1])  # the dlperf under test, in the subprocess too

# A module whose import is sent `signals` in turn where C code would swallow and keep what is
# raised (pybind11's `error_already_set` keeps the interrupt), then `then` where nothing does.
SIGNALLED = """
import signal, time

kept = []
for name in {signals!r}:
    try:
        signal.raise_signal(getattr(signal, name))
        time.sleep(0)  # a call: where a raised interrupt would land
    except BaseException as error:  # torch's C code: swallowed, kept
        kept.append(error)
for name in {then!r}:  # where nothing swallows them
    signal.raise_signal(getattr(signal, name))
    time.sleep(0)
deadline = time.monotonic() + {loop_s}  # an import that never ends (bounded for the test)
while time.monotonic() < deadline:
    time.sleep(0.01)
finished = True
"""


@pytest.fixture
def importable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., str]]:
    """stopping's handlers installed, and a maker of signalled modules to import."""
    stopping.install()
    monkeypatch.syspath_prepend(str(tmp_path))
    made: list[str] = []

    def make(*signals: str, then: tuple[str, ...] = (), loop_s: float = 0.0) -> str:
        name = f"signalled_{len(made)}"
        text = SIGNALLED.format(signals=signals, then=then, loop_s=loop_s)
        (tmp_path / f"{name}.py").write_text(text)
        made.append(name)
        return name

    yield make
    for name in made:
        sys.modules.pop(name, None)


@pytest.mark.parametrize(("first", "code"), [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_second_signal_during_an_import_is_held_with_the_first(
    importable: Callable[..., str], first: str, code: int
) -> None:
    name = importable(first, "SIGINT")
    with pytest.raises(KeyboardInterrupt):
        importlib.import_module(name)  # before: imported, the second kept inside, no stop
    module = sys.modules[name]
    assert module.finished and module.kept == []  # nothing was raised inside the import
    assert stopping.exit_code(0) == code  # the first signal's
    assert sys.getprofile() is None


def test_a_third_signal_ends_an_import_that_does_not_end(
    importable: Callable[..., str],
) -> None:
    name = importable("SIGTERM", "SIGINT", then=("SIGINT",), loop_s=120.0)
    with pytest.raises(KeyboardInterrupt):
        importlib.import_module(name)  # cut inside, at the third: not after the 120 s loop
    assert name not in sys.modules  # importlib takes the half-made module out
    assert stopping.exit_code(0) == 143


# A command that imports torch.distributed, signalled as T2's hook did: SIGTERM as the import
# starts, held; Ctrl-C from inside `torch._C._c10d_init()`, whose pybind11 code imports modules
# through `builtins.__import__` (here, where the second signal's handler ran).
SIGNALLED_IN_C10D = f"""
import atexit, builtins, linecache, os, signal, sys

sys.path.insert(0, {SOURCE!r})
from dlperf import stopping

sent = []
_import = builtins.__import__


class First:
    def find_spec(self, name, path, target=None):
        if name == "torch.distributed" and not sent:
            sent.append(signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
        return None


def second(name, *args, **kwargs):
    caller = sys._getframe(1)
    line = linecache.getline(caller.f_code.co_filename, caller.f_lineno)
    if len(sent) == 1 and "_c10d_init()" in line:  # called back from C++
        sent.append(signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
    return _import(name, *args, **kwargs)


def command():
    import torch.distributed

    print("trained", flush=True)
    return 0


builtins.__import__ = second
atexit.register(lambda: print(f"signals sent: {{len(sent)}}", file=sys.stderr, flush=True))
sys.meta_path.insert(0, First())
stopping.run(command, process=True)
"""


def test_sigterm_then_ctrl_c_inside_torch_distributed_start_up_exits_143(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SIGNALLED_IN_C10D],
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    # before: -6 (SIGABRT), "terminate called after throwing an instance of ..."
    assert done.returncode == 143, (done.returncode, done.stdout, done.stderr[-3000:])
    assert "signals sent: 2" in done.stderr  # both, where T2's hook sent them
    assert "trained" not in done.stdout  # stopped once the imports ended, nothing ran on
    assert "terminate called" not in done.stderr and "Traceback" not in done.stderr
