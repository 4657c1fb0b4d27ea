"""Processes by pid, from /proc where there is one: whether one still runs, and what
identifies one across machines, pid reuse and reboots; and the one supervisor of the
processes dlperf starts (torchrun, horovodrun, TensorFlow and sweep workers). Standard
library only: the launchers, their guard and the store's readers all use it.

Every child runs through `guard` (it dies with dlperf, even a SIGKILLed one) in a session of
its own, so that a terminal's Ctrl-C reaches dlperf alone and dlperf decides how to stop:
SIGTERM to each child, which shuts down its own children as it would anyway (a sweep worker
marks its run killed; signalled at once, a DataLoader worker's death would fail the run
first), then, after a grace, SIGKILL to each child's whole process group. Pids outside the
groups that the caller names (torchrun's workers, in sessions of their own) get both."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from dlperf import stopping

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
PARENT_ENV = "DLPERF_PARENT_PID"  # set by whoever starts a guarded command: its own pid
SAFEPATH_WAS = "DLPERF_PYTHONSAFEPATH_WAS"  # the user's PYTHONSAFEPATH ("": unset)
STOP_GRACE_S = 2.0  # after SIGTERM, before SIGKILL
REAP_S = 5.0  # after SIGKILL, for the kernel to tear the processes down
POLL_S = 0.05


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks after boot) of a process, from /proc (Linux)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # the name in parentheses may hold spaces
    try:
        return fields[0], int(fields[19])  # fields 3 and 22 of proc(5)
    except (IndexError, ValueError):
        return None


def stopped(pid: int) -> bool:
    """Whether `pid` is stopped: state T (SIGSTOP, kill -STOP, Ctrl-Z) or t (a tracer's stop,
    a debugger's). False when it is gone or there is no /proc (off Linux)."""
    stat = proc_stat(pid)
    return stat is not None and stat[0] in ("T", "t")


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie counts as gone: it runs nothing)."""
    if pid < 1:  # to kill(2), 0 and below name process groups, never one process
        return False
    stat = proc_stat(pid)
    if stat is not None:
        return stat[0] not in ("Z", "X")
    try:  # no /proc (macOS), or it ended just now
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # OverflowError: past any pid (edited by hand)
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def die_with_parent() -> None:
    """Have Linux SIGKILL this process when its parent exits (strictly: the parent's thread
    that forked it); a no-op on other systems."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


PROCESS_KEYS = frozenset({"host", "pid", "start", "boot_id"})  # what `this_process` records


def this_process() -> dict[str, Any]:
    """What identifies the running process across machines, pid reuse and reboots."""
    pid = os.getpid()
    stat = proc_stat(pid)
    return {
        "host": socket.gethostname(),
        "pid": pid,
        "start": stat[1] if stat else None,
        "boot_id": _boot_id(),
    }


def process_alive(process: dict[str, Any]) -> bool | None:
    """Whether the process `this_process()` described is still running: None when this
    machine cannot tell (another host, nothing recorded). A pid now held by another process
    (another start time) or a zombie counts as gone, as does any pid after a reboot."""
    pid = process.get("pid")
    if process.get("host") != socket.gethostname() or type(pid) is not int or pid < 1:
        return None  # type(): a JSON `true` read back is a bool, an int to isinstance
    boot = _boot_id()
    if process.get("boot_id") and boot and process["boot_id"] != boot:
        return False
    if not alive(pid):
        return False
    stat = proc_stat(pid)  # None: no /proc, or it ended just now (it was alive a moment ago)
    if stat is None:
        return True
    # A record with no start time where /proc gives one (this_process() records it here) was
    # not written on this host: edited by hand, its pid may be any process's (init's)
    return None if process.get("start") is None else stat[1] == process["start"]


def restore_safepath() -> None:
    """In a worker, whose own sys.path PYTHONSAFEPATH kept safe as it started: what it starts
    in turn (a user's model running `python tools/script.py`, which imports a module beside
    it) gets the user's own setting back, as under `dlperf run`."""
    was = os.environ.pop(SAFEPATH_WAS, None)
    if was is None:  # not started by the Supervisor
        return
    if was:
        os.environ["PYTHONSAFEPATH"] = was
    else:
        os.environ.pop("PYTHONSAFEPATH", None)


def guard() -> None:
    """`python -c GUARD PROGRAM ARGS...`: become PROGRAM, bound to die with the parent whose
    pid is in $DLPERF_PARENT_PID, and put our own pid there for PROGRAM's children.

    The death signal survives exec; setting it in a fresh interpreter between fork and exec
    avoids subprocess's preexec_fn, which is unsafe in a process with threads."""
    die_with_parent()
    if os.getppid() != int(os.environ[PARENT_ENV]):
        # The parent died before prctl took effect, so no signal will come: nobody wants us.
        sys.exit(1)
    os.environ[PARENT_ENV] = str(os.getpid())
    os.execv(sys.argv[1], sys.argv[1:])


def guarded(command: Sequence[str]) -> list[str]:
    """`command` run through `guard`."""
    return [sys.executable, "-c", "from dlperf.procs import guard; guard()", *command]


def how(returncode: int) -> str:
    """How a process ended, from Popen's returncode (negative: the signal that killed it)."""
    if returncode >= 0:
        return f"exit code {returncode}"
    try:
        return f"killed by {signal.Signals(-returncode).name}"
    except ValueError:  # a signal without a name, e.g. a real-time one
        return f"killed by signal {-returncode}"


# What a worker ended by these signals most likely met (a code of -24 said nothing), and the
# fix where there is one: the soft CPU-time limit's SIGXCPU, which a worker catches (exit
# 152) or, ignoring it, is killed by at its hard limit's SIGKILL
KILLED_BY = {
    "SIGXCPU": "the CPU-time limit, ulimit -t: raise it, or give each worker less to do",
    "SIGKILL": "out of memory? dmesg says",
}


def stop_codes() -> dict[int, str]:
    """The exit codes of a worker that caught a stop signal (`stopping`: 128 + the signal, as
    a shell reports it), with the signal's name."""
    return {128 + int(sig): signal.Signals(sig).name for sig in stopping.STOP_SIGNALS}


def ended_how(returncode: int) -> str:
    """How a worker (a sweep's, a report's drawing one) ended, from Popen's returncode: its
    exit code, or the signal that ended it by name, with what it most likely means: one that
    killed it (negative codes) or a stop signal it caught (a SIGTERM sent to one worker read
    "ended with code 143"; its CPU-time limit's SIGXCPU, "stopped by SIGXCPU (exit code
    152)", named neither the limit nor its fix)."""
    stopped = stop_codes()
    if returncode in stopped:
        name = stopped[returncode]
        why = KILLED_BY.get(name)
        return f"stopped by {name} ({f'{why}; ' if why else ''}exit code {returncode})"
    if returncode >= 0:
        return f"ended with code {returncode}"
    said = how(returncode)  # "killed by SIGXCPU"
    why = KILLED_BY.get(said.rpartition(" ")[2])
    return f"{said} ({why})" if why else said


CGROUPS = Path("/sys/fs/cgroup")


def _pids_cgroup() -> Path | None:
    """This process's pids cgroup directory: cgroup v1's pids hierarchy, else v2's unified
    one; None where /proc says neither (off Linux)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    found: dict[str, str] = {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        found.setdefault("pids" if "pids" in controllers.split(",") else controllers, path)
    if "pids" in found:
        return CGROUPS / "pids" / found["pids"].lstrip("/")
    return CGROUPS / found[""].lstrip("/") if "" in found else None


def refused_forks() -> int:
    """How many forks and clones a cgroup's pids.max has refused in this process's cgroup and
    those above it (their pids.events' "max"): a count that grows while a launch runs says
    that its processes met the limit, where their own words (a C++ abort) do not. 0 where no
    pids controller is seen."""
    directory, refused = _pids_cgroup(), 0
    while directory is not None and directory.is_relative_to(CGROUPS):
        with contextlib.suppress(OSError, ValueError):
            for line in (directory / "pids.events").read_text().splitlines():
                key, _, value = line.partition(" ")
                refused += int(value) if key == "max" else 0
        directory = directory.parent if directory != directory.parent else None
    return refused


def kill(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


class Supervisor:
    """The children of one job. As a context manager, it stops them all when the block
    raises: Ctrl-C and SIGTERM (a KeyboardInterrupt), a timeout, or any error."""

    def __init__(self, outside: Callable[[], Iterable[int]] = tuple) -> None:
        self.children: list[subprocess.Popen[bytes]] = []
        # Pids outside the children's groups, read again at every signal: one started since
        # has written its pid by then.
        self.outside = outside

    def start(
        self,
        command: Sequence[str],
        log: Path,
        env: Mapping[str, str] | None = None,
        name: str = "a child process",
        also: str = "",
    ) -> subprocess.Popen[bytes]:
        """Start the guarded `command` in a session of its own, its output in `log`. A fork
        refused by the limit on processes and threads (EAGAIN: a cgroup's pids.max, ulimit -u)
        is errors.NoThreads, one line naming `name` and the limit (`also`: another way out)."""
        # PYTHONSAFEPATH: `python -c` and `-m` (the guard, sweep's and torchrun's workers, and
        # what those start) put the working directory first on sys.path, where dlperf's own
        # process does not: a user's random.py or typing.py there broke every worker. Each
        # worker gives the user's own setting back to what it starts (restore_safepath).
        child_env = {
            **os.environ,
            **(env or {}),
            PARENT_ENV: str(os.getpid()),
            "PYTHONSAFEPATH": "1",
            SAFEPATH_WAS: os.environ.get("PYTHONSAFEPATH", ""),
        }
        # A stop signal waits until the child is on the list that `stop` signals.
        with stopping.shielded(), log.open("wb") as out:
            try:
                child = subprocess.Popen(
                    guarded(command),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=child_env,
                    start_new_session=True,
                )
            except OSError as e:
                # Python's own "Resource temporarily unavailable" named neither the process
                # nor the limit. Imported here: the guard, in every child, imports this module.
                from dlperf.errors import NoThreads, out_of_threads, threads_limit

                if not out_of_threads(e):
                    raise
                raise NoThreads(f"could not start {name}", threads_limit(also)) from None
            self.children.append(child)
        return child

    def wait(self, timeout_s: float | None = None) -> list[int | None]:
        """Wait until every child has ended or one has failed: their return codes (None:
        still running). TimeoutError after `timeout_s`."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        codes = [c.poll() for c in self.children]
        while None in codes and not any(codes):
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"still running after {timeout_s:g} s")
            time.sleep(POLL_S)
            codes = [c.poll() for c in self.children]
        return codes

    def _signal(self, children: list[subprocess.Popen[bytes]], sig: int) -> None:
        """`sig` to each child still running, SIGKILL to each child's group even once the
        child is gone (what it left in its group), and `sig` to the pids outside."""
        for child in children:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if sig == signal.SIGKILL:
                    # The children ran when `stop` began: a group's id is no other process's
                    # pid while a member lives, and once none does, ESRCH (unless within the
                    # grace the pid came round to a new group leader).
                    os.killpg(child.pid, sig)
                elif child.poll() is None:  # a reaped child's pid may be anyone's by now
                    child.send_signal(sig)
        kill([pid for pid in self.outside() if alive(pid)], sig)

    def _wait_gone(self, children: list[subprocess.Popen[bytes]], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while any(c.poll() is None for c in children) or any(map(alive, self.outside())):
            if time.monotonic() > deadline:
                return
            time.sleep(POLL_S)

    def stop(self) -> None:
        """SIGTERM every running child and the pids outside, SIGKILL what still runs after
        STOP_GRACE_S, and wait (a bounded time) for all of them to be gone. The children's
        own shutdown is not waited for beyond the grace: torchrun's agent can sit in a 300 s
        exit barrier, and a process blocked in a collective never returns to a Python
        signal handler."""
        running = [c for c in self.children if c.poll() is None]
        self._signal(running, signal.SIGTERM)
        self._wait_gone(running, STOP_GRACE_S)
        self._signal(running, signal.SIGKILL)
        self._wait_gone(running, REAP_S)

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if error is not None:
            with stopping.shielded():  # a stop signal during a failure's cleanup waits for it
                self.stop()
