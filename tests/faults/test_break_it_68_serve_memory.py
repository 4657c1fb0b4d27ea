"""Break-it round 68, V3 cause 4 (seen once): `serve` under `ulimit -v 600000` printed only
"Exception ignored in sys.unraisablehook: <function _unraisable ...>" and "MemoryError".

Before: a thread whose start-up failed (its bootstrap raised MemoryError before it said it had
started) is reported by Python from that thread, which has already left threading's registry;
`stopping._unraisable` asked `threading.current_thread()` there, which makes a dummy Thread
(an object, its lock, its name): short of memory, that raised MemoryError inside the hook,
and the thread's own report was lost behind "Exception ignored in sys.unraisablehook".

And the wait that followed hung `serve` for good: `Thread.start()` waits for the new thread to
say it started, and one that died setting itself up never does (CPython's own wait).

Now the hook tells the main thread by its id, making next to nothing of its own: the report is
passed on as Python gives it. It also ends that wait (the thread marked stopped), and `serve`
finds the dead thread among its own before it says it serves: its one line, exit 1.
"""

from __future__ import annotations

import _thread
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from dlperf import stopping
from tests.conftest import CliResult
from tests.deploy.test_server import tiny_classifier


class _NoMemory:
    """threading's dummy Thread, as under a memory cap: nothing left to make one of."""

    def __init__(self) -> None:
        raise MemoryError


@pytest.fixture
def passed_on(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[BaseException | None]]:
    """The reports the hook passes on to Python's own (recorded, not printed)."""
    seen: list[BaseException | None] = []
    monkeypatch.setattr(stopping, "_next_hook", lambda report: seen.append(report.exc_value))
    yield seen


def test_the_report_of_a_thread_that_died_starting_is_passed_on_with_no_memory(
    passed_on: list[BaseException | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    failed = MemoryError()
    # What Python hands the hook (its type, sys.UnraisableHookArgs, cannot be made here)
    report = SimpleNamespace(
        exc_type=MemoryError, exc_value=failed, exc_traceback=None,
        err_msg="Exception ignored in thread started by", object=None,
    )  # fmt: skip
    monkeypatch.setattr(threading, "_DummyThread", _NoMemory)
    raised: list[BaseException] = []
    done = threading.Event()

    def dying() -> None:  # a thread threading does not know, as a bootstrap's once it failed
        try:
            stopping._unraisable(report)
        except BaseException as e:  # what escaped the hook is the finding
            raised.append(e)
        finally:
            done.set()

    _thread.start_new_thread(dying, ())
    assert done.wait(10)
    assert raised == []  # before: [MemoryError()], the thread's report lost
    assert passed_on == [failed]


@pytest.mark.timeout(60)  # before: serve hung in its decoder's Thread.start() until this
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the thread's
@pytest.mark.parametrize("thread", ["decode", "inference", "serve-log"])
def test_a_server_thread_that_dies_starting_is_the_servers_one_line(
    cli: Callable[..., CliResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, thread: str
) -> None:
    """Each of the server's own threads: the decoders', the batcher's and the log writer's."""
    model = tiny_classifier(tmp_path / "tiny.onnx")
    real = threading.Thread._set_tstate_lock  # type: ignore[attr-defined]

    def short_of_memory(self: threading.Thread) -> None:
        if self.name.startswith(thread):  # as its start-up's allocation failed under a cap
            raise MemoryError
        real(self)

    monkeypatch.setattr(threading.Thread, "_set_tstate_lock", short_of_memory)
    done = cli("serve", str(model), "--port", "0", "--threads", "1")
    assert (done.code, done.err) == (
        1,
        "error: the server could not start its threads (one ran out of memory: the host is "
        "short of memory)\n",
    )
