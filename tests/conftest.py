"""Shared fixtures: a fresh SQLite store per test, tiny experiments, and the CLI in-process."""

from __future__ import annotations

import functools
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from hypothesis import settings
from sqlalchemy import create_engine, make_url, text

from dlperf import stopping, timing
from dlperf.config import Experiment
from dlperf.distributed.contracts import ComputePhase, DdpStats, MainPhase, RankResult
from dlperf.experiment.run import run_experiment
from dlperf.progress import NullReporter
from dlperf.store import RunStore

REPO = Path(__file__).resolve().parents[1]
POSTGRES = os.environ.get("DLPERF_TEST_POSTGRES_URL")  # bash .ci/run starts a server
# The test modules that import ONNX Runtime themselves load it with its telemetry off, as
# dlperf loads it (dlperf.deploy): on, its uploader reached for Microsoft's collector from
# every test process that loaded it, and kept a device id in ~/.cache (round 52).
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")


# Every property test draws the same examples on every run (and keeps no example database):
# a suite that passes once passes every time, in CI as here. HYPOTHESIS_PROFILE=explore draws
# new ones, to look for failures on purpose.
settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("explore", max_examples=200)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


def pytest_configure(config: pytest.Config) -> None:
    """The suite sends SIGHUP to the commands it starts and expects them to stop. Started
    under `nohup`, pytest would hand every child SIGHUP ignored, which dlperf keeps, as
    documented (docs/faults.md, "Stop signals"), and five tests failed so: the default is put
    back here; the test of the `nohup` case ignores it for its own child."""
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (the Makefile's suites): one worker per core this process may use, at most 8.
    Each worker imports torch (about 0.5 GB) and many tests start processes of their own, so
    more workers than cores only queue; on a large host, 8 already finish in minutes."""
    return max(1, min(8, len(os.sched_getaffinity(0))))


@contextmanager
def python_child(script: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    """`python -c script *args` talking on pipes (text): a live writer that tests copy a store
    under, told to go on by a line on its stdin (`finished`). Killed at the end if it lives."""
    child = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdin is not None and child.stdout is not None
        yield child
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()


def finished(child: subprocess.Popen[str]) -> None:
    """Let `python_child` `child` finish (a line on its stdin) and check it exited 0."""
    assert child.stdin is not None
    child.stdin.write("\n")
    child.stdin.close()
    assert child.wait(timeout=300) == 0, child.stderr.read() if child.stderr else ""


def fresh_store_url(kind: str, tmp_path: Path, prefix: str) -> Iterator[str]:
    """The URL of a store nobody has opened: a new SQLite file, or a new PostgreSQL schema of
    its own (other tests drop the tables of the database's default schema), dropped after.
    Skips without a PostgreSQL server. For a fixture parametrized over "sqlite" and
    "postgresql" to yield from."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / f'{prefix}.db'}"
        return
    if not POSTGRES:
        pytest.skip("PostgreSQL store tests need a server: set DLPERF_TEST_POSTGRES_URL")
    schema = f"dlperf_{prefix}_{uuid.uuid4().hex[:8]}"
    admin = create_engine(POSTGRES)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        url = make_url(POSTGRES).update_query_dict({"options": f"-csearch_path={schema}"})
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def trained_run(root: Path) -> tuple[RunStore, int, Experiment]:
    """A one-epoch smallcnn run on the bundled digits, with its checkpoint, in `root`."""
    exp = Experiment.model_validate(
        {
            "model": {"name": "smallcnn"},
            "data": {"name": "digits"},
            "train": {"epochs": 1, "batch_size": 32, "lr": 0.05},
            "run": {"threads": 1, "warmup_steps": 2, "out_dir": str(root / "runs")},
        }
    )
    store = RunStore.open(f"sqlite:///{root / 'dlperf.db'}")
    result = run_experiment(exp, store)
    assert result["status"] == "finished" and result["test_accuracy"] > 0.5
    return store, result["run_id"], exp


@dataclass(frozen=True)
class TrainedRun:
    """The run trained_run makes, made once a session (see `trained_digits`)."""

    db: Path
    run_id: int
    exp: Experiment

    def copy_to(self, root: Path) -> tuple[RunStore, int, Experiment]:
        """What trained_run(root) returns, without training again: the store copied to
        root/dlperf.db, so that what a test adds or changes stays its own, and the
        experiment's run.out_dir in root. The run's checkpoint is not copied: a test that
        deletes the run's files trains its own run instead."""
        target = root / "dlperf.db"
        with closing(sqlite3.connect(self.db)) as source, closing(sqlite3.connect(target)) as to:
            source.backup(to)  # a consistent copy, its write-ahead log included
        exp = self.exp.model_copy(deep=True)
        exp.run.out_dir = str(root / "runs")
        return RunStore.open(f"sqlite:///{target}"), self.run_id, exp


@pytest.fixture(scope="session")
def trained_digits(tmp_path_factory: pytest.TempPathFactory) -> TrainedRun:
    """trained_run once for every test that takes this: a trained run and its checkpoint
    cost a training each time, and most tests only read them (`copy_to` gives each its own
    store)."""
    root = tmp_path_factory.mktemp("trained_digits")
    store, run_id, exp = trained_run(root)
    store.engine.dispose()  # closes the store's connections, its own included, before copies
    return TrainedRun(root / "dlperf.db", run_id, exp)


def rank_result(
    rank: int, steps: list[float], compute: list[float] | None, batch: int, *, world: int
) -> RankResult:
    """One rank (of `world`) of a scale point as dlperf.distributed.worker reports it, for
    tests that store scaling studies by hand."""
    ddp = {"avg_backward_comm_time": 1_000_000, "avg_forward_compute_time": 5_000_000}
    main = MainPhase(
        tuple(steps), sum(steps), batch * len(steps), 0.0, 400_000, ddp=DdpStats(ddp, 400_000)
    )
    phase = None if compute is None else ComputePhase(tuple(compute))
    return RankResult(rank, "node0", 100 + rank, world, main, phase)


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A SQLite store in tmp_path, also what DLPERF_DB points the CLI at."""
    url = f"sqlite:///{tmp_path / 'dlperf.db'}"
    monkeypatch.setenv("DLPERF_DB", url)
    monkeypatch.chdir(tmp_path)
    return url


@pytest.fixture
def store(db: str) -> RunStore:
    return RunStore.open(db)


@contextmanager
def file_size_limit(cap: int) -> Iterator[None]:
    """This process's soft file size limit at `cap` bytes for the block (its hard limit kept,
    so that the old one comes back): a write past it fails with EFBIG, SIGXFSZ ignored (as
    Python sets it at startup, made sure of here)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


@pytest.fixture
def fewer_bootstrap_fits(monkeypatch: pytest.MonkeyPatch) -> None:
    """A curve fit's bootstrap on 20 refits instead of 200 (nearly all of a fit's cost), for
    tests that check a fit's parameters, steps and commands, not its intervals
    (tests/converge/test_curve.py proves those), and for tests of `converge predict`'s
    ensemble form, which makes the refits and reads none of them. A module takes it for all
    its tests with `pytestmark = pytest.mark.usefixtures("fewer_bootstrap_fits")`."""
    from dlperf.converge import curve

    monkeypatch.setattr(curve, "analyse", functools.partial(curve.analyse, n_boot=20))


@pytest.fixture(autouse=True)
def _signal_handlers() -> Iterator[None]:
    """`main()` takes the stop signals (dlperf.stopping) in this process: pytest's own
    again after each test, so that Ctrl-C still stops the suite; and a stop one test sent
    itself is not the next one's (a SIGTERM left `requested()` true, and the next test in the
    worker that asked `errors.interrupted` got a KeyboardInterrupt)."""
    # The timers' signals too: main() takes those left at their default (a model's timer).
    saved = {
        sig: signal.getsignal(sig) for sig in (*stopping.STOP_SIGNALS, *stopping.TIMER_SIGNALS)
    }
    stopping._state = stopping._State()
    yield
    stopping._state = stopping._State()
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.fixture(autouse=True)
def _recursion_limit() -> Iterator[None]:
    """Python's recursion limit after each test as before it: a model file a test imports in
    this worker may raise it (dlperf keeps a raised one, as its error tells users to do), and
    the next test's depth check (dlperf.models.registry.too_deep) then judged a 201-deep model
    against that limit, not the default, and passed it (CI, round 35)."""
    before = sys.getrecursionlimit()
    yield
    sys.setrecursionlimit(before)


@pytest.fixture(autouse=True)
def _one_torch_thread() -> None:
    """Each test starts with torch on one thread, not on what the test before it in this
    worker left (a dlperf command with run.threads unset leaves all the usable cores set).
    Two OpenMP threads sharing a busy core wait for each other at every parallel region: a
    random-weight SSD built in 35.7 s so, in 2.4 s on one thread. A test or a command that
    sets its threads (run.threads, set_threads, torch.set_num_threads) gets what it sets."""
    torch.set_num_threads(1)


@pytest.fixture
def busy_core() -> Iterator[int]:
    """A neighbour that keeps one CPU busy (pinned to the lowest this test may use), started
    here and ended by its pid after the test; yields that CPU.

    It is not this process's descendant: dlperf counts the CPU time of the process it measures
    and its descendants as the work's own (dlperf.contention), so a hog started as a child of
    a test that runs a command in-process is counted as the command's, and the window reads as
    uncontended whenever no other process happens onto that core (a CI run did so). `sh`
    starts it in the background and exits, and it is reparented (to PID 1, or to a subreaper
    above the test: where the test process were one itself, the hog would be its child again).
    It ends itself when a pipe only this process writes to closes: after the test, or when the
    test's process ends, however it ends."""
    import subprocess

    cpu = min(os.sched_getaffinity(0))
    # Pinned before it starts, and yielded only once it spins: on a loaded host the Python
    # start-up alone can outlast a short timed window (a study measured 1.6% wait, not > 25%).
    spin = (
        "import os, sys, threading\n"
        "def orphaned():\n"
        "    os.read(int(sys.argv[1]), 1)\n"
        "    os._exit(0)\n"
        "threading.Thread(target=orphaned, daemon=True).start()\n"
        "print(os.getpid(), flush=True)\n"
        "while True: pass"
    )
    alive, keep = os.pipe()  # the write end is not inherited (PEP 446): only we hold it
    launcher = subprocess.Popen(
        ["sh", "-c", '"$0" -c "$1" "$2" &', sys.executable, spin, str(alive)],
        stdout=subprocess.PIPE,
        text=True,
        pass_fds=(alive,),
        preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
    )
    os.close(alive)
    assert launcher.stdout is not None
    try:
        assert launcher.wait(timeout=60) == 0
        assert launcher.stdout.readline().strip().isdigit()  # its pid: it spins
        yield cpu
    finally:
        os.close(keep)  # the hog's own way out: no pid to signal, none reused to hit
        assert launcher.stdout.read() == ""  # EOF: the hog's end of its stdout closed
        launcher.stdout.close()


def run_cli(
    args: Sequence[str], capture: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> CliResult:
    """`dlperf ARGS` through the real entry point (error table included) in this process: its
    exit code and what it printed (with capfd, its child processes' output too). sys.argv
    stays the command's until the test ends, for tests of what a model file did to it."""
    from dlperf.cli import main

    monkeypatch.setattr(sys, "argv", ["dlperf", *args])
    capture.readouterr()
    try:
        main()
        code = 0  # main() ends in SystemExit; in case it returns
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    captured = capture.readouterr()
    return CliResult(code, captured.out, captured.err)


@pytest.fixture
def cli(
    db: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., CliResult]:
    """Run `dlperf ARGS` in this process through the real entry point (error table included),
    against a fresh store in tmp_path."""
    return lambda *args: run_cli(args, capsys, monkeypatch)


@pytest.fixture(scope="session")
def empty_mlflow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An MLflow SQLite tracking store whose tables MLflow has made, made once a session: its
    migrations are most of a small export's time (2-8 s a store on a busy core). Tests export
    into copies (`mlflow_uri`); tests/test_exporters.py's test_mlflow_export_reads_back and
    the tests of new stores (break-it rounds 11, 22) still export into a new one."""
    tracking = pytest.importorskip("mlflow.tracking", reason="the mlflow extra")
    path = tmp_path_factory.mktemp("mlflow") / "mlflow.db"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
        env.setenv("DO_NOT_TRACK", "true")
        env.chdir(path.parent)  # MLflow's Default experiment keeps ./mlruns of where it is made
        tracking.MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def mlflow_uri(tmp_path: Path, empty_mlflow: Path) -> str:
    """The URI of this test's own copy of `empty_mlflow`, tmp_path/mlflow.db."""
    target = tmp_path / "mlflow.db"
    with closing(sqlite3.connect(empty_mlflow)) as source, closing(sqlite3.connect(target)) as to:
        source.backup(to)
    return f"sqlite:///{target}"


# One thread: on a busy 2-core machine (the suite's own) two threads of so small a model wait
# on each other at every step, 2-3x the CPU for the same run. Tests that set run.threads
# themselves do it with --set, which overrides it (TOML refuses a key given twice).
TINY = """
[model]
name = "smallcnn"
[data]
name = "digits"
[train]
epochs = {epochs}
batch_size = 32
lr = 0.05
[train.schedule]
kind = "cosine"
[target]
accuracy = 0.9
[run]
threads = 1
warmup_steps = 2
"""


@pytest.fixture
def tiny_exp(tmp_path: Path) -> Callable[..., Path]:
    """Write a small digits experiment and return its path; `extra` lands in [run]."""

    def write(epochs: int = 2, extra: str = "", name: str = "tiny.toml") -> Path:
        path = tmp_path / name
        path.write_text(TINY.format(epochs=epochs) + extra)
        return path

    return write


# 64 labelled training images in batches of 32: 2 steps per epoch.
DISTILL_EXP = """
[model]
name = "smallcnn"
[data]
name = "digits"
limit = 64
[train]
epochs = 1
batch_size = 32
lr = 0.05
[run]
threads = 1
warmup_steps = 1
out_dir = "{out}"
"""


def write_distill_exp(root: Path, extra: str = "") -> Path:
    """A tiny experiment for `dlperf distill` in `root` (its runs' files under root too)."""
    path = root / "dist.toml"
    path.write_text(DISTILL_EXP.format(out=root / "dlperf_runs") + extra)
    return path


class FakeEvent:
    """A CUDA event stand-in: `record` stamps the test's clock on the stream it is given,
    `elapsed_time` answers in milliseconds as torch.cuda.Event does, waits are counted."""

    clock = 0.0
    waits = 0
    streams: ClassVar[list[object]] = []

    def __init__(self, enable_timing: bool) -> None:
        assert enable_timing
        self.at: float | None = None

    def record(self, stream: object) -> None:
        self.at = FakeEvent.clock
        FakeEvent.streams.append(stream)

    def synchronize(self) -> None:
        FakeEvent.waits += 1

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.at is not None and end.at is not None, "both events must be recorded"
        return (end.at - self.at) * 1e3


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The device synchronisations dlperf.timing makes, none for real."""
    made: list[str] = []
    monkeypatch.setattr(timing, "synchronize", lambda device: made.append(str(device)))
    return made


@pytest.fixture
def fake_events(monkeypatch: pytest.MonkeyPatch, syncs: list[str]) -> list[str]:
    """CUDA events and streams replaced by FakeEvent; the host synchronisations made."""
    monkeypatch.setattr(FakeEvent, "clock", 0.0)
    monkeypatch.setattr(FakeEvent, "waits", 0)
    monkeypatch.setattr(FakeEvent, "streams", [])
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: f"stream of {device}")
    return syncs


def interrupt_wrapped_by_a_class_body() -> None:
    """A KeyboardInterrupt (Ctrl-C, or SIGTERM as main() raises it) that lands in an
    attribute's __set_name__ while a class is made, as importing torch._dynamo on an
    optimizer's first use does: Python 3.11 hands it on as a RuntimeError caused by it."""

    class Field:
        def __set_name__(self, owner: type, name: str) -> None:
            raise KeyboardInterrupt

    try:

        class Handler:
            callbacks = Field()

    except KeyboardInterrupt as e:  # Python 3.12 and later no longer wrap it
        raise RuntimeError(f"Error calling __set_name__ on 'Field' instance {e!r}") from e


class Logged(NullReporter):
    """A reporter that keeps what it is told to log (the library's progress goes nowhere)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, message: str) -> None:
        self.lines.append(message)
