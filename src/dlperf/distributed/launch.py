"""Start `torchrun` as a subprocess, wait for it, and leave nothing running behind it.

torchrun runs in its own session, so that a terminal's Ctrl-C reaches dlperf alone and dlperf
decides how to stop; its workers run in sessions of their own (torch.distributed.elastic
starts them so), which is why every worker writes its pid to the launch directory.

The kill chain, dlperf -> torchrun -> workers:
- dlperf stopped by Ctrl-C or SIGTERM (a KeyboardInterrupt here): the supervisor
  (dlperf.procs.Supervisor) signals torchrun's group and every worker directly, SIGTERM
  then, after a short grace, SIGKILL.
- dlperf SIGKILLed: the kernel SIGKILLs torchrun, and torchrun's death SIGKILLs the workers.
  Each of them is started through `guard`, which sets Linux's parent-death signal before
  exec'ing the real program.
- torchrun SIGKILLed: its workers die with it the same way; dlperf sees the launch fail.
- a worker killed: its peers' collectives fail, torchrun stops whatever still runs and
  exits with the failure, as for any failed worker. A peer *node*'s dlperf killed is the
  same: its processes die together, their connections close, and our next collective (or
  torchrun's rendezvous store, if it was theirs) fails. A host that vanishes without closing
  them leaves our collectives waiting for the process group's timeout.
- a worker (or torchrun) stopped, state T: its peers wait in their next collective, and
  torchrun for its workers, until the process group's timeout (gloo's: 30 minutes), saying
  nothing. dlperf looks at this node's processes while it waits (`wait_watching`) and fails
  the point once one has stayed stopped past `stopped_bound_s`.
"""

from __future__ import annotations

import errno
import ipaddress
import re
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dlperf.distributed.cpu_limit import stop_at_limit
from dlperf.errors import NoThreads, UserError, threads_limit
from dlperf.paths import open_files_limit, room_for_files
from dlperf.procs import Supervisor, alive, guarded, how, kill, refused_forks
from dlperf.procs import stopped as is_stopped  # off Linux (no /proc) nothing is watched

TAIL_LINES = 12

# Open files each process of a launch holds at most, measured (torch 2.x, gloo, one host):
# torchrun's agent holds 24 beside one per worker of its node (its rendezvous store's event
# loop and sockets, the workers' pipes); it failed at `ulimit -n 24` with one worker, ran at
# 26 with two and at 28 with four. A worker holds 8 beside one per rank of the whole world
# (gloo connects every pair). SPARE_FILES is the margin for what varies between versions.
AGENT_FILES = 24
WORKER_FILES = 8
SPARE_FILES = 2
# What torch reports when one of a launch's processes ran out of file descriptors (EMFILE):
# Python's OSError, the c10d store client's retries ("errno: 24 - Too many open files"), and
# the store server's event loop that could not start ("Failed to init uv loop"). Not ENFILE's
# "Too many open files in system": that is the system's table, not the process's limit.
_OUT_OF_FILES = re.compile(
    r"\[Errno 24\]|errno: 24\b|Too many open files(?! in system)|Failed to init uv loop"
)
# What a launch's process says when it could not start a process or thread (fork's or
# pthread_create's EAGAIN, at a cgroup's pids.max or ulimit -u): std::system_error's words
# (torchrun's rendezvous store starting its event loop's thread: "RuntimeError: Resource
# temporarily unavailable"), Python's OSError and its threading's. Asked of the exception the
# launch raised (error_lines' first line) alone, EAGAIN as the whole of its message: a
# socket's timed-out read says it too, after words of its own (gloo's "Read error [...]: ").
_NO_TASKS = re.compile(
    r"\w(?:Error|Exception): (?:\[Errno 11\] )?Resource temporarily unavailable$"
    r"|can't start new thread|pthread_create failed"
)
_ABORT = re.compile(r"\(exit code -6\b|\bSIGABRT\b")  # a worker's abort, as error_lines says it

# A process of a launch stopped (state T: SIGSTOP, `kill -STOP`, a Ctrl-Z of its own terminal)
# fails the point once it has stayed so for the greater of STOPPED_MIN_S and STOPPED_WARMUPS
# times a worker's warm-up (`stopped_bound_s`: the process group's start and the warm-up
# steps, so at least a few steps): a stop that someone means to lift soon, as a scheduler's
# suspend does, comes well within it.
# Not state t, stopped by a debugger (gdb, py-spy): someone is looking at it.
STOPPED_MIN_S = 60.0
STOPPED_WARMUPS = 10
LOOK_S = 1.0  # between two looks at a launch's processes


class Stopped(Exception):
    """A process of a launch that stayed stopped past stopped_bound_s: its one line."""


class OpenFilesLimit(UserError):
    """A launch that the process's open-file limit (RLIMIT_NOFILE) does not allow: the
    system's limit, not the input, so exit 1, in one line naming `ulimit -n`."""

    exit_code = 1


def open_files_needed(per_node: int, world: int) -> int:
    """The open-file limit a launch of `per_node` workers on this node, `world` in all,
    needs: every process of it (torchrun's agent, each worker) inherits the same limit."""
    return max(AGENT_FILES + per_node, WORKER_FILES + world) + SPARE_FILES


def ensure_open_files(per_node: int, world: int) -> None:
    """Make room for a launch under the open-file limit before torchrun starts: a soft limit
    too low is raised to the hard one (torchrun and its workers inherit it), as `serve` does;
    a hard limit too low is refused in one line (OpenFilesLimit). Below it torch's rendezvous
    store failed with "Failed to init uv loop", or its client retried for minutes, saying
    nothing, before a traceback that never named the limit."""
    needed = open_files_needed(per_node, world)
    limit = room_for_files(needed)
    if limit is None:
        return
    workers = f"{per_node} worker{'s' if per_node != 1 else ''}"
    raise OpenFilesLimit(
        f"{workers} on this node need about {needed} open files per process (torchrun's and "
        f"each worker's), over the open-file limit of {limit}",
        f"ulimit -n {limit} is too low: raise it to {needed} or more",
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _this_host(host: str) -> bool:
    """Whether `host` names this machine, as torch's c10d rendezvous decides whether to start
    its store there: localhost, a loopback address, this host's name, or a name or address
    that resolves to one of this host's addresses."""
    if host == "localhost":
        return True
    try:
        if ipaddress.ip_address(host).is_loopback:
            return True
    except ValueError:  # a name, not an address
        pass
    me = socket.gethostname()
    if host == me:
        return True
    try:
        theirs = {i[4][0] for i in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
        ours = {i[4][0] for i in socket.getaddrinfo(me, None, proto=socket.IPPROTO_TCP)}
    except (OSError, UnicodeError):  # a name that does not resolve: not this host's
        return False
    return bool(theirs & ours)


def _host_port(endpoint: str) -> tuple[str, int] | None:
    """HOST and PORT of `endpoint` (HOST may be [IPv6]); None where it names no port."""
    host, sep, port = endpoint.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 2**16:
        return None  # torchrun says what is wrong with it, or takes its default port
    return host.removeprefix("[").removesuffix("]"), int(port)


def check_endpoint(endpoint: str) -> None:
    """Refuse the rendezvous `endpoint` of a study on one node when it is on this host and
    another process listens on its port. torchrun starts the rendezvous store there; when it
    cannot bind the port it connects to whatever listens on it as a client, and waits, silent,
    until its rendezvous gives up (minutes). Only the address given is tried, as the store
    would be. (Of several nodes, the listener may be another node's torchrun, on this host
    when nodes are emulated on one machine: that is not checked.)"""
    where = _host_port(endpoint)
    if where is None or not _this_host(where[0]):
        return
    try:
        addresses = socket.getaddrinfo(*where, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return  # torchrun says so
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            # As the store's listener does: a connection of an earlier point's store that
            # waits out TIME_WAIT does not hold the port, only a listener does.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    continue  # an address this host cannot bind (IPv6 off): torchrun's to say
                raise UserError(
                    f"--rdzv {endpoint}: port {where[1]} is already in use on this host by "
                    "another process (the rendezvous store starts there)",
                    "pick another port, or leave --rdzv out: a study on one node picks a free "
                    "one itself",
                ) from None


@dataclass
class Rendezvous:
    """Where the nodes of one launch meet: torchrun's c10d rendezvous."""

    nnodes: int = 1
    node_rank: int = 0
    endpoint: str | None = None  # HOST:PORT; None: a free port on 127.0.0.1

    def args(self) -> list[str]:
        endpoint = self.endpoint or f"127.0.0.1:{free_port()}"
        return [
            "--nnodes",
            str(self.nnodes),
            "--node-rank",
            str(self.node_rank),
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            endpoint,
        ]


@dataclass
class Launch:
    returncode: int
    pids: list[int] = field(default_factory=list)
    error: str | None = None


def worker_pids(directory: Path) -> list[int]:
    """The pids the workers wrote (each atomically, by rename) into the launch directory."""
    return [int(p.read_text()) for p in sorted(directory.glob("rank-*.pid"))]


_FAILURE_HEAD = re.compile(r"^\[\d+\]:\s*$", re.M)  # "[0]:" opens one failure in the summary
_MODULE = re.compile(r"^(?:\w+\.)+(?=\w+(?::|$))")  # "dlperf_user_m." of "dlperf_user_m.Lost: x"


def _fields(block: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in block.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("rank", "exitcode", "traceback"):
            fields.setdefault(key.strip(), value.strip())
    return fields


def _failures(log_text: str) -> list[dict[str, str]]:
    """The failed ranks of torchrun's closing summary, its "Root Cause" first: the fields
    rank, exitcode and traceback (its first line) of each."""
    head, found, root = log_text.partition("Root Cause")
    if not found:
        return []
    others = head.rpartition("Failures:")[2]
    blocks = _FAILURE_HEAD.split(root)[1:] + _FAILURE_HEAD.split(others)[1:]
    return [fields for fields in map(_fields, blocks) if "rank" in fields]


_ABORTED = re.compile(r"(?:what\(\):|Fatal Python error:)\s*(.+)")
"""The line a worker aborting prints as it dies: C++'s terminate (gloo's "collective mismatch"
enforce) or Python's fatal error."""


def _exit_code(failure: dict[str, str]) -> int:
    return int(failure.get("exitcode", "0").split()[0])


def _first_cause(failures: list[dict[str, str]], directory: Path) -> dict[str, str]:
    """The failure that set off the others. torchrun's pick, the earliest to the second, can
    be a peer whose collective failed because the culprit vanished; so first a rank killed
    by a signal (not the SIGTERM with which torchrun stops the rest), then the rank that
    wrote its traceback first, then torchrun's pick."""

    def killed(failure: dict[str, str]) -> bool:
        code = _exit_code(failure)
        return code < 0 and code != -signal.SIGTERM

    def error_file(failure: dict[str, str]) -> Path:
        return directory / f"rank-{failure['rank'].split()[0]}.error"

    for failure in failures:
        if killed(failure):
            return failure
    raised = [f for f in failures if error_file(f).is_file()]
    if raised:
        return min(raised, key=lambda f: error_file(f).stat().st_mtime_ns)
    return failures[0]


def _raised(written: str) -> str | None:
    """The exception a traceback `written` ends with: the first line after its last frame
    (a message can go on over more), without the module that defines the exception, as a
    plain run stores it (`ShardLost: shard 7 went away`); None for text with no frame."""
    lines = written.splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith('  File "')]
    if not frames:
        return None
    # A frame's source and caret lines are indented; the exception's first line is not.
    after = [line for line in lines[frames[-1] + 1 :] if line and not line[0].isspace()]
    return _MODULE.sub("", after[0]) if after else None


def error_lines(directory: Path, log: Path, returncode: int) -> str:
    """What went wrong, first line a summary: the first failed rank (and the exception it
    raised), then its own traceback tail when it wrote one, else torchrun's account (a killed
    worker writes nothing); or, when torchrun itself failed, how and the end of its log, less
    any traceback's frames; or, when its agent caught a signal, that alone."""
    text = log.read_text(errors="replace")
    failures = _failures(text)
    if failures:
        cause = _first_cause(failures, directory)
        rank = cause["rank"].split()[0]
        head = f"worker rank {rank} failed (exit code {cause.get('exitcode', '?')})"
        error_file = directory / f"rank-{rank}.error"
        written = error_file.read_text().strip() if error_file.is_file() else ""
        if written:
            # Its exception on the first line, which is all the study prints of the point:
            # "exit code 1" alone never says what the model raised.
            exception = _raised(written)
            if exception:
                head = f"worker rank {rank} failed: {exception}"
            return "\n".join([head, *written.splitlines()[-TAIL_LINES:]])
        said = f"{head}: {cause.get('traceback', '')}".rstrip(": ")
        reason = _ABORTED.search(text) if _exit_code(cause) == -signal.SIGABRT else None
        # torchrun records an abort as its signal alone; why it aborted is in the log
        return f"{said}: {reason.group(1).strip()}" if reason else said
    # Its own exception on the first line too (under `ulimit -n 24` it could not start a
    # worker: "[Errno 24] Too many open files" was ten lines below "exit code 1").
    own = _raised(text)
    signalled = _SIGNALLED.match(own or "")
    if signalled:
        # torch's agent caught the signal, stopped its workers and raised: its log after
        # says no more than the signal does
        return f"torchrun failed (stopped by {_signal_name(int(signalled.group(1)))})"
    said = (
        f"torchrun failed: {own}{_limit_hint(text)}"
        if own
        else f"torchrun failed ({how(returncode)})"
    )
    lines = [line for line in _without_frames(text.splitlines()) if line.strip()]
    return "\n".join([said, *lines[-TAIL_LINES:]])


# torch's SignalException, which torchrun's agent raises on SIGTERM, SIGINT, SIGHUP or SIGQUIT
_SIGNALLED = re.compile(r"SignalException: Process \d+ got signal: (\d+)$")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:  # a signal without a name
        return f"signal {number}"


def _without_frames(lines: list[str]) -> list[str]:
    """`lines` without a traceback's heading and frames (a frame's `File` line, then its
    indented source and caret lines): the exception line that ends it says what matters, and
    a tail cut from them began mid-frame."""
    kept: list[str] = []
    in_frame = False
    for line in lines:
        in_frame = line.startswith('  File "') or (in_frame and line.startswith("    "))
        if not in_frame and line != "Traceback (most recent call last):":
            kept.append(line)
    return kept


def _limit_hint(log_text: str) -> str:
    """The process's limit torchrun's log shows it met, named: torchrun inherits dlperf's."""
    return f" ({open_files_limit()})" if _OUT_OF_FILES.search(log_text) else ""


def _out_of_files(error: str, log: Path) -> OpenFilesLimit | None:
    """The launch's failure as the open-file limit, one line, when its log shows that a
    process of it ran out of descriptors (the traceback, and whatever torch named the
    EMFILE, told nothing more); None for any other failure."""
    if not _OUT_OF_FILES.search(log.read_text(errors="replace")):
        return None
    limit = open_files_limit()
    head = error.splitlines()[0].removesuffix(f" ({limit})")
    # RendezvousConnectionError's "See inner exception": the inner one is the EMFILE
    head = head.removesuffix(" See inner exception for details.")
    if "Too many open files" not in head:
        head += "; out of open files"
    return OpenFilesLimit(head, limit)


def _out_of_tasks(error: str, refused: bool) -> NoThreads | None:
    """The launch's failure as the limit on processes and threads, one line, when the
    exception it raised (torchrun's agent's or a worker's) is EAGAIN from starting one, or
    when torchrun failed or a worker aborted (SIGABRT) while a cgroup's pids.max `refused` a
    fork (a worker that gloo aborted as it could not start its threads says only "terminate
    called without an active exception"); None for any other failure: a worker's own
    exception is its own, whoever else in the cgroup met the limit meanwhile. Under `ulimit
    -u` alone (no count of what it refused) such an abort is not told apart."""
    head = error.splitlines()[0]
    aborted = head.startswith("torchrun failed") or _ABORT.search(head) is not None
    return (
        NoThreads(head, threads_limit())
        if _NO_TASKS.search(head) or (refused and aborted)
        else None
    )


def stopped_bound_s(directory: Path) -> float:
    """How long a process of the launch in `directory` may stay stopped: STOPPED_MIN_S, or
    STOPPED_WARMUPS warm-ups once a torch worker is past its own: from its `rank-R.pid`
    (written as it starts, torch loaded) to its `rank-R.training` (the process group up, the
    warm-up steps and the compute-only copy's taken), the longest of the ranks past it."""
    warmups = [
        mark.stat().st_mtime - mark.with_suffix(".pid").stat().st_mtime
        for mark in directory.glob("rank-*.training")
    ]
    return max([STOPPED_MIN_S, *(STOPPED_WARMUPS * w for w in warmups)])


def wait_watching(
    supervisor: Supervisor, processes: Callable[[], dict[int, str]], directory: Path
) -> list[int | None]:
    """supervisor.wait(), looking every LOOK_S at the launch's `processes` (pid -> name):
    Stopped once one of them has been stopped at every look for stopped_bound_s. Looks count
    the time, not the clock: a dlperf stopped with its workers (a scheduler's suspend) must
    not blame a worker that the SIGCONT after has not reached yet."""
    stopped: tuple[int, str] | None = None
    looks = 0
    while True:
        try:
            return supervisor.wait(LOOK_S)
        except TimeoutError:
            pass
        now = next((item for item in processes().items() if is_stopped(item[0])), None)
        looks = looks + 1 if now is not None and now == stopped else int(now is not None)
        stopped = now
        if stopped is not None and looks * LOOK_S >= stopped_bound_s(directory):
            pid, name = stopped
            raise Stopped(
                f"{name} (pid {pid}) was stopped (state T: SIGSTOP, kill -STOP or Ctrl-Z) for "
                f"{looks * LOOK_S:.0f} s while its peers waited for it"
            )


def run_launcher(
    directory: Path, command: list[str], log: Path, env: dict[str, str] | None = None
) -> tuple[int, list[int]]:
    """Run a launcher `command` (torchrun, horovodrun) whose workers write their pids into
    `directory`, its output in `log`: (its return code, the workers' pids). On any
    exception, Ctrl-C and SIGTERM (KeyboardInterrupt) above all, and Stopped (a process of it
    stopped, which the launcher never notices), stop every process it started, then let the
    exception propagate. A process of it stopped by the CPU-time limit stops dlperf
    (dlperf.distributed.cpu_limit): a KeyboardInterrupt, once every process has ended."""
    directory.mkdir(parents=True, exist_ok=True)
    # A directory can be reused (scale-node/ on every node but 0): its rank files, a pid
    # above all, must be this launch's.
    for stale in directory.glob("rank-*"):
        stale.unlink()
    with Supervisor(lambda: worker_pids(directory)) as supervisor:
        launcher = supervisor.start(command, log, env, name=log.stem)  # torchrun, horovodrun

        def processes() -> dict[int, str]:  # the launcher, named after its log, and the workers
            ranks = directory.glob("rank-*.pid")
            workers = {int(p.read_text()): f"worker rank {p.stem[5:]}" for p in ranks}
            return {launcher.pid: log.stem, **workers}

        [code] = wait_watching(supervisor, processes, directory)
    assert code is not None
    pids = worker_pids(directory)
    # A worker that outlives its launcher (only without a parent-death signal, off Linux)
    # must not keep the cores.
    kill([pid for pid in pids if alive(pid)], signal.SIGKILL)
    # A process of it that its CPU-time limit stopped stops dlperf too, as its own would
    failed = _failures(log.read_text(errors="replace"))
    stop_at_limit(directory, [code, *map(_exit_code, failed)])
    return code, pids


def run_torchrun(
    directory: Path,
    nproc_per_node: int,
    module: str,
    args: Sequence[str],
    rdzv: Rendezvous | None = None,
    env: dict[str, str] | None = None,
) -> Launch:
    """Run `module` under torchrun with its output in `directory`/torchrun.log: `python -u -m
    module args`, guarded, in each worker (torchrun itself is guarded when the supervisor
    starts it)."""
    rdzv = rdzv or Rendezvous()
    ensure_open_files(nproc_per_node, rdzv.nnodes * nproc_per_node)
    log = directory / "torchrun.log"
    worker = guarded([sys.executable, "-u", "-m", module, *args])
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node"]
    torchrun += [str(nproc_per_node), *rdzv.args(), "--max-restarts", "0"]
    refused = refused_forks()
    try:
        code, pids = run_launcher(directory, [*torchrun, "--no-python", *worker], log, env)
    except Stopped as stopped:
        return Launch(1, worker_pids(directory), str(stopped))
    error = error_lines(directory, log, code) if code != 0 else None
    if error is not None and (
        limited := _out_of_files(error, log) or _out_of_tasks(error, refused_forks() > refused)
    ):
        raise limited
    return Launch(code, pids, error)
