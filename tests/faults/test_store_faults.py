"""Faults around the run store: two stores in one directory, damaged or foreign checkpoints,
a read-only directory, a full disk, eight writers at once, and SIGTERM to commands that
record runs.

The read-only directory is a read-only bind mount and the full disk a small tmpfs (root
ignores file modes, so chmod proves nothing); where mounting is refused those tests skip
and say so. Every mount is undone in a `finally`.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.process import BaseProcess
from pathlib import Path

import numpy as np
import pytest
import torch

from dlperf.config import Experiment
from dlperf.deploy.export import from_run
from dlperf.engine import checkpoint
from dlperf.errors import UserError
from dlperf.experiment.run import run_experiment
from dlperf.procs import this_process
from dlperf.store import RunStore
from tests.conftest import TINY, CliResult, fresh_store_url
from tests.forked import dlperf_process
from tests.hooks import PAUSE_ENV, SAVE_SIGNAL_ENV, hook_env, install
from tests.sweep.test_sweep import EVENT_S, sweep_json, wait_for, write_sweep

Cli = Callable[..., CliResult]

POSTGRES = os.environ.get("DLPERF_TEST_POSTGRES_URL")
# Generous: the machine is shared and busy, and a workload below cannot finish before it.
DEADLINE_S = 300


def one_line(result: CliResult, code: int, *parts: str) -> None:
    """Exit `code` and one line of error, the last on stderr (progress may come before it)."""
    assert result.code == code, (result.out, result.err)
    lines = result.err.splitlines()
    assert [line for line in lines if line.startswith("error: ")] == lines[-1:], result.err
    assert "Traceback" not in result.err
    for part in parts:
        assert part in lines[-1], result.err


def digits(seed: int = 0) -> Experiment:
    """One epoch of smallcnn on the bundled digits; checkpoints under ./dlperf_runs."""
    return Experiment.model_validate(
        {
            "model": {"name": "smallcnn"},
            "data": {"name": "digits"},
            "train": {"epochs": 1, "batch_size": 64, "lr": 0.05},
            "run": {"threads": 1, "warmup_steps": 2, "seed": seed},
        }
    )


def checkpoint_of(store: RunStore, run_id: int) -> Path:
    [artifact] = [a for a in store.artifacts(run_id) if a["kind"] == "checkpoint"]
    return Path(artifact["path"])


# --- whose checkpoint -------------------------------------------------------------------------


def test_two_stores_in_one_directory_keep_their_own_weights(
    cli: Cli, store: RunStore, tmp_path: Path
) -> None:
    """Run 1 of each of two stores, trained from the same directory with the same out_dir:
    each keeps its own checkpoint, export reads the right one, and a checkpoint copied from
    the other store is refused."""
    other = RunStore.open(str(tmp_path / "other.db"))
    mine = run_experiment(digits(seed=0), store)["run_id"]
    theirs = run_experiment(digits(seed=1), other)["run_id"]
    assert mine == theirs == 1 and store.id != other.id
    path, other_path = checkpoint_of(store, 1), checkpoint_of(other, 1)
    assert path.parent.parent == tmp_path / "dlperf_runs" / store.id
    assert other_path.parent.parent == tmp_path / "dlperf_runs" / other.id

    exported = from_run(store, 1).model.state_dict()
    own = torch.load(path, weights_only=True)["model"]
    foreign = torch.load(other_path, weights_only=True)["model"]
    assert all(torch.equal(exported[k], own[k]) for k in own)
    assert not all(torch.equal(exported[k], foreign[k]) for k in foreign)

    shutil.copy(other_path, path)
    refused = f"is the checkpoint of run 1 in store {other.id}"
    one_line(cli("export", "1", "--out", str(tmp_path / "m.onnx")), 2, str(path), refused)
    assert not (tmp_path / "m.onnx").exists()
    store.finish_run(1, "killed", error="interrupted")
    one_line(cli("run", "--resume", "1"), 2, refused, f"not of run 1 in store {store.id}")
    assert store.get_run(1).status == "killed"  # refused before it was marked running


def _real_checkpoint(path: Path) -> None:
    owner = checkpoint.Owner("0123456789ab", 1, "cafe")
    checkpoint.save(checkpoint.Slot(path, owner), {"model": {"w": torch.ones(64, 64)}})


def _garbage(path: Path) -> None:
    path.write_bytes(bytes(range(256)) * 16)


def _truncated(path: Path) -> None:
    _real_checkpoint(path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _foreign_zip(path: Path) -> None:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("data.pkl", "not a pickle")


def _state_dict(path: Path) -> None:
    torch.save(torch.nn.Linear(4, 2).state_dict(), path)


def _pickled_object(path: Path) -> None:
    # A pickle that would build an object (and could run code) when fully unpickled.
    torch.save({"model": {}, "owner": {}, "rng": Path("/etc")}, path)


def _older_dlperf(path: Path) -> None:
    # As dlperf wrote them before checkpoints named their run: NumPy's RNG state as an array.
    torch.save({"model": {}, "rng": {"numpy": np.random.get_state()}}, path)


@pytest.mark.parametrize(
    ("write", "message"),
    [
        (_garbage, "truncated or not written by dlperf"),
        (_truncated, "truncated or not written by dlperf"),
        (_foreign_zip, "truncated or not written by dlperf"),
        (_pickled_object, "holds a value torch's safe loader refuses (pathlib.PosixPath)"),
        (_older_dlperf, "an older dlperf's checkpoint, which names no run, is refused too"),
        (_state_dict, "is not a dlperf run checkpoint: it names no run"),
        (_real_checkpoint, "is the checkpoint of run 1 in store 0123456789ab (config cafe)"),
    ],
)
def test_damaged_or_foreign_checkpoints_are_refused_in_one_line(
    cli: Cli, store: RunStore, tmp_path: Path, write: Callable[[Path], None], message: str
) -> None:
    """Whatever lies where run 1's checkpoint should be, resume and export refuse it with one
    line (exit 2), before doing anything."""
    path = tmp_path / "checkpoint.pt"
    write(path)
    run_id = store.create_run("stopped", "run", digits().to_dict(), "cafe")
    store.add_artifact(run_id, "checkpoint", path)
    store.finish_run(run_id, "killed", error="interrupted")
    with pytest.raises(UserError, match="checkpoint"):
        checkpoint.load(path, checkpoint.Owner(store.id, run_id, "cafe"))
    one_line(cli("export", str(run_id), "--out", str(tmp_path / "m.onnx")), 2, message)
    one_line(cli("run", "--resume", str(run_id)), 2, message)
    assert store.get_run(run_id).status == "killed"
    assert not (tmp_path / "m.onnx").exists()


# --- a read-only directory, a full disk -------------------------------------------------------


@contextmanager
def mounted(*args: str, target: Path) -> Iterator[Path]:
    """`mount ARGS TARGET`, skipping the test where mounting is refused; always unmounted."""
    target.mkdir(parents=True, exist_ok=True)
    if shutil.which("mount") is None:
        pytest.skip("no mount command here")
    done = subprocess.run(["mount", *args, str(target)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"mounting is refused here (needs CAP_SYS_ADMIN): {done.stderr.strip()}")
    try:
        yield target
    finally:
        # Lazy: detached at once even while a store's connection in this process holds a file.
        subprocess.run(["umount", "--lazy", str(target)], check=True)


@contextmanager
def read_only(source: Path, target: Path) -> Iterator[Path]:
    """`source`, seen read-only at `target` through a bind mount."""
    with mounted("--bind", str(source), target=target):
        done = subprocess.run(
            ["mount", "-o", "remount,ro,bind", str(target)], capture_output=True, text=True
        )
        if done.returncode != 0:
            pytest.skip(f"read-only remounting is refused here: {done.stderr.strip()}")
        yield target


@contextmanager
def read_only_file(path: Path) -> Iterator[Path]:
    """The file `path` made read-only by a read-only bind mount over itself (its directory
    stays writable), as `chattr +i` or a read-only file system would; always unmounted."""
    done = subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"mounting is refused here (needs CAP_SYS_ADMIN): {done.stderr.strip()}")
    try:
        done = subprocess.run(
            ["mount", "-o", "remount,ro,bind", str(path)], capture_output=True, text=True
        )
        if done.returncode != 0:
            pytest.skip(f"read-only remounting is refused here: {done.stderr.strip()}")
        yield path
    finally:
        subprocess.run(["umount", "--lazy", str(path)], check=True)


def fill(directory: Path) -> Path:
    """Fill the file system under `directory` to its last byte; returns the filler file."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(bytes(4096))
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
    return filler


def earlier_run(store: RunStore) -> int:
    run_id = store.create_run("earlier", "run", {"n": 1})
    store.log_metrics(run_id, [("train/loss", s, 1.0 / s) for s in range(1, 201)])
    store.finish_run(run_id, "finished", summary={"ok": True})
    return run_id


def assert_intact(db: Path, store_id: str, run_id: int) -> None:
    """The store opens, keeps its id, and holds the earlier run as it was, and nothing else."""
    reopened = RunStore.open(str(db))
    try:
        assert reopened.id == store_id
        assert [r.id for r in reopened.list_runs()] == [run_id]
        assert reopened.get_run(run_id).summary == {"ok": True}
        assert reopened.metrics(run_id, "train/loss") == [(s, 1.0 / s) for s in range(1, 201)]
        assert reopened.metric_keys(run_id) == ["train/loss"]
    finally:
        reopened.engine.dispose()


def test_a_store_in_a_read_only_directory(
    cli: Cli, tmp_path: Path, tiny_exp: Callable[..., Path]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    store = RunStore.open(str(data / "dlperf.db"))
    run_id = earlier_run(store)
    store.engine.dispose()  # closed, as a finished command leaves it
    with read_only(data, tmp_path / "ro") as ro:
        result = cli("--db", str(ro / "dlperf.db"), "run", str(tiny_exp(epochs=1)))
    one_line(result, 2, "cannot open run store", "is its directory writable?")
    assert_intact(data / "dlperf.db", store.id, run_id)


def test_a_store_file_that_cannot_be_written(
    cli: Cli, tmp_path: Path, tiny_exp: Callable[..., Path]
) -> None:
    """A store file the OS will not let dlperf write: `runs tag` and `run` are refused in
    one line (exit 2), and the store is left as it was. Before: 82 and 97 lines of
    traceback."""
    path = tmp_path / "data" / "dlperf.db"
    path.parent.mkdir()
    store = RunStore.open(str(path))
    run_id = earlier_run(store)
    store.engine.dispose()
    with read_only_file(path):
        for args in (["runs", "tag", str(run_id), "a=b"], ["run", str(tiny_exp(epochs=1))]):
            result = cli("--db", str(path), *args)
            one_line(result, 2, f"cannot write run store sqlite:///{path}", "read-only")
    assert_intact(path, store.id, run_id)


def test_artifacts_in_a_read_only_directory_refuse_the_run(
    cli: Cli, store: RunStore, tmp_path: Path, tiny_exp: Callable[..., Path]
) -> None:
    out_dir = tmp_path / "runs"
    out_dir.mkdir()
    with read_only(out_dir, tmp_path / "ro") as ro:
        result = cli("run", str(tiny_exp(epochs=1, extra=f'out_dir = "{ro}"\n')))
    one_line(result, 2, f"cannot use {ro / store.id}", "Read-only file system")
    assert store.list_runs() == []  # bad input is refused before a run is recorded


def test_a_store_on_a_full_disk(cli: Cli, tmp_path: Path, tiny_exp: Callable[..., Path]) -> None:
    with mounted("-t", "tmpfs", "-o", "size=1m", "tmpfs", target=tmp_path / "small") as small:
        db = small / "dlperf.db"
        store = RunStore.open(str(db))
        run_id = earlier_run(store)
        filler = fill(small)
        with pytest.raises(OSError) as full:
            store.log_metrics(run_id, [("val/loss", s, 0.5) for s in range(20_000)])
        assert full.value.errno == errno.ENOSPC
        store.engine.dispose()
        result = cli("--db", str(db), "run", str(tiny_exp(epochs=1)))
        assert result.err == f"error: cannot use {db}: No space left on device\n"
        assert result.code == 1
        filler.unlink()
        assert_intact(db, store.id, run_id)


def test_checkpoints_on_a_full_disk(
    cli: Cli, store: RunStore, tmp_path: Path, tiny_exp: Callable[..., Path]
) -> None:
    """The run whose checkpoint does not fit fails in one line (exit 1), leaves no partial
    file, and the earlier run's checkpoint on the same disk still loads."""
    with mounted("-t", "tmpfs", "-o", "size=1m", "tmpfs", target=tmp_path / "small") as small:
        exp = str(tiny_exp(epochs=1, extra=f'out_dir = "{small}"\n'))
        assert cli("run", exp).code == 0
        first = checkpoint_of(store, 1)
        fill(small)
        one_line(cli("run", exp), 1, f"cannot use {small / store.id / 'run-2'}", "No space left")
        failed = store.get_run(2)
        assert failed.status == "failed" and "No space left on device" in failed.error
        assert sorted(p.name for p in (small / store.id).rglob("*") if p.is_file()) == [
            "checkpoint.pt"
        ]
        owner = checkpoint.Owner(store.id, 1, store.get_run(1).config_hash)
        assert checkpoint.load(first, owner)["progress"]["epoch"] == 1


# --- eight writers at once --------------------------------------------------------------------

WRITERS, RUNS, BATCHES, ROWS = 8, 2, 10, 250
# Writers at once in test_four_processes_write_one_store_at_once: a lock is met, or a row
# lost, between any two writers whose transactions overlap; four keep every writer's
# batches overlapping another's (each waits at the start gate), at half the interpreters.
SHARED_WRITERS = 4
WRITER = textwrap.dedent(
    """
    import sys

    from dlperf.store import RunStore

    url, name, runs, batches, rows = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
    store = RunStore.open(url)
    print("open", flush=True)
    sys.stdin.readline()  # the start gate: every writer is open before any writes
    for r in range(runs):
        with store.new_run(f"{name}.{r}", "run", {"writer": name}) as record:
            for b in range(batches):
                batch = [("x", b * rows + k, float(k)) for k in range(rows)]
                store.log_metrics(record.id, batch)
        print(record.id, flush=True)
    """
)


OPENER = textwrap.dedent(
    """
    import sys
    import time

    from dlperf.store import RunStore

    for line in sys.stdin:  # a new store and the moment every opener opens it
        url, at = line.split()
        time.sleep(max(0.0, float(at) - time.time()))
        try:
            RunStore.open(url).engine.dispose()
            print("ok", flush=True)
        except Exception as e:
            print(f"{type(e).__name__}: {e}".replace("\\n", " "), flush=True)
    """
)


@pytest.mark.faults  # over 10 s under load: make test-faults
def test_processes_opening_a_new_sqlite_store_at_once_never_meet_a_lock(tmp_path: Path) -> None:
    """Switching a new SQLite file to WAL upgrades a read lock to a write lock, where SQLite
    does not wait however long its busy timeout: before the store retried it, about one in
    twenty of eight simultaneous opens failed with "database is locked"."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPENER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for _ in range(WRITERS)
    ]
    try:
        for round_ in range(16):
            url = f"sqlite:///{tmp_path / f'new{round_}.db'}"
            at = time.time() + 0.25  # provokes the race; passing never depends on it
            for proc in procs:
                proc.stdin.write(f"{url} {at}\n")
                proc.stdin.flush()
            assert [proc.stdout.readline().strip() for proc in procs] == ["ok"] * WRITERS, url
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


@pytest.fixture(params=["sqlite", "postgresql"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store nobody has opened yet (tests.conftest.fresh_store_url)."""
    yield from fresh_store_url(request.param, tmp_path, "faults")


@pytest.mark.faults  # over 10 s under load: make test-faults
def test_four_processes_write_one_store_at_once(shared_url: str) -> None:
    """Four processes open a new store together, then each records runs and logs thousands
    of metric rows in batches, all at once: no row is lost and no writer meets a lock. (Eight
    before: the race is between any two overlapping writers, SHARED_WRITERS.)"""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, shared_url, f"w{i}", str(RUNS), str(BATCHES), str(ROWS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(SHARED_WRITERS)
    ]
    try:
        for proc in procs:
            assert proc.stdout.readline() == "open\n", proc.communicate(timeout=DEADLINE_S)[1]
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outputs = [proc.communicate(timeout=DEADLINE_S) for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0 and "locked" not in err, err
    run_ids = [int(line) for out, _ in outputs for line in out.split()]
    assert len(set(run_ids)) == SHARED_WRITERS * RUNS
    store = RunStore.open(shared_url)
    try:
        assert {r.status for r in store.list_runs()} == {"finished"}
        assert {len(store.metrics(i, "x")) for i in run_ids} == {BATCHES * ROWS}
    finally:
        store.engine.dispose()


# --- SIGTERM ----------------------------------------------------------------------------------


def _until(ready: Callable[[], bool], proc: BaseProcess, err: Path) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not ready():
        assert proc.is_alive(), f"exited {proc.exitcode}: {err.read_text()}"
        assert time.monotonic() < deadline, f"not ready in {DEADLINE_S} s: {err.read_text()}"
        time.sleep(0.1)


def _running(store: RunStore) -> Callable[[], bool]:
    """Ready once the command's run is recorded and running."""
    return lambda: [r.status for r in store.list_runs()] == ["running"]


EXPERIMENT = '[data]\nname = "digits"\n[train]\nepochs = 1000\n[run]\nthreads = 1\n'


Ready = Callable[[], bool]
Command = tuple[list[str], dict[str, str], Ready]  # arguments, environment, ready to stop


def _demo(tmp_path: Path, store: RunStore) -> Command:
    # Paused inside its first run's training loop: it cannot finish, whatever the load.
    marker = tmp_path / "paused"
    return ["demo"], hook_env("pause_at_step", f"5:{marker}"), marker.exists


def _predict(tmp_path: Path, store: RunStore) -> Command:
    args = ["predict", "smallcnn", "--device", "V100", "--input", "1,8,8", "--measure"]
    return [*args, "--reps", "1000000000"], {}, _running(store)


def _staleness(tmp_path: Path, store: RunStore) -> Command:
    (tmp_path / "exp.toml").write_text(EXPERIMENT)
    return ["staleness", "--train", "exp.toml", "--learners", "2"], {}, _running(store)


@pytest.mark.faults  # over 10 s under load: make test-faults
@pytest.mark.parametrize(
    ("command", "sig"),
    [
        # demo is stopped by SIGHUP alone: SIGTERM and SIGHUP take the one stop handler
        # (stopping.STOP_SIGNALS), and SIGTERM is sent to predict and staleness.
        (_predict, signal.SIGTERM),
        (_staleness, signal.SIGTERM),
        (_demo, signal.SIGHUP),  # a closed terminal: before, exit -1 and the run left running
    ],
    ids=["_predict", "_staleness", "_demo-SIGHUP"],
)
def test_sigterm_marks_every_run_killed(
    store: RunStore,
    db: str,
    tmp_path: Path,
    command: Callable[[Path, RunStore], Command],
    sig: signal.Signals,
) -> None:
    """SIGTERM (or SIGHUP) to a real process while it records a run: exit 128 + the signal
    (143, 129), and every run it made is `killed`, none left `running`. The process is
    forked from this one (forked_dlperf) and runs dlperf's entry point, which takes the
    signals there as a `python -m dlperf` process does."""
    args, env, ready = command(tmp_path, store)
    err = tmp_path / "stderr.txt"
    proc = forked_dlperf(tmp_path, ["--db", db, *args], err, env)
    try:
        _until(ready, proc, err)
        assert proc.pid is not None
        os.kill(proc.pid, sig)
        proc.join(timeout=DEADLINE_S)
        if proc.exitcode is None:
            os.kill(proc.pid, signal.SIGABRT)  # faulthandler writes every thread's stack
            proc.join(timeout=DEADLINE_S)
            pytest.fail(f"still running {DEADLINE_S} s after {sig.name}:\n{err.read_text()}")
        assert proc.exitcode == 128 + sig, err.read_text()
    finally:
        proc.kill()
        proc.join()
    assert "Traceback" not in err.read_text()
    runs = store.list_runs()
    assert runs and {(r.status, r.error) for r in runs} == {("killed", "interrupted")}


# --- two commands on one run -------------------------------------------------------------------

RESUMED = TINY.format(epochs=3)  # 20 steps per epoch at batch 64
STEPS = 60


def forked_dlperf(
    root: Path, args: list[str], log: Path, env: dict[str, str] | None = None
) -> BaseProcess:
    """A real `dlperf ARGS` process in `root`, started (not waited for), with `env` added to
    its environment (the pause hook's variable only if given there); stdout to /dev/null,
    stderr to `log`. Forked by tests.forked's server, with torch, torch._dynamo and the entry
    point imported once: the tests need a live process of its own pid, signals and exit
    code, and a `python -m dlperf` start was most of their time. Where a fresh interpreter is
    what is tested (its imports, its streams as it starts), start one."""
    return dlperf_process(args, log, cwd=root, env={PAUSE_ENV: "", **(env or {})})


def _dlperf(
    tmp_path: Path, db: str, args: list[str], pause_at: int | None, log: str
) -> BaseProcess:
    """A real `dlperf ARGS` process in tmp_path (forked_dlperf), parking at step `pause_at`
    (if given) and writing that marker file; stderr goes to `log`."""
    pause = (
        {}
        if pause_at is None
        else hook_env("pause_at_step", f"{pause_at}:{tmp_path / f'paused-{log}'}")
    )
    return forked_dlperf(tmp_path, ["--db", db, *args], tmp_path / log, pause)


def _parked(tmp_path: Path, db: str, args: list[str], step: int, log: str) -> BaseProcess:
    proc = _dlperf(tmp_path, db, args, step, log)
    deadline = time.monotonic() + DEADLINE_S
    while not (tmp_path / f"paused-{log}").exists():
        assert proc.is_alive(), f"exited {proc.exitcode}: {(tmp_path / log).read_text()}"
        assert time.monotonic() < deadline, f"not parked in {DEADLINE_S} s"
        time.sleep(0.1)
    return proc


def _ended(proc: BaseProcess) -> int | None:
    """The process's exit code once it has ended, within DEADLINE_S."""
    proc.join(timeout=DEADLINE_S)
    return proc.exitcode


def _stopped(proc: BaseProcess, sig: signal.Signals = signal.SIGINT) -> int | None:
    try:
        assert proc.pid is not None
        os.kill(proc.pid, sig)
        return _ended(proc)
    finally:
        proc.kill()
        proc.join()


@pytest.mark.faults
def test_a_run_has_one_writer(
    cli: Cli, shared_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second `dlperf run --resume` of a run that a live process resumed is refused in one
    line (exit 2) and writes nothing; so is `runs delete` without --force. Once the first
    stops, the run is taken over and ends with every step and epoch stored once; on SQLite
    and PostgreSQL. Before, both resumes trained and exited 0, and the run held 320 loss
    rows for 240 steps."""
    (tmp_path / "exp.toml").write_text(RESUMED)
    # The run to resume, trained in this process and stopped by SIGINT as its epoch-2
    # checkpoint is written (tests/faults/test_break_it_15_phases.py stops one so): what
    # matters is the live process that resumes it next, not the one that made it.
    save = checkpoint.save  # the hook wraps it in this process: put back after the run
    install(monkeypatch, "signal_at_save", "2:INT")
    stopped = cli("--db", shared_url, "run", "exp.toml", "--set", "train.batch_size=64")
    monkeypatch.setattr(checkpoint, "save", save)
    for name in ("DLPERF_HOOKS", SAVE_SIGNAL_ENV):
        monkeypatch.delenv(name)
    assert stopped.code == 130, stopped.err
    first = _parked(tmp_path, shared_url, ["run", "--resume", "1"], 45, "second.txt")
    try:
        # The second command in this process: the first is the other process that matters.
        second = cli("--db", shared_url, "run", "--resume", "1")
        assert second.code == 2
        err = second.err
        assert err == (
            f"error: run 1 is running in pid {first.pid} on {this_process()['host']}: one "
            "process writes a run at a time (wait for it to end, or stop it; a run whose "
            "process is gone can be resumed)\n"
        )
        deleted = cli("--db", shared_url, "runs", "delete", "1", "--yes")
        one_line(deleted, 2, f"run 1 (pid {first.pid} on ")
    finally:
        assert _stopped(first) == 130
    # The takeover in this process: both others are gone, and no signal reaches it.
    last = cli("--db", shared_url, "run", "--resume", "1")
    assert last.code == 0, last.err
    store = RunStore.open(shared_url)
    try:
        assert store.get_run(1).status == "finished"
        assert [s for s, _ in store.metrics(1, "train/loss")] == list(range(1, STEPS + 1))
        assert [e for e, _ in store.metrics(1, "val/acc1")] == [1, 2, 3]
    finally:
        store.engine.dispose()


@pytest.mark.faults
def test_runs_delete_force_stops_a_training_run_first(
    cli: Cli, store: RunStore, db: str, tmp_path: Path
) -> None:
    """Before, the delete went through while the run trained on, which then printed its
    summary and exited 0 with nothing stored."""
    (tmp_path / "exp.toml").write_text(RESUMED)
    proc = _parked(tmp_path, db, ["run", "exp.toml"], 5, "run.txt")
    try:
        forced = cli("runs", "delete", "1", "--yes", "--force")
        assert forced.code == 0, forced.err
        assert forced.out.startswith(f"stopped run 1: pid {proc.pid} marked it killed\n")
        assert _ended(proc) == 143  # stopped by SIGTERM
    finally:
        proc.kill()
        proc.join()
    assert store.list_runs() == []
    assert "Traceback" not in (tmp_path / "run.txt").read_text()


@pytest.mark.faults
def test_two_sweeps_of_one_study_run_each_point_once(
    cli: Cli, tmp_path: Path, db: str, store: RunStore
) -> None:
    """A second sweep started while the first trains point 1 leaves that point to it and
    runs the others; once the first is gone (SIGINT), a rerun takes point 1 over. Before,
    both sweeps ran every point (6 runs for 3 points)."""
    path = write_sweep(tmp_path, '[grid]\n"train.lr" = [0.1, 0.05, 0.02]\n')
    park = hook_env("pause_at_step", f"2:{tmp_path / 'parked'}")
    err = tmp_path / "stderr.txt"
    first = forked_dlperf(tmp_path, ["sweep", str(path)], err, {"DLPERF_DB": db, **park})
    try:
        wait_for(lambda: (tmp_path / "parked").exists(), "point 1 to park at step 2")
        second = cli("sweep", str(path), "--json")
        assert second.code == 0, second.err
        assert f"point 1/3 skipped: pid {first.pid} on " in second.err
        assert first.pid is not None
        os.kill(first.pid, signal.SIGINT)
        first.join(timeout=EVENT_S)
        assert first.exitcode == 130, err.read_text()
    finally:
        first.kill()
        first.join()
    runs = {(r.config["train"]["lr"], r.status) for r in store.list_runs()}
    assert runs == {(0.1, "killed"), (0.05, "finished"), (0.02, "finished")}
    rerun = sweep_json(cli, str(path))
    assert [(p["params"]["train.lr"], p["skipped"]) for p in rerun["points"]] == [
        (0.1, False),
        (0.05, True),
        (0.02, True),
    ]
    finished = [r.config["train"]["lr"] for r in store.list_runs() if r.status == "finished"]
    assert sorted(finished) == [0.02, 0.05, 0.1] and len(store.list_runs()) == 4


# --- a damaged store --------------------------------------------------------------------------

PAGE = 4096  # SQLite's default page size
RUNS_IN_STORE = 30


def damage(path: Path) -> dict[int, dict]:
    """Fill a store with 30 finished runs of 200 metric rows each, close it, then overwrite
    pages 14-17 with random bytes (seeded) as `dd if=/dev/urandom of=dlperf.db bs=4096
    seek=13 count=4 conv=notrunc` does. Returns the runs as they were, with their metrics."""
    store = RunStore.open(str(path))
    for i in range(RUNS_IN_STORE):
        with store.new_run(f"r{i}", "run", {"train": {"lr": 0.1}, "pad": "x" * 1000}) as run:
            store.log_metrics(run.id, [("train/loss", s, 1.0 / (s + 1)) for s in range(200)])
            run.summary = {"test_accuracy": i / 100}
    runs = {
        r.id: {**r.to_dict(), "loss": store.metrics(r.id, "train/loss")} for r in store.list_runs()
    }
    with store.engine.connect() as conn:  # every page in the file, none left in its WAL
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    store.engine.dispose()
    assert path.stat().st_size >= 17 * PAGE
    with open(path, "r+b") as f:
        f.seek(13 * PAGE)
        f.write(random.Random(0).randbytes(4 * PAGE))
    return runs


def untouched(path: Path, before: bytes) -> None:
    """Nothing was written into the damaged store: neither its file nor its WAL."""
    wal = path.with_name(path.name + "-wal")
    assert path.read_bytes() == before
    assert not wal.exists() or wal.stat().st_size == 0


@pytest.mark.parametrize(
    "args",
    [
        ["runs", "list"],
        ["runs", "show", "3"],
        ["doctor"],
        ["report", "--out", "site"],
        ["run", "{exp}"],
        ["runs", "tag", "3", "a=1"],
    ],
    ids=" ".join,
)
def test_a_damaged_store_is_refused_in_one_line_and_never_written(
    cli: Cli, db: str, tmp_path: Path, tiny_exp: Callable[..., Path], args: list[str]
) -> None:
    """Before, these printed a 66-90 line traceback (exit 1), or read what they could and
    exited 0, and `run` recorded a new run into the damaged file."""
    path = tmp_path / "dlperf.db"
    damage(path)
    before = path.read_bytes()
    exp = str(tiny_exp(epochs=1))
    result = cli(*[a.format(exp=exp) for a in args])
    one_line(result, 2, f"run store {path} is damaged (quick_check: ", "restore it from a backup")
    assert f"`dlperf --db {path} runs repair NEW.db`" in result.err
    untouched(path, before)


def test_damage_met_by_a_query_is_one_line_and_stops_writes(tmp_path: Path) -> None:
    """A store damaged after it was opened (quick_check passed then): the query that meets a
    malformed page raises the same one-line error, and the store is not written again."""
    path = tmp_path / "dlperf.db"
    store = RunStore.open(str(path))
    runs = damage(path)
    store.engine.dispose()  # no page read before the damage stays cached
    with pytest.raises(UserError, match=r"is damaged \(database disk image is malformed\)"):
        for run_id in runs:
            store.get_run(run_id)
            store.metrics(run_id, "train/loss")
    before = path.read_bytes()
    with pytest.raises(UserError, match="is damaged"):
        store.create_run("after", "run", {})
    store.engine.dispose()
    untouched(path, before)


def test_a_header_damaged_after_opening_is_one_line(tmp_path: Path) -> None:
    """SQLite calls a file whose first page is garbage "not a database": bad input when a
    command is pointed at such a file (tests/faults/test_bad_inputs.py), a damaged store
    when it opened as one before."""
    path = tmp_path / "dlperf.db"
    store = RunStore.open(str(path))
    run_id = store.create_run("a", "run", {})
    with store.engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    store.engine.dispose()
    with open(path, "r+b") as f:
        f.write(random.Random(0).randbytes(PAGE))
    with pytest.raises(UserError, match=r"is damaged \(file is not a database\)"):
        store.get_run(run_id)
    with pytest.raises(UserError, match=r"is damaged \(file is not a database\)"):
        RunStore.open(str(path))  # this process knows the file as a store


def test_repair_copies_every_readable_row_into_a_new_store(
    cli: Cli, db: str, tmp_path: Path
) -> None:
    """`runs repair` steps over the damaged pages: the new store passes quick_check, every run
    in it is exactly as it was, its metrics are the original's (a damaged page's rows gone),
    it keeps the store id, and a new run never takes the id of one it lost."""
    path = tmp_path / "dlperf.db"
    runs = damage(path)
    before = path.read_bytes()
    store_id = sqlite3.connect(path).execute("SELECT value FROM meta WHERE key = 'store_id'")
    result = cli("runs", "repair", "repaired.db", "--json")
    assert result.code == 0, result.err
    done = json.loads(result.out)
    untouched(path, before)

    out = tmp_path / "repaired.db"
    assert sqlite3.connect(out).execute("PRAGMA quick_check").fetchall() == [("ok",)]
    repaired = RunStore.open(str(out))
    got = {r.id: r for r in repaired.list_runs()}
    assert repaired.id == done["store_id"] == store_id.fetchone()[0]
    assert got and done["tables"]["runs"]["copied"] == len(got)
    for run_id, run in got.items():
        assert run.to_dict() == {k: v for k, v in runs[run_id].items() if k != "loss"}
        loss = repaired.metrics(run_id, "train/loss")
        assert set(loss) <= set(runs[run_id]["loss"])
    rows = sum(len(repaired.metrics(i, "train/loss")) for i in got)
    assert 0 < done["tables"]["metrics"]["copied"] == rows < 200 * RUNS_IN_STORE
    assert sum(c["skipped_stretches"] for c in done["tables"].values()) >= 1
    assert repaired.create_run("next", "run", {}) > max(got)
    repaired.engine.dispose()
    assert cli("--db", str(out), "runs", "list").code == 0
