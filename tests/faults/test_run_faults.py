"""Faults: stop a real `dlperf run` at seeded steps, resume it, and find the run unharmed.
(Each is a process forked from the test's, running dlperf's entry point: forked_dlperf.)

Two runs (one stopped by SIGINT and SIGTERM in turn, one by SIGKILL) are each stopped before
their first checkpoint exists, which cannot be resumed and must say so, and then again and
again, each time resumed by `dlperf run --resume` by the next process, the last (in the test's own
process) running to the end. Its stored metrics must then hold every step and epoch exactly
once and equal an uninterrupted run's bit for bit. The runs stop at exact steps through the engine's
DLPERF_TEST_PAUSE_AT_STEP hook, so the signal lands there however busy the machine is.
"""

from __future__ import annotations

import os
import random
import re
import signal
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import pytest

from dlperf.config import load_experiment
from dlperf.experiment.run import run_experiment
from dlperf.store import RunStore
from tests.conftest import TINY, CliResult
from tests.faults.test_store_faults import forked_dlperf
from tests.hooks import hook_env

pytestmark = pytest.mark.faults

EPOCHS = 2
SPE = 20  # steps per epoch: 1294 training digits // batch 64
TOTAL = EPOCHS * SPE
SETTINGS = ["--set", "train.batch_size=64"]
LOG_EVERY = 3  # losses reach the store every 3 steps, so a fault leaves some past the checkpoint
EXPERIMENT = TINY.format(epochs=EPOCHS) + f"log_every = {LOG_EVERY}\n"
# Measured, not computed: they differ between any two runs.
WALL_CLOCK = {"epoch/time_s", "epoch/throughput", "epoch/cpu_wait_share"}
# A paused process cannot finish, so waiting long for it costs nothing on an idle machine.
DEADLINE_S = 300
INT, TERM, KILL = signal.SIGINT, signal.SIGTERM, signal.SIGKILL


def fault_plan(rng: random.Random) -> list[Any]:
    """Two runs, each stopped once before its first checkpoint exists (which cannot be
    resumed and must say so), then at increasing steps after it. Between them the stops
    cover every epoch edge: the last step of epoch 1, whose checkpoint is not written yet;
    the first step after a checkpoint; the last step of the run, before its last one; and a
    step inside an epoch. SIGINT and SIGTERM (which dlperf.stopping handles alike, the exit
    code aside) take turns in one run; SIGKILL, which nothing can handle, stops the other.
    A third run or a third epoch re-proves the same paths at a process start per stop."""
    inner = rng.randint(SPE + 2, TOTAL - 1)
    handled = ((SPE, INT), [(SPE + 1, TERM), (inner, INT)])
    killed = (
        (rng.randint(1, SPE - 1), KILL),
        [(rng.randint(SPE + 2, TOTAL - 1), KILL), (TOTAL, KILL)],
    )
    return [
        pytest.param(
            first, later, id="-".join(f"{sig.name}@{step}" for step, sig in [first, *later])
        )
        for first, later in (handled, killed)
    ]


PLAN = fault_plan(random.Random(0))


def dlperf_run(root: Path, args: list[str], pause_at: int | None = None) -> BaseProcess:
    """Start `dlperf run ARGS` in `root` against its store, a real process forked from this
    one (forked_dlperf: torch comes imported); its stderr goes to a file."""
    env = {"DLPERF_DB": f"sqlite:///{root / 'dlperf.db'}"}
    if pause_at is not None:
        env.update(hook_env("pause_at_step", f"{pause_at}:{root / f'paused-{pause_at}'}"))
    return forked_dlperf(root, ["run", *args], root / "stderr.txt", env)


def stderr(root: Path) -> str:
    return (root / "stderr.txt").read_text()


def interrupt(root: Path, args: list[str], step: int, sig: signal.Signals) -> tuple[int, str]:
    """Start `dlperf run ARGS` and send it `sig` once it has done global step `step`: exit
    code and stderr."""
    proc = dlperf_run(root, args, pause_at=step)
    marker = root / f"paused-{step}"
    deadline = time.monotonic() + DEADLINE_S
    try:
        while not marker.exists():
            assert proc.is_alive(), f"exited before step {step}: {stderr(root)}"
            assert time.monotonic() < deadline, f"step {step} not reached in {DEADLINE_S} s"
            time.sleep(0.1)
        assert proc.pid is not None
        os.kill(proc.pid, sig)
        proc.join(timeout=DEADLINE_S)
    finally:
        proc.kill()
        proc.join()
    assert proc.exitcode is not None
    return proc.exitcode, stderr(root)


def epochs_logged(err: str) -> list[int]:
    """The epochs a process finished, from its one log line per epoch."""
    return [int(e) for e in re.findall(rf"^epoch (\d+)/{EPOCHS}  train loss", err, re.M)]


def newest_run(root: Path) -> int:
    return RunStore.open(f"sqlite:///{root / 'dlperf.db'}").list_runs(limit=1)[0].id


def assert_stopped(store: RunStore, run_id: int, sig: signal.Signals, code: int, err: str) -> None:
    if sig == signal.SIGKILL:
        # Nothing could run in the process to mark it: stored as running, it reads as lost
        # since its process is gone.
        assert code == -signal.SIGKILL
        assert store.get_run(run_id).status == "lost"
    else:
        assert code == 128 + sig, err  # 130 for SIGINT, 143 for SIGTERM
        assert store.get_run(run_id).status == "killed"


def stored(store: RunStore, run_id: int) -> dict[str, list[tuple[int, float]]]:
    """Every stored metric of the run except wall-clock times, by key."""
    keys = set(store.metric_keys(run_id)) - WALL_CLOCK
    return {key: store.metrics(run_id, key) for key in sorted(keys)}


SUMMARY = ("test_accuracy", "test_loss", "test_top5", "best_val_accuracy", "epochs_to_target")


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """An uninterrupted run of the experiment: its summary, all its metric keys, and the
    stored values that must come out the same. Trained in this process, as `dlperf run
    exp.toml --set train.batch_size=64` loads and trains it: nothing is stopped here, and a
    process start is most of its time on a busy core (the runs it is compared with are
    processes of their own)."""
    root = tmp_path_factory.mktemp("reference")
    (root / "exp.toml").write_text(EXPERIMENT)
    exp = load_experiment(root / "exp.toml", SETTINGS[1::2])
    exp.run.out_dir = str(root / "dlperf_runs")
    store = RunStore.open(f"sqlite:///{root / 'dlperf.db'}")
    assert run_experiment(exp, store)["status"] == "finished"
    run = store.get_run(newest_run(root))
    assert run.summary["steps_per_epoch"] == SPE and run.summary["steps"] == TOTAL
    return {
        "summary": {k: run.summary[k] for k in SUMMARY},
        "keys": store.metric_keys(run.id),
        "metrics": stored(store, run.id),
    }


@pytest.mark.parametrize(("first", "later"), PLAN)
def test_stopped_runs_resume_exactly(
    tmp_path: Path,
    cli: Callable[..., CliResult],
    reference: dict[str, Any],
    first: tuple[int, signal.Signals],
    later: list[tuple[int, signal.Signals]],
) -> None:
    (tmp_path / "exp.toml").write_text(EXPERIMENT)
    store = RunStore.open(f"sqlite:///{tmp_path / 'dlperf.db'}")

    step, sig = first
    code, err = interrupt(tmp_path, ["exp.toml", *SETTINGS], step, sig)
    run_id = newest_run(tmp_path)
    assert_stopped(store, run_id, sig, code, err)
    # The refusal in this process (cli's store is tmp_path/dlperf.db too): no start to pay.
    refused = cli("run", "--resume", str(run_id))
    assert refused.code == 2
    assert f"error: run {run_id} has no checkpoint to resume from" in refused.err

    args = ["exp.toml", *SETTINGS]
    done = 0  # epochs checkpointed so far
    for step, sig in later:
        code, err = interrupt(tmp_path, args, step, sig)
        run_id = newest_run(tmp_path)
        # Each process starts at the epoch the last one was in: it loses at most that epoch.
        epoch = (step - 1) // SPE + 1
        assert epochs_logged(err) == list(range(done + 1, epoch)), (step, err)
        assert_stopped(store, run_id, sig, code, err)
        done = epoch - 1
        assert [s for s, _ in store.metrics(run_id, "val/acc1")] == list(range(1, done + 1))
        # Losses flushed after the checkpoint stay behind, for the resume to drop.
        last = max(step - step % LOG_EVERY, done * SPE)
        assert store.last_step(run_id, "train/loss") == last
        args = ["--resume", str(run_id)]

    # The last resume in this process (cli's store is tmp_path/dlperf.db): no signal reaches
    # it, and a process start is most of a resume's time on a busy core.
    last = cli("run", *args)
    code, err = last.code, last.err
    assert code == 0, err
    assert epochs_logged(err) == list(range(done + 1, EPOCHS + 1))
    run = store.get_run(run_id)
    assert run.status == "finished" and run.summary["steps"] == TOTAL
    assert {k: run.summary[k] for k in SUMMARY} == reference["summary"]
    # Nothing lost, nothing twice: every step and every epoch exactly once ...
    assert store.metric_keys(run_id) == reference["keys"]
    for key in reference["keys"]:
        steps = [s for s, _ in store.metrics(run_id, key)]
        assert steps == list(range(1, (TOTAL if key.startswith("train/") else EPOCHS) + 1)), key
    # ... and every value as if the run had never stopped.
    assert stored(store, run_id) == reference["metrics"]
