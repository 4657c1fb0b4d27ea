"""The run store lost under a training run, on each backend: a SQLite file deleted, a
PostgreSQL server stopped. The run ends in one line (exit 1) that says what happened and how
to resume, and nothing it measured is lost. Also `runs delete --force` of a stopped
(SIGSTOP) run, which says at once what it waits for.

The PostgreSQL case stops a throwaway server of its own (initdb in a temporary directory, a
free port on 127.0.0.1), never CI's; it skips where no PostgreSQL binaries are installed.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path

import pytest

from dlperf.engine.hooks import HOOKS_ENV, StepEnd
from dlperf.paths import atomic_write
from dlperf.procs import proc_stat
from dlperf.store import RunStore
from tests.cli.test_runs import LIVE
from tests.conftest import TINY, CliResult
from tests.faults.test_store_faults import forked_dlperf
from tests.hooks import ROOT

DEADLINE_S = 120.0
HOLD_ENV = "DLPERF_TEST_HOLD_AT_STEP"
HOLD_STEP = 6  # epoch 2 of 4 steps each: the epoch-1 checkpoint is written
PG_BIN = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))


class HoldAt:
    """A hook (DLPERF_HOOKS=tests.faults.test_store_lost:HoldAt): when global step N is done,
    write MARKER and wait until GO exists, so the test acts at an exact step and the run then
    goes on. DLPERF_TEST_HOLD_AT_STEP="N:MARKER:GO"."""

    def __init__(self) -> None:
        step, marker, go = os.environ[HOLD_ENV].split(":")
        self.step, self.marker, self.go = int(step), Path(marker), Path(go)

    def start(self, trainer: str, model: object) -> None:
        pass

    def step_end(self, event: StepEnd) -> None:
        if event.step != self.step:
            return
        atomic_write(self.marker, f"{event.step}\n")
        deadline = time.monotonic() + DEADLINE_S
        while not self.go.exists() and time.monotonic() < deadline:
            time.sleep(0.05)


def error_lines(err: str) -> list[str]:
    """The command's error: one line, its last (progress lines of the epochs come before)."""
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and err.rstrip().endswith(lines[0]), err
    assert "Traceback" not in err, err
    return lines


def experiment(root: Path) -> Path:
    """3 epochs of 4 steps (128 digits in batches of 32), one thread, files under root."""
    path = root / "tiny.toml"
    text = TINY.format(epochs=3).replace('name = "digits"', 'name = "digits"\nlimit = 128')
    path.write_text(text + f'out_dir = "{root / "runs"}"\n')
    return path


def dlperf(db: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    full = {**os.environ, "PYTHONPATH": path, "DLPERF_DB": db, **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "dlperf", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full,
        cwd=ROOT,
    )


def finished(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=DEADLINE_S)
    finally:
        proc.kill()
        proc.wait()
    return proc.returncode, out, err


def held_run(db: str, root: Path) -> tuple[BaseProcess, Path]:
    """A `dlperf run` held at HOLD_STEP, a real process forked from this one (forked_dlperf:
    torch comes imported); returns it and the file that lets it go on. Its stderr goes to
    root/stderr.txt."""
    marker, go = root / "held", root / "go"
    hold = {HOOKS_ENV: f"{__name__}:HoldAt", HOLD_ENV: f"{HOLD_STEP}:{marker}:{go}"}
    args = ["run", str(experiment(root))]
    proc = forked_dlperf(root, args, root / "stderr.txt", {"DLPERF_DB": db, **hold})
    deadline = time.monotonic() + DEADLINE_S
    while not marker.exists():
        assert proc.is_alive(), (root / "stderr.txt").read_text()
        assert time.monotonic() < deadline, f"no {marker} within {DEADLINE_S} s"
        time.sleep(0.05)
    return proc, go


def let_go(proc: BaseProcess, go: Path, root: Path) -> tuple[int | None, str]:
    """Let the held run go on; its exit code and stderr once it has ended."""
    go.touch()
    try:
        proc.join(timeout=DEADLINE_S)
    finally:
        proc.kill()
        proc.join()
    return proc.exitcode, (root / "stderr.txt").read_text()


def resumed_to_the_end(cli: Callable[..., CliResult], db: str, run_id: int) -> None:
    """`dlperf run --resume` in this process (the `cli` fixture): what the test proves is the
    store it finds, and a process start is most of a resume's time on a busy core."""
    resumed = cli("--db", db, "run", "--resume", str(run_id))
    code, err = resumed.code, resumed.err
    assert code == 0, err
    store = RunStore.open(db)
    run = store.get_run(run_id)
    assert run.status == "finished", err
    assert [s for s, _ in store.metrics(run_id, "epoch/train_loss")] == [1, 2, 3]


@pytest.mark.faults
def test_a_store_file_deleted_mid_run_is_said_and_everything_is_saved(
    tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    """Before: the run "finished", exit 0, and was kept nowhere. Now the next write finds the
    file gone, the run ends exit 1 with one line naming the copy of everything the store
    held (the write that found it included), and that copy, moved back, resumes the run."""
    store_file = tmp_path / "dlperf.db"
    db = f"sqlite:///{store_file}"
    proc, go = held_run(db, tmp_path)
    for name in ("dlperf.db", "dlperf.db-wal", "dlperf.db-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    code, err = let_go(proc, go, tmp_path)
    assert code == 1, err
    lines = error_lines(err)
    assert lines[0].startswith(
        f"error: run store {store_file} was deleted or replaced while run 1 was recording; "
        "everything it held, run 1's metrics up to now included, is saved in "
    )
    saved = Path(lines[0].split(" is saved in ")[1].split(" (move it back")[0])
    assert saved.parent.name == "run-1" and saved.name == "dlperf.rescued-run1.db"
    assert f"(move it back to {store_file} to keep it, then `dlperf run --resume 1`)" in lines[0]
    assert not store_file.exists()  # nothing made a new, empty store in its place
    rescued = RunStore.open(f"sqlite:///{saved}")
    assert rescued.get_run(1).status == "lost"
    losses = [s for s, _ in rescued.metrics(1, "train/loss")]
    assert losses == list(range(1, len(losses) + 1)) and len(losses) > HOLD_STEP
    rescued.engine.dispose()
    shutil.move(saved, store_file)
    resumed_to_the_end(cli, db, 1)


@dataclass
class Server:
    """A PostgreSQL server of the test's own: `stop` and `start` it at will."""

    url: str
    ctl: Callable[..., None]

    def stop(self) -> None:
        self.ctl("stop", "-m", "fast")

    def start(self) -> None:
        self.ctl("start")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def throwaway_server() -> Iterator[Server]:
    if not PG_BIN:
        pytest.skip("no PostgreSQL binaries in /usr/lib/postgresql/*/bin: install postgresql")
    bin_dir = PG_BIN[-1].parent
    # initdb refuses root: run the server as the postgres user, in a directory it owns.
    as_user: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="dlperf-pg-"))
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(root)
            pytest.skip("initdb refuses root and there is no postgres user to run it as")
        os.chown(root, user.pw_uid, user.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    data = root / "data"
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"

    def ctl(*args: str) -> None:
        command = [*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(root / "log")]
        subprocess.run([*command, "-w", "-o", options, *args], check=True, capture_output=True)

    try:
        initdb = [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust"]
        subprocess.run([*as_user, *initdb, "--no-sync"], check=True, capture_output=True)
        ctl("start")
        yield Server(f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres", ctl)
    finally:
        subprocess.run(
            [*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.faults
def test_a_postgresql_server_stopped_mid_run_is_one_line_and_the_run_resumes(
    tmp_path: Path, throwaway_server: Server, cli: Callable[..., CliResult]
) -> None:
    """Before: a 224-line chained traceback (the failed write, then the failed mark). Now one
    line naming the store and how to resume; the run, left `running`, reads as lost once the
    server is back, and resumes to the end."""
    db = throwaway_server.url
    proc, go = held_run(db, tmp_path)
    throwaway_server.stop()
    code, err = let_go(proc, go, tmp_path)
    assert code == 1, err
    lines = error_lines(err)
    assert lines[0].startswith(
        f"error: run store postgresql+psycopg://postgres@127.0.0.1:{db.rsplit(':', 1)[1]} "
        "went away ("
    )
    assert lines[0].endswith(
        "while run 1 was recording (run 1 reads as lost now; once the store is back, "
        "continue it with `dlperf run --resume 1`)"
    )
    throwaway_server.start()
    assert RunStore.open(db).get_run(1).status == "lost"
    resumed_to_the_end(cli, db, 1)


def test_delete_force_of_a_stopped_run_says_at_once_what_it_waits_for(
    db: str, store: RunStore, cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    """Before: 62 s of silence, then the refusal. Now the first line on stderr, at once, says
    the process is stopped, how to continue it and how long the wait is; continued, it marks
    its run killed and the run goes."""
    child = subprocess.Popen([sys.executable, "-c", LIVE, db], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    deleter = None
    try:
        run = int(child.stdout.readline())
        os.kill(child.pid, signal.SIGSTOP)
        # a process waiting for a CPU takes the stop only once it runs: the delete must
        # find it stopped, as a user's Ctrl-Z leaves it
        deadline = time.monotonic() + 120
        while (stat := proc_stat(child.pid)) is None or stat[0] not in "Tt":
            assert time.monotonic() < deadline, "the child never stopped"
            time.sleep(0.01)
        deleter = dlperf(db, "runs", "delete", str(run), "--yes", "--force")
        assert deleter.stderr is not None
        said = deleter.stderr.readline()  # blocks until the line comes: no timer to race
        assert said == (
            f"warning: pid {child.pid} is stopped (SIGSTOP, Ctrl-Z) until kill -CONT "
            f"{child.pid}; waiting up to 60 s for it to mark run {run} killed\n"
        )
        os.kill(child.pid, signal.SIGCONT)
        code, out, err = finished(deleter)
        assert code == 0, err
        assert out.splitlines() == [
            f"stopped run {run}: pid {child.pid} marked it killed",
            f"deleted run {run}",
        ]
        assert child.wait(timeout=DEADLINE_S) == 143
    finally:
        for proc in (child, deleter):
            if proc is not None:
                proc.kill()
                proc.wait()
        child.stdout.close()
    assert store.list_runs() == []
