"""Stop signals at random moments: SIGTERM, SIGINT and SIGHUP sent to each long-running dlperf
command (run, sweep, sweep --jobs 2, scale, staleness, distill, report, export, serve), each
trial a real process in a fresh directory with a SQLite store of its own, and every trial
checked against what dlperf promises once a stop signal lands:

- the exit code is 128 + the first signal (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP),
  or the second when both arrived before Python ran its handlers (it runs them in signal-number
  order, SIGHUP, SIGINT, SIGTERM); 0 only when the
  signal came after the work was done, which the store shows as no run `killed`;
- every run the command made ends `finished` or `killed` (error "interrupted"), none
  `running`;
- nothing the command started (torchrun, its workers, sweep workers, report drawing
  workers, the server) is alive 10 s after dlperf exited;
- dlperf itself exits within those 10 s of the signal, with no traceback on stderr.

About a fifth of the trials send a second signal (either kind) 0-0.5 s after the first, so
that one lands during the first one's cleanup; the exit code still answers the first.

The moment to aim at starts when dlperf has installed its handlers (before that, Python's
defaults apply and are out of scope): /proc/PID/status shows the three signals caught.
From there the signal waits a delay drawn uniformly from [0, 1.1 x the command's natural
duration], measured once per command by a calibration run without a signal, so signals land
in start-up, in the work, in store writes, while children start and stop, in cleanup and
sometimes after the work (serve runs until stopped: a fixed window instead). The signal goes
to dlperf's own process, as a scheduler's `kill PID` sends it; every command runs in a
session of its own, with a tag in its environment that its descendants inherit, so that
whatever it leaves behind is found and killed (and counted).

    python benchmarks/stress_signals.py --trials 300        # about 45 min on 2 cores
    python benchmarks/stress_signals.py --trials 20 --commands scale,serve --seed 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager, suppress
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchlib import RESULTS, machine, table

DLPERF = [sys.executable, "-m", "dlperf"]
TAG = "DLPERF_STRESS_TAG"  # in every trial's environment; descendants inherit it
GRACE_S = 10.0  # the promise: dlperf and everything it started gone this long after
GIVE_UP_S = 40.0  # after the signal: a command still alive then is SIGKILLed by us
SETUP_TIMEOUT_S = 600.0  # a set-up command (the fixture's runs, its export) hangs past this
UNSIGNALLED_TIMEOUT_S = 300.0  # a calibration run (or one that beat its signal) hangs past this
HANDLERS_TIMEOUT_S = 120.0  # a busy machine may take long to import; never this long
POLL_S = 0.002
DELAY_FACTOR = 1.1  # past the natural duration: some signals land after the work
FOREVER_WINDOW_S = 8.0  # the delay range of a command that runs until it is stopped
SECOND_SHARE = 0.2
SECOND_MAX_S = 0.5
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
STDERR_KEPT, STDERR_SHOWN = 80, 15  # lines of a trial's stderr saved, and printed on failure
PROBLEMS = (
    "wrong exit code",
    "run left running",
    "run mismarked",
    "process left",
    "over the grace",
    "traceback",
    "no handlers",
)

# Tiny workloads on the bundled digits, one thread each: every command ends in seconds on
# 2 cores, so trials are many and the signal's moment covers all of a command's life.
EXPERIMENT = """\
[model]
name = "smallcnn"
[data]
name = "digits"
{limit}[train]
epochs = {epochs}
batch_size = 32
lr = 0.05
[run]
threads = 1
warmup_steps = 1
out_dir = "dlperf_runs"
"""
SWEEP = """\
base = "exp.toml"
[grid]
"train.lr" = [0.1, 0.05]
[set]
"train.epochs" = 1
"""
REPORT_RUNS = 3  # runs in the store that report and export read


@dataclass(frozen=True)
class Fixture:
    """What is made once, before the trials: a store with finished runs (for report and
    export, copied into each trial) and an ONNX model exported from one of them (to serve).
    None where making it failed; `errors` says why."""

    root: Path
    store: Path | None
    onnx: Path | None
    errors: dict[str, str]


@dataclass(frozen=True)
class Command:
    name: str
    args: str  # after `dlperf --db PATH`; {onnx} is the fixture's model
    files: Callable[[Fixture, Path], None]  # writes its inputs into the trial's directory
    forever: bool = False  # runs until stopped: no natural duration to calibrate
    needs: str | None = None  # the fixture part it cannot run without

    def argv(self, fixture: Fixture) -> list[str]:
        return [str(fixture.onnx) if a == "{onnx}" else a for a in self.args.split()]

    def unusable(self, fixture: Fixture) -> str | None:
        if self.needs is None or self.needs not in fixture.errors:
            return None
        return f"needs {self.needs}, which could not be made: {fixture.errors[self.needs]}"


def _experiment(fixture: Fixture, where: Path) -> None:
    (where / "exp.toml").write_text(EXPERIMENT.format(limit="", epochs=3))


def _sweep(fixture: Fixture, where: Path) -> None:
    _experiment(fixture, where)
    (where / "sweep.toml").write_text(SWEEP)


def _distill(fixture: Fixture, where: Path) -> None:
    # 64 labelled images: the teacher and each student train a couple of steps.
    (where / "exp.toml").write_text(EXPERIMENT.format(limit="limit = 64\n", epochs=1))


def _stored_runs(fixture: Fixture, where: Path) -> None:
    assert fixture.store is not None
    shutil.copy(fixture.store, where / "dlperf.db")


def _nothing(fixture: Fixture, where: Path) -> None:
    pass


# 2 workers on 1 usable core are refused without it.
OVERSUBSCRIBE = " --allow-oversubscribe" if len(os.sched_getaffinity(0)) < 2 else ""
SCALE = "--workers 2 --mode weak --per-worker-batch 16 --warmup-steps 1 --steps 5 --no-plots"
DISTILL = "--unlabeled digits:holdout=0.5 --top-k 5,10 --pretrain-epochs 1 --finetune-epochs 1"
COMMANDS = {
    c.name: c
    for c in [
        Command("run", "run exp.toml", _experiment),
        Command("sweep", "sweep sweep.toml", _sweep),
        Command("sweep-jobs2", "sweep sweep.toml --jobs 2", _sweep),
        Command("scale", f"scale run exp.toml {SCALE}{OVERSUBSCRIBE}", _experiment),
        Command(
            "staleness", "staleness --train exp.toml --learners 2 --set train.epochs=1", _experiment
        ),
        Command("distill", f"distill exp.toml {DISTILL}", _distill),
        Command("report", "report --out site", _stored_runs, needs="store"),
        Command("export", "export 1 --out m.onnx", _stored_runs, needs="store"),
        # Loopback only, on a free port: the trials never listen anywhere else.
        Command(
            "serve",
            "serve start {onnx} --host 127.0.0.1 --port 0 --threads 1",
            _nothing,
            forever=True,
            needs="onnx",
        ),
    ]
}


# --- processes --------------------------------------------------------------------------------


@dataclass
class Child:
    """One dlperf process in a session of its own, and when it exited (monotonic clock)."""

    proc: subprocess.Popen[bytes]
    tag: str
    started_at: float
    pidfd: int | None
    exited_at: float | None = None

    def wait(self, timeout: float) -> bool:
        """Whether it exited within `timeout` s; the exit's moment is kept to the ms (a
        pidfd turns readable as the process ends; without one, polled)."""
        deadline = time.monotonic() + timeout
        while self.exited_at is None:
            if self.proc.poll() is not None:
                self.exited_at = time.monotonic()
                break
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self.pidfd is None:
                time.sleep(min(left, POLL_S))
            else:
                select.select([self.pidfd], [], [], left)
        return True

    def send(self, sig: signal.Signals) -> bool:
        """Signal dlperf itself, not its group: as a scheduler's `kill PID` does. False when
        it had already exited (and was reaped, so its pid may be another's by now)."""
        if self.proc.poll() is not None:
            self.wait(0)
            return False
        os.kill(self.proc.pid, sig)
        return True

    def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


def spawn(argv: list[str], where: Path, tag: str) -> Child:
    env = {**child_env(), TAG: tag}
    # A shell starts background jobs with SIGINT ignored, nohup ignores SIGHUP (which dlperf
    # then leaves ignored), and exec keeps an ignored signal; a handler is reset to the
    # default by exec, so the child starts as from a terminal.
    reset = (signal.SIGINT, signal.SIGHUP)
    previous = {sig: signal.signal(sig, signal.default_int_handler) for sig in reset}
    try:
        # Output to files, not pipes: a child that outlives dlperf would hold a pipe open.
        with open(where / "stdout.txt", "wb") as out, open(where / "stderr.txt", "wb") as err:
            proc = subprocess.Popen(
                argv, cwd=where, env=env, stdout=out, stderr=err, start_new_session=True
            )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    pidfd = None
    with suppress(OSError, AttributeError):
        pidfd = os.pidfd_open(proc.pid)
    return Child(proc, tag, time.monotonic(), pidfd)


def _caught(pid: int) -> bool | None:
    """Whether the process catches every stop signal (bit signum-1 of SigCgt); None
    once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            mask = int(line.split()[1], 16)
            return all(mask >> (s - 1) & 1 for s in STOP_SIGNALS)
    return False


def wait_for_handlers(child: Child) -> float | None:
    """The moment dlperf's handlers are in place, or None (it exited first, or never)."""
    deadline = child.started_at + HANDLERS_TIMEOUT_S
    while time.monotonic() < deadline:
        caught = _caught(child.proc.pid)
        if caught:
            return time.monotonic()
        if caught is None or child.wait(POLL_S):
            return None
    return None


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, session id) from /proc/PID/stat; the name in parentheses may hold anything."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    return fields[0], int(fields[3])


def _has_tag(pid: int, marker: bytes) -> bool:
    try:
        return marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:  # gone, or not ours to read
        return False


def descendants(child: Child) -> list[int]:
    """Live processes of the trial: its tag in their environment, or in dlperf's session.
    Zombies count as gone: they run nothing and hold no port or file."""
    marker = f"{TAG}={child.tag}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        stat = _stat(pid)
        if stat is None or stat[0] == "Z":
            continue
        if stat[1] == child.proc.pid or _has_tag(pid, marker):
            found.append(pid)
    return found


def describe(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        argv = "?"
    return f"{pid} {argv.strip()[:160]}"


def wait_gone(child: Child, until: float) -> list[str]:
    """The trial's processes still alive at `until` (monotonic), described."""
    while True:
        left = descendants(child)
        if not left or time.monotonic() >= until:
            return [describe(pid) for pid in left]
        time.sleep(0.05)


def kill_all(child: Child) -> None:
    """SIGKILL dlperf and everything of its trial, reap dlperf, and wait (a little) until
    the rest is gone too, so that the next trial has the cores to itself. No process group
    is signalled: once dlperf is reaped its pid, the group's id, may be reused."""
    child.proc.kill()  # a no-op once it has exited
    child.proc.wait()
    child.wait(0)
    child.close()
    for _ in range(3):
        pids = descendants(child)
        if not pids:
            return
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_gone(child, time.monotonic() + 2.0)


@contextmanager
def trial_process(argv: list[str], where: Path) -> Iterator[Child]:
    """A tagged dlperf process that, whatever happens here, is gone with all of its own
    afterwards."""
    child = spawn(argv, where, uuid.uuid4().hex)
    try:
        yield child
    finally:
        kill_all(child)


# --- the store --------------------------------------------------------------------------------


def stored_runs(db: Path) -> list[dict[str, Any]] | str:
    """Every run in the trial's store, read with plain sqlite3 (dlperf's own reader shows a
    `running` run whose process is gone as `lost`); a string when the store is unreadable."""
    if not db.exists():
        return []  # stopped before it made its store
    try:
        with closing(sqlite3.connect(db)) as con:
            rows = con.execute("SELECT id, status, error FROM runs ORDER BY id").fetchall()
    except sqlite3.OperationalError as e:
        if "no such table" in str(e):
            return []  # stopped while it made its store
        return f"{type(e).__name__}: {e}"
    except sqlite3.DatabaseError as e:
        return f"{type(e).__name__}: {e}"
    return [{"id": i, "status": s, "error": err} for i, s, err in rows]


def snapshot(source: Path, target: Path) -> None:
    """A self-contained copy of a SQLite store: the pages still in its WAL folded in."""
    with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(target)) as dst:
        src.backup(dst)


# --- trials -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """One trial's draw, made up front from the seed. The delay is a fraction of the
    command's window, known only once the command is calibrated."""

    command: str
    first: signal.Signals
    fraction: float
    second: signal.Signals | None = None
    second_after_s: float = 0.0


@dataclass
class Trial:
    command: str
    calibration: bool
    first: str | None = None
    second: str | None = None
    delay_s: float | None = None  # handlers in place to the first signal
    second_after_s: float | None = None
    signalled: bool = False  # False: it exited before the delay was up
    second_sent: bool = False
    no_handlers: bool = False  # alive HANDLERS_TIMEOUT_S without catching both signals
    exit_code: int | None = None  # None: alive GIVE_UP_S after the signal, then killed
    handlers_s: float | None = None  # start to handlers in place
    work_s: float | None = None  # handlers in place to the exit, when not signalled
    stop_s: float | None = None  # first signal to dlperf's exit
    wall_s: float = 0.0  # start to the last of its processes gone
    runs: list[dict[str, Any]] | str = field(default_factory=list)
    left: list[str] = field(default_factory=list)  # alive GRACE_S after dlperf's exit
    traceback: bool = False
    problems: list[str] = field(default_factory=list)
    stderr_tail: str = ""


def child_env() -> dict[str, str]:
    """This environment without DLPERF_* (a store, test hooks): every trial starts alike."""
    return {k: v for k, v in os.environ.items() if not k.startswith("DLPERF_")}


def run_trial(command: Command, fixture: Fixture, plan: Plan | None, window_s: float) -> Trial:
    """One trial in a fresh directory: start dlperf, wait for its handlers and the delay,
    signal it (unless it exited first), wait for its exit and its processes, then check.
    Without a plan, the calibration run: no signal."""
    where = Path(tempfile.mkdtemp(prefix=f"{command.name}-", dir=fixture.root))
    try:
        command.files(fixture, where)
        argv = [*DLPERF, "--db", str(where / "dlperf.db"), *command.argv(fixture)]
        trial = Trial(command.name, calibration=plan is None)
        delay = plan.fraction * window_s if plan else 0.0
        if plan:
            trial.first, trial.delay_s = plan.first.name, round(delay, 3)
            if plan.second:
                trial.second, trial.second_after_s = plan.second.name, plan.second_after_s
        with trial_process(argv, where) as child:
            _drive(child, trial, plan, delay)
        trial.wall_s = time.monotonic() - child.started_at
        trial.runs = stored_runs(where / "dlperf.db")
        stderr = (where / "stderr.txt").read_text(errors="replace")
        trial.traceback = "Traceback" in stderr
        trial.stderr_tail = "\n".join(stderr.splitlines()[-STDERR_KEPT:])
        trial.problems = problems_of(trial)
        return trial
    finally:
        shutil.rmtree(where, ignore_errors=True)


def _drive(child: Child, trial: Trial, plan: Plan | None, delay: float) -> None:
    ready = wait_for_handlers(child)
    if ready is None:
        trial.no_handlers = child.exited_at is None
        if trial.no_handlers:
            return  # trial_process kills it
    else:
        trial.handlers_s = ready - child.started_at
    signalled_at = 0.0
    if ready is not None and plan is not None:
        if not child.wait(max(0.0, ready + delay - time.monotonic())):
            signalled_at = time.monotonic()
            trial.signalled = child.send(plan.first)
        if trial.signalled and plan.second is not None and not child.wait(plan.second_after_s):
            trial.second_sent = child.send(plan.second)
    if not child.wait(GIVE_UP_S if trial.signalled else UNSIGNALLED_TIMEOUT_S):
        return  # hung: no exit code, no stop time; trial_process kills it
    assert child.exited_at is not None
    trial.exit_code = child.proc.returncode
    if trial.signalled:
        trial.stop_s = child.exited_at - signalled_at
    elif ready is not None:
        trial.work_s = child.exited_at - ready
    trial.left = wait_gone(child, child.exited_at + GRACE_S)


def problems_of(trial: Trial) -> list[str]:
    """What the trial broke of the promise, in PROBLEMS' words."""
    runs = trial.runs if isinstance(trial.runs, list) else []
    broken = {
        "wrong exit code": not _exit_ok(trial, runs),
        "run left running": any(r["status"] == "running" for r in runs),
        "run mismarked": isinstance(trial.runs, str) or any(map(_mismarked, runs)),
        "process left": bool(trial.left),
        "over the grace": trial.signalled and (trial.stop_s is None or trial.stop_s > GRACE_S),
        "traceback": trial.traceback,
        "no handlers": trial.no_handlers,
    }
    return [p for p in PROBLEMS if broken[p]]


def _exit_ok(trial: Trial, runs: list[dict[str, Any]]) -> bool:
    if trial.exit_code is None:
        return False
    if not trial.signalled:
        return trial.exit_code == 0
    assert trial.first is not None
    if trial.exit_code == 128 + signal.Signals[trial.first]:
        return True
    # Two signals that reach the process before Python next runs its handlers (the main
    # thread inside one long C call) are handled in signal-number order (SIGHUP, SIGINT,
    # SIGTERM): then the second one sent is the first dlperf sees.
    second = signal.Signals[trial.second] if trial.second_sent and trial.second else None
    if second is not None and trial.exit_code == 128 + second:
        return True
    # The signal came after the work: its own 0, as long as nothing was stopped by it.
    return trial.exit_code == 0 and not any(r["status"] == "killed" for r in runs)


def _mismarked(run: dict[str, Any]) -> bool:
    """Ended, but neither finished nor killed by the interrupt (`running` is counted apart)."""
    if run["status"] in ("finished", "running"):
        return False
    return (run["status"], run["error"]) != ("killed", "interrupted")


def plan_trials(names: Sequence[str], total: int, rng: random.Random) -> list[Plan]:
    """`total` trials spread evenly over the commands (the first ones take the remainder),
    SIGTERM, SIGINT and SIGHUP in turn within each command, and interleaved, one round of the
    commands after another, so that the machine's load changes fall on all of them alike."""
    counts = [total // len(names) + (i < total % len(names)) for i in range(len(names))]
    plans = []
    for j in range(max(counts, default=0)):
        for i, name in enumerate(names):
            if j < counts[i]:
                plans.append(_draw(name, STOP_SIGNALS[(i + j) % len(STOP_SIGNALS)], rng))
    return plans


def _draw(name: str, first: signal.Signals, rng: random.Random) -> Plan:
    fraction = rng.random()
    if rng.random() >= SECOND_SHARE:
        return Plan(name, first, fraction)
    return Plan(name, first, fraction, rng.choice(STOP_SIGNALS), rng.uniform(0, SECOND_MAX_S))


# --- fixture and calibration ------------------------------------------------------------------


def setup_command(args: list[str], where: Path) -> str | None:
    """A set-up `dlperf ARGS` run to its end (tagged too, so nothing of it stays behind):
    None if it succeeded, else why not."""
    with trial_process([*DLPERF, *args], where) as child:
        ended = child.wait(SETUP_TIMEOUT_S)
    if ended and child.proc.returncode == 0:
        return None
    why = f"exited {child.proc.returncode}" if ended else f"still running after {SETUP_TIMEOUT_S} s"
    stderr = (where / "stderr.txt").read_text(errors="replace").strip()
    return f"`dlperf {' '.join(args)}` {why}: {stderr[-400:]}"


def make_fixture(root: Path, names: Sequence[str]) -> Fixture:
    """The store of finished runs and the ONNX model, made only for commands that need
    them."""
    needs = {COMMANDS[n].needs for n in names}
    errors: dict[str, str] = {}
    if not needs & {"store", "onnx"}:
        return Fixture(root, None, None, errors)
    where = root / "fixture"
    where.mkdir()
    _experiment(Fixture(root, None, None, errors), where)
    db = str(where / "dlperf.db")
    for _ in range(REPORT_RUNS):
        # Phase timing: the report draws its figures too.
        error = setup_command(["--db", db, "run", "exp.toml", "--timing", "phases"], where)
        if error:
            errors["store"] = errors["onnx"] = error
            return Fixture(root, None, None, errors)
    store = root / "runs.db"
    snapshot(where / "dlperf.db", store)
    onnx = where / "model.onnx"
    if "onnx" in needs:
        error = setup_command(["--db", db, "export", "1", "--out", str(onnx)], where)
        if error:
            errors["onnx"] = error
    return Fixture(root, store, None if "onnx" in errors else onnx, errors)


@dataclass
class Calibrated:
    window_s: float | None  # the delay's range; None: the command cannot be exercised
    why_not: str | None
    calibration: Trial | None


def calibrate(command: Command, fixture: Fixture) -> Calibrated:
    """One run without a signal: its natural duration (handlers to exit) sets the window.
    A command that runs until stopped is instead signalled after FOREVER_WINDOW_S, which
    must find it alive."""
    unusable = command.unusable(fixture)
    if unusable:
        return Calibrated(None, unusable, None)
    if command.forever:
        stop = Plan(command.name, signal.SIGTERM, 1.0)
        trial = run_trial(command, fixture, stop, FOREVER_WINDOW_S)
        if not trial.signalled:
            return Calibrated(None, _failed_run(trial, "ended by itself"), trial)
        return Calibrated(FOREVER_WINDOW_S, None, trial)
    trial = run_trial(command, fixture, None, 0.0)
    if trial.exit_code != 0 or trial.work_s is None:
        return Calibrated(None, _failed_run(trial, "failed"), trial)
    return Calibrated(DELAY_FACTOR * trial.work_s, None, trial)


def _failed_run(trial: Trial, what: str) -> str:
    last = trial.stderr_tail.splitlines()[-1:] or ["(no stderr)"]
    return f"its calibration run {what} (exit {trial.exit_code}): {last[0]}"


# --- the run ----------------------------------------------------------------------------------


def execute(
    names: Sequence[str], plans: Sequence[Plan], root: Path
) -> tuple[dict[str, Calibrated], list[Trial], bool]:
    """Calibrate every command, then run the plans of those that can be exercised. Ctrl-C
    (or SIGTERM) ends it early with what was done, and whether it was interrupted."""
    calibrated: dict[str, Calibrated] = {}
    trials: list[Trial] = []
    try:
        fixture = make_fixture(root, names)
        for name in names:
            calibrated[name] = calibrate(COMMANDS[name], fixture)
            say(f"calibrated {name}: {_calibration_line(calibrated[name])}")
        todo = [p for p in plans if calibrated[p.command].window_s is not None]
        for n, plan in enumerate(todo, 1):
            window = calibrated[plan.command].window_s
            assert window is not None
            trials.append(run_trial(COMMANDS[plan.command], fixture, plan, window))
            say(f"[{n:>{len(str(len(todo)))}}/{len(todo)}] {trial_line(trials[-1])}")
    except KeyboardInterrupt:
        say("interrupted: what follows holds only what was done")
        return calibrated, trials, True
    return calibrated, trials, False


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _calibration_line(c: Calibrated) -> str:
    if c.window_s is None:
        return f"NOT exercised: {c.why_not}"
    t = c.calibration
    assert t is not None and t.handlers_s is not None
    if t.work_s is None:
        return f"handlers at {t.handlers_s:.2f} s, runs until stopped: delays 0-{c.window_s:g} s"
    return (
        f"handlers at {t.handlers_s:.2f} s, work {t.work_s:.2f} s, "
        f"delays 0-{c.window_s:.2f} s{_verdict(t)}"
    )


def _verdict(t: Trial) -> str:
    return "" if not t.problems else f"; FAIL: {', '.join(t.problems)}"


def trial_line(t: Trial) -> str:
    if t.first is None:
        what = f"{t.command} without a signal"
    else:
        what = f"{t.command} {t.first} at {t.delay_s or 0:.2f} s"
    if t.second:
        sent = "" if t.second_sent else " (not sent)"
        what += f" + {t.second} {t.second_after_s:.2f} s later{sent}"
    if t.exit_code is None:
        outcome = "never exited" if t.signalled else "no exit"
    elif t.first is None:
        outcome = f"exit {t.exit_code}"
    elif not t.signalled:
        outcome = f"exited {t.exit_code} before the signal"
    else:
        outcome = f"exit {t.exit_code} in {t.stop_s:.2f} s"
    verdict = "ok" if not t.problems else f"FAIL: {', '.join(t.problems)}"
    return f"{what}: {outcome} (trial {t.wall_s:.1f} s) {verdict}"


# --- the report -------------------------------------------------------------------------------

COLUMNS = [
    "command",
    "trials",
    "signalled",
    "2nd signal",
    *PROBLEMS,
    "stop median s",
    "stop max s",
    "natural s",
    "trial s",
]


def _row(name: str, trials: Sequence[Trial], natural: str | float) -> list[Any]:
    stops = [t.stop_s for t in trials if t.stop_s is not None]
    counts = Counter(p for t in trials for p in t.problems)
    walls = [t.wall_s for t in trials if t.wall_s]
    return [
        name,
        len(trials),
        sum(t.signalled for t in trials),
        sum(t.second_sent for t in trials),
        *(counts[p] for p in PROBLEMS),
        statistics.median(stops) if stops else "-",
        max(stops) if stops else "-",
        natural,
        statistics.median(walls) if walls else "-",
    ]


def _natural(c: Calibrated | None) -> str | float:
    if c is None or c.window_s is None:
        return "-"
    if c.calibration is None or c.calibration.work_s is None:
        return f"(window {c.window_s:g})"
    return c.calibration.work_s


def summary(names: Sequence[str], calibrated: dict[str, Calibrated], trials: list[Trial]) -> str:
    rows = [
        _row(n, [t for t in trials if t.command == n], _natural(calibrated.get(n))) for n in names
    ]
    rows.append(_row("total", trials, "-"))
    return table(
        "stop signals at random moments (stop times: signal to dlperf's exit)", COLUMNS, rows
    )


def failures(names: Sequence[str], calibrated: dict[str, Calibrated], trials: list[Trial]) -> str:
    """Every command not exercised and every trial (calibrations too) that failed, with
    what it did; empty when there are none."""
    lines = [
        f"NOT exercised: {n}: {calibrated[n].why_not}"
        for n in names
        if n in calibrated and calibrated[n].window_s is None
    ]
    checked = [c.calibration for c in calibrated.values() if c.calibration] + trials
    failed = [t for t in checked if t.problems]
    if failed:
        kinds = Counter(p for t in failed for p in t.problems)
        lines.append(
            f"{len(failed)} failing trial(s): "
            + ", ".join(f"{kinds[p]} {p}" for p in PROBLEMS if kinds[p])
        )
    for t in failed:
        lines.append(("calibration " if t.calibration else "") + trial_line(t))
        lines.append(f"    runs: {_runs_line(t.runs)}")
        lines.extend(f"    left: {p}" for p in t.left)
        if t.traceback:
            lines.append(f"    deepest dlperf frame: {_dlperf_frame(t.stderr_tail)}")
        lines.extend(f"    | {line}" for line in t.stderr_tail.splitlines()[-STDERR_SHOWN:])
    return "\n".join(lines)


def _dlperf_frame(stderr: str) -> str:
    """Where in dlperf the traceback's last exception passed (its tail is library frames)."""
    frames = [line.strip() for line in stderr.splitlines() if "/dlperf/" in line and "File" in line]
    return frames[-1] if frames else "(not in the saved lines)"


def _runs_line(runs: list[dict[str, Any]] | str) -> str:
    if isinstance(runs, str):
        return f"store unreadable: {runs}"
    counts = Counter(r["status"] + (f" ({r['error']})" if r["error"] else "") for r in runs)
    return ", ".join(f"{n} {what}" for what, n in counts.items()) or "none"


def described_machine() -> dict[str, Any]:
    try:
        return machine()
    except Exception as e:  # dlperf.system may be mid-change; the trials still count
        return {"error": f"{type(e).__name__}: {e}"}


def record(
    args: argparse.Namespace,
    where: dict[str, Any],
    calibrated: dict[str, Calibrated],
    trials: list[Trial],
    interrupted: bool,
) -> dict[str, Any]:
    return {
        "benchmark": "stress_signals",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": where,
        "settings": {
            "trials": args.trials,
            "seed": args.seed,
            "commands": args.commands,
            "grace_s": GRACE_S,
            "give_up_s": GIVE_UP_S,
            "delay_factor": DELAY_FACTOR,
            "forever_window_s": FOREVER_WINDOW_S,
            "second_share": SECOND_SHARE,
            "second_max_s": SECOND_MAX_S,
            "signalled": "dlperf's own pid",
        },
        "interrupted": interrupted,
        "commands": {
            name: {
                "window_s": c.window_s,
                "not_exercised": c.why_not,
                "calibration": asdict(c.calibration) if c.calibration else None,
            }
            for name, c in calibrated.items()
        },
        "totals": dict(Counter(p for t in trials for p in t.problems)),
        "trials": [asdict(t) for t in trials],
    }


# --- main -------------------------------------------------------------------------------------


def _commands(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in COMMANDS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown command(s) {', '.join(unknown) or '(none given)'}; "
            f"choose from {','.join(COMMANDS)}"
        )
    return list(dict.fromkeys(names))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--trials",
        type=int,
        default=300,
        help="signal trials in all, spread evenly over the commands",
    )
    parser.add_argument(
        "--commands",
        type=_commands,
        default=list(COMMANDS),
        help=f"comma list, of {','.join(COMMANDS)} (default: all)",
    )
    parser.add_argument("--seed", type=int, default=0, help="draws the delays and signals")
    parser.add_argument(
        "--json",
        type=Path,
        default=RESULTS / "stress_signals.json",
        help="where to save every trial (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    if args.trials < 0:
        parser.error("--trials must be at least 0")
    return args


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # so the trial under way is cleaned up, as on Ctrl-C


def main() -> int:
    args = parse_args()
    where = described_machine()  # first: it imports torch, seconds that Ctrl-C may cut
    plans = plan_trials(args.commands, args.trials, random.Random(args.seed))
    root = Path(tempfile.mkdtemp(prefix="dlperf-stress-"))
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        calibrated, trials, interrupted = execute(args.commands, plans, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # nothing left to clean up
    print(summary(args.commands, calibrated, trials))
    report = failures(args.commands, calibrated, trials)
    print(report or "no failures")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    saved = record(args, where, calibrated, trials, interrupted)
    args.json.write_text(json.dumps(saved, indent=2) + "\n")
    print(f"saved {args.json}")
    if interrupted:
        return 130
    return 1 if report else 0


if __name__ == "__main__":
    sys.exit(main())
