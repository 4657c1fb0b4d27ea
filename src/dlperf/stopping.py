"""How a stop signal ends a dlperf command: Ctrl-C's SIGINT, a scheduler's SIGTERM (Slurm
or Kubernetes preempting a job) and SIGHUP (its terminal or ssh session closed) end it the
same way wherever they land.

- A stop signal raises KeyboardInterrupt in the main thread: every `Store.recording` marks
  its run `killed`, every `procs.Supervisor` stops its children, and `run` exits 128 + the
  first signal (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP, as a shell reports them).
- A soft CPU-time limit's SIGXCPU (`ulimit -S -t`, `prlimit --cpu=SOFT:HARD`) stops the
  command the same way, exit 152, with one line naming the limit (`cause`): the seconds left
  to the hard limit's SIGKILL are its cleanup's, and the kernel's repeats of SIGXCPU in them
  are ignored. (`ulimit -t N` sets both limits: SIGKILL comes at once, nothing can be said.)
- A timer's signal (SIGALRM, SIGVTALRM, SIGPROF: `signal.alarm`, `setitimer`) at its default
  action stops the command the same way, exit 128 + it, with one line naming the signal: dlperf
  arms no timer, so the model's code did (a timeout guard in its forward, a thread its file
  started), or a process sent it (`timeout -s ALRM`): a handler cannot tell which, so the line
  names both, with the fix of each. By default it ended the process with no word ("Alarm
  clock"), the run `lost`.
  The timer is cancelled as it goes off, so that an interval timer does not repeat in the
  stop's cleanup; a handler of the caller's (pytest-timeout's SIGALRM) is left as it is.
- SIGHUP ignored when dlperf starts stays ignored: `nohup` sets that, and its user asked for
  the command to outlive the terminal; so does an ignored SIGXCPU. SIGQUIT and SIGUSR1
  keep their default actions (a core dump is what SIGQUIT asks for).
- Inside a `shielded()` block (a store write, a run's creation and its marking, a child's
  start, a stop's cleanup) a signal waits and is raised as the block ends, so no write is cut
  in half, no run or child is made without its owner knowing, and a second Ctrl-C does not
  cut the first one's cleanup short. Outside them every signal raises, so that a stop that a
  library swallowed (a bare `except:` around an import) is not lost. A `stoppable()` line
  inside one (an epoch's line, after its rows and checkpoint) is cut by a signal at once: a
  stderr nobody reads must not hold the stop off.
- A `spared()` block (what a stopped command says last: `run`'s resume hint, read from the
  store; a --json document's write, `console.print_json`) holds one signal as a shielded one
  does, but a user who insists gets out: the next signal raises at once, so that a store that
  does not answer, or a reader that never reads the document's pipe, holds no Ctrl-C off for
  good. So a first signal during a document's write gives the whole document, then 128 + it;
  a second cuts the document where its write was (the resume hint, read after a first signal
  already stopped `run`, waits for a second and gives way to a third).
- A signal that lands while modules are imported (`import torch` takes seconds) is raised
  once they are, at the next call: raised inside, C code could clear it and go on, as torch's
  start-up does for a failed import of NumPy, or abort the process, as pybind11 does for one
  raised in a callback into Python (`torch._C._c10d_init`). A second signal in them is only
  marked (exit 128 + the first, as for one); a third raises at once, so an import that never
  ends (a model file's loop at import time) holds no stop off for good.
- An interrupt raised where Python cannot raise it (a finaliser, a weakref callback: Python
  prints it and goes on) is neither printed nor lost: it is raised again at the next call.
  Any other error a finaliser raises once a stop has come (a DataLoader's teardown) is the
  stop's consequence, and is not printed either. A thread that died setting itself up (a
  MemoryError under `ulimit -v`) is reported there too: its `Thread.start()`, which waited
  for it for ever, returns, the thread not alive.
- A command that settles its outcome before it ends (`run` once its run is stored finished,
  `runs export` once the export is in place) ignores a stop signal from then on: its exit
  code is the outcome's. A second one ends what is left (the output), exit 128 + the first,
  so that a reader that never reads the output's pipe does not hold the command for good.
- Once the exit code is decided, signals are ignored: Python's shutdown puts the default
  actions back, under which a late signal would end the process *by* it (exit -15 or -2).
  So a command does not wait for non-daemon threads still running when it ends (a user's
  model may start one that never ends): it names them in a warning and leaves as a stopped
  command does, with its own exit code.

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
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from types import FrameType, MethodType, TracebackType
from typing import NoReturn

# getattr: a platform without SIGHUP or SIGXCPU (Windows) has the other two.
_SIGHUP: int | None = getattr(signal, "SIGHUP", None)
# A soft CPU-time limit's (`ulimit -S -t`, `prlimit --cpu=SOFT:HARD`): by default it dumped
# core with no word, and a run it cut was left `running`. The kernel sends it again every CPU
# second until the hard limit's SIGKILL: those seconds are the stop's to clean up in.
_SIGXCPU: int | None = getattr(signal, "SIGXCPU", None)
STOP_SIGNALS: tuple[int, ...] = (
    signal.SIGINT,
    signal.SIGTERM,
    *([] if _SIGHUP is None else [_SIGHUP]),
    *([] if _SIGXCPU is None else [_SIGXCPU]),
)

# The interval timers' signals (`signal.alarm`, `setitimer`), each with its timer's name in
# `signal` (the one table: the registry's view of the timers a model file arms is this one).
# dlperf arms none, and by default each signal ends the process.
TIMER_SIGNALS: dict[int, str] = (
    {
        signal.SIGALRM: "ITIMER_REAL",
        signal.SIGVTALRM: "ITIMER_VIRTUAL",
        signal.SIGPROF: "ITIMER_PROF",
    }
    if hasattr(signal, "setitimer")
    else {}
)


def timer_of(signum: int) -> int:
    """The interval timer (`signal.ITIMER_REAL`, ...) that sends `signum`, a TIMER_SIGNALS key."""
    which: int = getattr(signal, TIMER_SIGNALS[signum])
    return which


@dataclass
class _State:
    received: int | None = None  # the first stop signal
    pending: bool = False  # a signal came inside a shielded block: raised at its end
    shields: int = 0  # shielded blocks open (in the main thread, the one signals interrupt)
    spared: bool = False  # the outermost shielded block open is a `spared` one
    settled: bool = False  # the exit code is decided: signals no longer count
    commanding: bool = False  # `run`'s command is running: an insisting stop may end it
    late: int | None = None  # the first stop signal after the command settled its outcome
    held: int = 0  # stop signals that modules being imported hold (a third is not held)
    cpu_s: float | None = None  # the CPU time used when a CPU-time limit's SIGXCPU came


_state = _State()


def _stop() -> NoReturn:
    _state.pending = False
    raise KeyboardInterrupt


def _handler(signum: int, frame: FrameType | None) -> None:
    if _state.settled:
        _late(signum)
        return
    if signum in TIMER_SIGNALS:  # once: an interval timer would go off again in the cleanup
        signal.setitimer(timer_of(signum), 0.0)
    if (signum == _SIGXCPU or signum in TIMER_SIGNALS) and _state.received is not None:
        # The kernel's repeat, each CPU second past the soft limit (or a timer going off), not
        # a user insisting as a second Ctrl-C does: it must not cut the first stop's cleanup.
        return
    if _state.received is None:
        _received(signum)
        _children_quiet()
    if _state.shields:
        if _state.pending and _state.spared and _state.shields == 1:
            _stop()  # a signal more, where a `spared` block held one: its user insists
        _state.pending = True
    elif _state.held == 1 and _imports_running():
        # A second signal while imports hold the first: marked (raised as they end), not raised
        _state.held, _state.pending = 2, True
    elif _state.pending or _state.held:  # a third there, or a signal more after the imports
        _stop()
    elif importing := _imports_running():
        _hold_until_imported(importing)
    else:
        _stop()


def _imports_running() -> list[ModuleSpec]:
    """The specs of the modules whose code runs now, being imported (importlib marks each
    `_initializing` until its code has run). Read from the modules' own dicts: a lazy
    module's `__getattr__` must not run in a signal handler."""
    running = []
    for module in list(sys.modules.values()):
        try:
            spec = vars(module).get("__spec__")
        except TypeError:  # not a module (an object put in sys.modules): nothing to read
            continue
        if spec is not None and getattr(spec, "_initializing", False) is True:
            running.append(spec)
    return running


def _hold_until_imported(importing: list[ModuleSpec]) -> None:
    """A stop signal that lands while modules are imported is raised once they are, at the
    next call: raised inside, an extension's C code could clear it and go on. torch's does,
    for its import of NumPy (`from torch._C import *`): `dlperf run` signalled then trained
    to its end and exited 0 (1 try in 15 with the signal 2 s after the start). A second
    signal is only marked (`_handler`): raised inside, it met the same C code, or pybind11's
    in `torch._C._c10d_init`, which cannot pass an exception on and aborted the process
    (SIGTERM then Ctrl-C as torch started: exit 134 and a C++ stack, or the command ran to
    its end, exit 0). A third raises at once, so an import that never ends holds no stop
    off. Under a profiler of the caller's (cProfile) the stop waits for the next shielded
    block's end."""
    _state.pending, _state.held = True, 1
    if sys.getprofile() is not None:
        return

    def imported(frame: FrameType, event: str, arg: object) -> None:
        if any(getattr(spec, "_initializing", False) is True for spec in importing):
            return
        sys.setprofile(None)
        _state.held = 0
        if _state.pending and not _state.shields and not _state.settled:
            _stop()

    sys.setprofile(imported)


def _late(signum: int) -> None:
    """A stop signal once the command settled its outcome (`settle`) does not count, but a
    second one means its user insists: it ends what is left of the command, as a `spared`
    block gives way to a second signal. What is left is output (`run`'s result, `runs
    export`'s table), which a reader that never reads its pipe held for ever: every signal
    but SIGKILL was ignored. Not inside a shielded write, nor once `run`'s command returned
    (the exit code is decided), nor for a timer's or the CPU limit's repeats."""
    if not _state.commanding or signum == _SIGXCPU or signum in TIMER_SIGNALS:
        return
    if _state.late is None:
        _state.late = signum
    elif not _state.shields or _state.spared:
        _state.received = _state.late  # exit 128 + the first of them
        _stop()


def _children_quiet() -> None:
    """Once a stop has come, a child's end is the stop's doing (the group's signal reached it
    too): a Python SIGCHLD handler is put off. torch's DataLoader handler, between two epochs'
    iterators or in one the stop cut as it was made, raised for workers dying of a group's
    SIGTERM while the stopped run was being marked: the mark was cut, and the run, stored as
    running, read `lost` (1 run in 6)."""
    sigchld = getattr(signal, "SIGCHLD", None)
    if sigchld is not None and callable(signal.getsignal(sigchld)):
        signal.signal(sigchld, signal.SIG_DFL)


_next_hook = sys.unraisablehook


def _unraisable(report: sys.UnraisableHookArgs) -> None:
    """Python's report of an error it cannot raise (one in a finaliser or a weakref callback,
    as importlib's module locks and SQLAlchemy's `_collection_gced` have), but not of a stop
    signal's interrupt landing there: Python printed "Exception ignored in ..." with its
    traceback and went on, and the stop was lost (`runs export` worked on after Ctrl-C). The
    stop is delivered again instead, at the next function call (`_redeliver`).

    Any other error a finaliser raises once a stop has come is the stop's consequence, as
    `errors.interrupted` takes errors raised since: a DataLoader iterator's, whose workers
    died of the group's signal or whose `__init__` the stop cut ("Exception ignored in
    _MultiProcessingDataLoaderIter.__del__" and torch's traceback after the stop's line). It
    is dropped; with no stop requested, every report is passed on as before.

    It makes next to nothing of its own (the thread's id): a thread whose start-up failed (a
    MemoryError under `ulimit -v`) is reported from that thread, unregistered by then, where
    `threading.current_thread()` made a dummy Thread, and its MemoryError replaced the report
    with "Exception ignored in sys.unraisablehook: <function _unraisable ...>"."""
    _started_dead(report.object)
    main = threading.get_ident() == threading.main_thread().ident  # where signals raise
    if not isinstance(report.exc_value, KeyboardInterrupt):
        if not requested():
            _next_hook(report)
    elif not (main and requested()):
        _next_hook(report)
    elif sys.getprofile() in (None, _redeliver):
        # Not by tripping the signal again: Python runs its handler at its next check, right
        # after the call that trips it, inside this hook, which cannot raise either. A profile
        # function is called at the next call, once this hook and the finaliser have returned.
        sys.setprofile(_redeliver)
    else:  # a profiler's (cProfile's) own: the stop waits for the next shielded block's end
        _state.pending = True


def _started_dead(started: object) -> None:
    """A thread whose start-up failed before it said it had started (its bootstrap's lock or
    registration, a MemoryError under `ulimit -v`) is reported from that thread as it ends,
    `started` its bootstrap; `Thread.start()` in its starter waited for that word for ever
    (CPython's own wait), and `serve` hung with no line. The word is given, the thread marked
    stopped: `start()` returns, and the thread reads as not alive, which its starter can see."""
    # A plain type check first: the reported object's own attributes may run its code.
    if not isinstance(started, MethodType):
        return
    thread = started.__self__
    if not isinstance(thread, threading.Thread) or hasattr(thread, "_handle"):
        return  # not a thread's bootstrap, or Python 3.13's threads (their own wait)
    bootstrap = getattr(threading.Thread, "_bootstrap")  # noqa: B009 - private, untyped
    said: threading.Event = getattr(thread, "_started")  # noqa: B009
    if started.__func__ is bootstrap and not said.is_set():
        setattr(thread, "_is_stopped", True)  # noqa: B010 - is_alive() reads it first
        said.set()


def _redeliver(frame: FrameType, event: str, arg: object) -> None:
    """The stop signal's handler again, at the next call (`_unraisable`). If that is another
    finaliser's, its interrupt comes back to `_unraisable`: each round is a call further on."""
    if event not in ("call", "c_call"):  # `_unraisable`'s own return, frames unwinding
        return
    sys.setprofile(None)
    if _state.received is not None:
        _handler(_state.received, frame)


def _forked() -> None:
    """A forked child (a DataLoader worker) is not this command: its stop signals take their
    default action (SIGTERM ends it), not this module's handler. A worker that its parent's
    shutdown sent SIGTERM before its own start-up ran raised KeyboardInterrupt in
    multiprocessing's bootstrap, which printed "Process Process-1: Traceback ..."."""
    for sig in (*STOP_SIGNALS, *TIMER_SIGNALS):
        if signal.getsignal(sig) == _handler:
            signal.signal(sig, signal.SIG_DFL)


os.register_at_fork(after_in_child=_forked)  # does nothing where install() never ran


def install() -> None:
    """Take the stop signals as described above, from a fresh state (tests call `main()`
    more than once in one process). SIGINT even when ignored: a shell starts background jobs
    with it ignored, and Python keeps that; SIGHUP not when ignored (nohup)."""
    global _state, _next_hook
    _state = _State()
    for sig in taken():
        signal.signal(sig, _handler)
    for sig in TIMER_SIGNALS:
        if signal.getsignal(sig) == signal.SIG_DFL:  # not a caller's own handler
            signal.signal(sig, _handler)
    if sys.unraisablehook is not _unraisable:
        _next_hook, sys.unraisablehook = sys.unraisablehook, _unraisable


def taken() -> list[int]:
    """The stop signals this process acts on: all but a SIGHUP ignored (under nohup) and a
    SIGXCPU ignored (its user asked to run on, to the hard CPU-time limit)."""
    kept = (_SIGHUP, _SIGXCPU)
    return [s for s in STOP_SIGNALS if s not in kept or signal.getsignal(s) != signal.SIG_IGN]


def requested() -> bool:
    """Whether a stop signal has come: an error raised since is taken as its consequence (an
    interrupt that landed inside an extension module's import leaves later imports failing,
    with nothing to chain them to it)."""
    return _state.received is not None


def _received(signum: int, cpu_s: float | None = None) -> None:
    """The first stop signal, and the CPU time used when it is a CPU-time limit's SIGXCPU
    (not the soft limit read later: the kernel raises it a second each time it sends one):
    this process's, or `cpu_s`, that of the process whose limit ran out."""
    _state.received = signum
    if signum == _SIGXCPU:
        _state.cpu_s = time.process_time() if cpu_s is None else cpu_s


def noted(signum: int, cpu_s: float | None = None) -> None:
    """A stop signal that other code took (the HTTP server drains its queue on one): the exit
    code is 128 + `signum`. (Round 52: a server stopped by its CPU-time limit said "after 0 s
    of CPU": only the handler here recorded the CPU time.) `cpu_s`: for a CPU-time limit that
    another process ran out of (a scale worker), the CPU seconds it used, which the line
    says, where dlperf itself waited idle."""
    if _state.received is None:
        _received(signum, cpu_s)


class shielded:  # lower case: used as `with shielded():`, like contextlib.suppress
    """A block a stop signal does not cut: one that lands inside waits for the outermost
    block's end and is raised there, unless an interrupt already propagates (chained to the
    block's own error, if it failed otherwise). Nests."""

    def __enter__(self) -> None:
        self.counted = threading.current_thread() is threading.main_thread()
        _state.shields += self.counted

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        _state.shields -= self.counted
        if not (self.counted and _state.pending) or _state.shields or _state.settled:
            return
        if isinstance(error, KeyboardInterrupt):
            _state.pending = False  # the stop is already under way
            return
        _stop()


class spared(shielded):
    """A stopped command's last words (`run`'s hint how to resume the run it stopped: store
    reads and a line), which one more stop signal does not cut, but which must not hold off a
    user who presses Ctrl-C again and again while the store does not answer: the first signal
    that lands inside waits for the block's end, as in a shielded block; the next raises at
    once. Only as the outermost block: inside another shielded block it is one (that block
    must not be cut), and a shielded block inside it holds every signal as ever."""

    def __enter__(self) -> None:
        super().__enter__()
        self.outermost = self.counted and _state.shields == 1
        if self.outermost:
            _state.spared = True

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self.outermost:
            _state.spared = False
        super().__exit__(kind, error, trace)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """`shielded`, also where `install()` has not taken the signals (the Python API in a
    notebook or a script): a Ctrl-C in the main thread waits for the block's end, then reaches
    the handler that was there (Python's KeyboardInterrupt) as if it came then. For a block
    that must not be cut, such as a first import of a module that registers operators with
    torch: one cut halfway left torch half-imported for the rest of the process."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main else None
    if previous is None or previous is _handler:  # another thread, a C handler, or ours
        with shielded():
            yield
        return
    came: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: came.append(signum))
    try:
        yield
    except KeyboardInterrupt:  # the stop is already under way (the block's own)
        came.clear()
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
        if came:  # to `previous`, whose interrupt is raised at the next bytecode
            signal.raise_signal(signal.SIGINT)


class unshielded:
    """The body of a shielded block that a stop signal may cut (a run's training inside the
    block that records it): a signal raises at once, one that waited as the body begins."""

    def __enter__(self) -> None:
        self.saved: int | None = None
        self.spared = False
        if threading.current_thread() is not threading.main_thread():
            return
        self.saved, _state.shields = _state.shields, 0
        self.spared, _state.spared = _state.spared, False  # a block inside is not the spared one
        if _state.pending and not _state.settled:
            # Not entered, so not left: the count is the caller's again. Left at 0, the
            # enclosing block's end took it to -1: a later signal outside any shielded block
            # waited, one inside a block (its count 0 again) cut it.
            self.__exit__()
            _stop()

    def __exit__(self, *exc: object) -> None:
        if self.saved is not None:
            _state.shields = self.saved
            _state.spared = self.spared


class stoppable:
    """A line of output inside a shielded block (an epoch's `epoch E/N` line, once its rows and
    checkpoint are stored): a stop signal that lands while it is written raises at once, as
    outside the block, so a reader that never reads (stderr a full pipe nobody drains) holds
    no stop off: every signal but SIGKILL waited on the write, and the run was left `lost`. A
    signal that waited in the block before is still raised at the block's end, once the line
    is said. A progress line is output, not a store write: it may be cut."""

    def __enter__(self) -> None:
        self.saved: int | None = None
        if threading.current_thread() is not threading.main_thread():
            return
        self.saved, _state.shields = _state.shields, 0
        self.spared, _state.spared = _state.spared, False
        self.pending, _state.pending = _state.pending, False  # kept for the block's end

    def __exit__(self, *exc: object) -> None:
        if self.saved is not None:
            _state.shields, _state.spared = self.saved, self.spared
            _state.pending = _state.pending or self.pending


def settle() -> None:
    """The command's outcome is decided before it has returned (`dlperf run` once its run is
    stored finished): a stop signal from here on is ignored, as once a command has returned,
    and so is one that came while the outcome was being stored (it waited in the shielded
    write, or landed as the result was handed back), so that the exit code is the outcome's,
    not 128 + a signal for a run the store keeps finished."""
    _state.settled = True
    _state.pending = False
    _state.received = None


def settled() -> bool:
    """Whether the command has settled its outcome (`settle`): a stop now ends only its output
    (a study's stop line, "continue it ...", is not to be said of a study that is whole)."""
    return _state.settled


def exit_code(code: int) -> int:
    """The process's exit code: 128 + the first stop signal once one came, else `code`."""
    return code if _state.received is None else 128 + _state.received


def cause() -> str | None:
    """The line that says why the command stopped, where the signal's sender said nothing
    itself: a CPU-time limit's SIGXCPU, a timer's signal (a user's Ctrl-C, a scheduler's
    SIGTERM, a closed terminal's SIGHUP need no word). None otherwise."""
    if _state.received in TIMER_SIGNALS:
        name = signal.Signals(_state.received).name
        timer = TIMER_SIGNALS[_state.received]
        short = name.removeprefix("SIG")
        # A handler is told the signal, not who sent it: a timer's and `kill`'s read the same
        return (
            f"error: a {name} came (exit {128 + _state.received}): a timer the model's code "
            "armed (signal.alarm or setitimer: a timeout guard in its forward, a thread its "
            f"file started; dlperf arms none) or a process that sent it (timeout -s {short}, "
            f"kill -{short}); by default it ends the process. A timer's: cancel it once done "
            f"(signal.setitimer(signal.{timer}, 0)) or give {name} a handler; a sender's: stop "
            "dlperf with SIGTERM or SIGINT (timeout's default, Ctrl-C)"
        )
    if _SIGXCPU is None or _state.received != _SIGXCPU:
        return None
    import resource  # POSIX's, as SIGXCPU is

    code = 128 + _SIGXCPU
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if soft == resource.RLIM_INFINITY:  # sent by hand (kill -XCPU), not by a limit
        return f"error: stopped by SIGXCPU, a CPU-time limit's signal (ulimit -t), exit {code}"
    ends = "" if hard == resource.RLIM_INFINITY else f"; its hard limit, {hard} s, kills it"
    used = _state.cpu_s or 0.0
    return (
        f"error: the CPU-time limit (ulimit -t) stopped the command after {used:.0f} s of CPU "
        f"(SIGXCPU, exit {code}{ends}): raise it, or give the command less to do"
    )


def stopped_by() -> str:
    """What a run a stop ended stores as its error: "interrupted", or the CPU-time limit's
    line where its SIGXCPU stopped it (the run's record then says why)."""
    line = cause()
    return "interrupted" if line is None else line.removeprefix("error: ")


def _kill_pool_workers() -> None:
    """SIGKILL the multiprocessing children left (a stopped command wants nothing of theirs):
    multiprocessing's exit handler joins each, and one that waits for work that never comes
    would hold the exit for ever."""
    multiprocessing = sys.modules.get("multiprocessing")
    if multiprocessing is not None:
        for child in multiprocessing.active_children():
            child.kill()


def _stray_threads() -> list[str]:
    """The names of the non-daemon threads still running that Python's shutdown would wait for
    without end: all but the main thread and the workers of `concurrent.futures` executors,
    which its shutdown tells to finish before it waits (their registries are private, hence
    getattr)."""
    owned: set[threading.Thread] = set()
    for module, registry in (("thread", "_threads_queues"), ("process", "_threads_wakeups")):
        loaded = sys.modules.get(f"concurrent.futures.{module}")
        owned.update(getattr(loaded, registry, {}).keys())
    return [
        t.name
        for t in threading.enumerate()
        if t is not threading.main_thread() and not t.daemon and t not in owned
    ]


def run(
    command: Callable[[], int], process: bool = False, warn: Callable[[str], None] | None = None
) -> NoReturn:
    """Install the handlers, run `command` (which returns its exit code and raises nothing
    but KeyboardInterrupt) and exit with its code, or 128 + the first stop signal.

    With `process` (the process's own entry point, not a test calling it in-process), the
    stop signals are ignored from then on (see above), and a stopped command leaves through
    `os._exit` once the exit handlers have run and the streams are flushed: CPython up to
    3.13 marks a KeyboardInterrupt that escapes code run by `exec` or `eval` of a string (a
    dataclass's or namedtuple's methods being made, as lazy imports do) as unhandled even
    when a caller handles it, and then ends the process *by* SIGINT after its shutdown,
    whatever exit code it was given (python/cpython gh-128130). So does a command that leaves
    non-daemon threads running (`_stray_threads`), which that shutdown would wait for; `warn`
    (the command line's stderr) names them."""
    install()
    stopped = False
    try:
        try:
            _state.commanding = True
            code = command()
        finally:
            _state.commanding = False
            _state.settled = True
    except KeyboardInterrupt:  # wherever the signal landed, after the command's own handling
        _state.settled = True  # again: the signal may have landed in `finally`, before it
        code, stopped = 130, True  # exit_code makes it 128 + the signal
    code = exit_code(code)
    if not process:
        sys.exit(code)
    for sig in (*STOP_SIGNALS, *TIMER_SIGNALS):
        signal.signal(sig, signal.SIG_IGN)  # Python's shutdown leaves an ignored signal be
    stopped = stopped or _state.received is not None
    line = cause()
    if line is not None and warn is not None:
        with contextlib.suppress(Exception):  # a closed pipe: nothing more to say
            warn(line)
    # Python's shutdown would wait for these with every stop signal ignored: a model's thread
    # that never ends kept a finished run's process alive until SIGKILL.
    stray = [] if stopped else _stray_threads()
    if stray and warn is not None:
        with contextlib.suppress(Exception):  # a closed pipe: nothing more to say
            warn(
                f"warning: not waiting for threads still running: {', '.join(stray)} (a thread "
                "that must not hold the exit is started with daemon=True)"
            )
    if stopped or stray:
        if stopped:
            _kill_pool_workers()
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed pipe: nothing more to say
                stream.flush()
        os._exit(code)
    sys.exit(code)
