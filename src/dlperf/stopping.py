"""How a stop signal ends a dlperf command: Ctrl-C's SIGINT and a scheduler's SIGTERM (Slurm
or Kubernetes preempting a job) end it the same way wherever they land.

- The first stop signal raises KeyboardInterrupt in the main thread: every
  `Store.recording` marks its run `killed`, every `procs.Supervisor` stops its children, and
  `run` exits 128 + the signal (130 for SIGINT, 143 for SIGTERM, as a shell reports them).
- Inside a `shielded()` block (a store write, a run's creation, a child's start) the signal
  waits and is raised as the block ends, so no write is cut in half and no run or child is
  made without its owner knowing.
- Every later stop signal is only noted. The stop is under way, and its cleanup (runs marked,
  children stopped within their grace) must not be cut short: a KeyboardInterrupt raised
  while an `except` or `finally` clause ran would skip the rest of it, and one that escaped
  `main()` would make Python end the process *by* SIGINT (exit -2, no traceback) instead of
  with the command's exit code.

Only `run` (the command line's entry) installs the handlers: `import dlperf` in a notebook
leaves its signals alone.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import NoReturn

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass
class _State:
    received: int | None = None  # the first stop signal
    raised: bool = False  # its KeyboardInterrupt has been raised (there is only ever one)
    shields: int = 0  # shielded blocks open
    settled: bool = False  # the command's exit code is decided: signals are only noted


_state = _State()


def _stop() -> NoReturn:
    _state.raised = True
    raise KeyboardInterrupt


def _owed() -> bool:
    """A stop signal came, and its KeyboardInterrupt is still to be raised."""
    return _state.received is not None and not (_state.raised or _state.settled)


def _handler(signum: int, frame: FrameType | None) -> None:
    if _state.received is None:
        _state.received = signum
    if not (_state.raised or _state.shields or _state.settled):
        _stop()


def install() -> None:
    """Take SIGINT and SIGTERM as described above, from a fresh state (tests call `main()`
    more than once in one process). SIGINT too: a shell starts background jobs with it
    ignored, and Python keeps that."""
    global _state
    _state = _State()
    for sig in STOP_SIGNALS:
        signal.signal(sig, _handler)


def noted(signum: int) -> None:
    """A stop signal that other code took (the HTTP server drains its queue on one): the stop
    is under way, so later signals are only noted, and the exit code is 128 + `signum`."""
    if _state.received is None:
        _state.received = signum
    _state.raised = True


class shielded:  # lower case: used as `with shielded():`, like contextlib.suppress
    """A block a stop signal does not cut: one that lands inside waits for its end, and is
    raised there (chained to the block's own error, if it failed). Nests."""

    def __enter__(self) -> None:
        self.counted = threading.current_thread() is threading.main_thread()
        _state.shields += self.counted  # only the main thread is ever interrupted

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        _state.shields -= self.counted
        if self.counted and not _state.shields and _owed():
            _stop()


class unshielded:
    """The body of a shielded block that a stop signal may cut (a run's training inside the
    block that records it): the signal is raised at once, a pending one as the body begins."""

    def __enter__(self) -> None:
        self.saved: int | None = None
        if threading.current_thread() is not threading.main_thread():
            return
        self.saved, _state.shields = _state.shields, 0
        if _owed():
            _stop()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self.saved is not None:
            _state.shields = self.saved


def exit_code(code: int) -> int:
    """The process's exit code: 128 + the stop signal once one came, else `code`."""
    return code if _state.received is None else 128 + _state.received


def run(command: Callable[[], int], process: bool = False) -> NoReturn:
    """Install the handlers, run `command` (which returns its exit code, and may only raise
    the one KeyboardInterrupt) and exit with its code, or 128 + the stop signal. A signal that
    lands once the code is decided (the process is exiting) no longer changes it.

    With `process` (the process's own entry point, not a test calling it in-process), a
    stopped command leaves through `os._exit` once the exit handlers have run and the streams
    are flushed: CPython up to 3.13 marks a KeyboardInterrupt that escapes code run by `exec`
    or `eval` of a string (a dataclass's or namedtuple's methods being made, as lazy imports
    do) as unhandled even when a caller handles it, and then ends the process *by* SIGINT
    after its shutdown, whatever exit code it was given (python/cpython gh-128130)."""
    install()
    stopped = False
    try:
        code = command()
        _state.settled = True
    except KeyboardInterrupt:  # wherever the first stop signal landed, after the command's
        code, stopped = 130, True  # own handling too (exit_code makes it 128 + the signal)
    _state.settled = True
    code = exit_code(code)
    if process and (stopped or _state.received is not None):
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed pipe: nothing more to say
                stream.flush()
        os._exit(code)
    sys.exit(code)
