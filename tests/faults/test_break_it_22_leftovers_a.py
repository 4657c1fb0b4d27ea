"""The twenty-second break-it round, leftovers of round 21 (fixer A).

1. `runs delete --force` sent SIGTERM to the process of a run that `dlperf.run` trains: the
   user's own Python program, where SIGTERM has Python's default action, so the whole program
   died (as it did for a `dlperf.track` run before round 21). Such a run is refused in one line
   naming the pid, and its program left alone; a `dlperf run` command's run is still stopped.
2. "run.name, else the model's name" was written out again in the sweep's runner and in
   `run_experiment`, beside `store.names.given`, the one place for it.
3. The sweep's hint for a name that makes its run names too long said "give a shorter sweep
   name", no length; the other commands say how many characters fit (`store.names.at_most`).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.errors import UserError
from dlperf.procs import this_process
from dlperf.store import RunStore
from dlperf.store.query import API_PROCESS, run_by_api
from dlperf.sweep import load_sweep
from tests.conftest import CliResult

Cli = Callable[..., CliResult]
DEADLINE_S = 300  # generous: the machine is shared and busy; every wait below is on an event
SRC = Path(__file__).resolve().parents[2] / "src" / "dlperf"


# --- 1: runs delete --force of a run that dlperf.run trains ------------------------------

# The hook both children install: the run's training waits, its run recorded, until the test
# writes a line to the child's stdin (an event the test controls, no timer). It prints the
# run's id first, so the test knows which run to delete.
PARK = """
import sys
import dlperf.experiment.run as experiment_run
trained = experiment_run.train
def parked(exp, model, data, device, sink, *args, **kwargs):
    print(sink.run_id, flush=True)
    sys.stdin.readline()
    return trained(exp, model, data, device, sink, *args, **kwargs)
experiment_run.train = parked
"""

# The user's own program: dlperf.run through the API, with Python's default signal actions.
API_RUN = (
    PARK
    + """
import dlperf
result = dlperf.run(sys.argv[2], store=sys.argv[1])
print(result.status, flush=True)
"""
)

# The `dlperf run` command, through its real entry point (which takes the stop signals).
COMMAND_RUN = (
    PARK
    + """
from dlperf.__main__ import main
sys.argv = ["dlperf", "--db", sys.argv[1], "run", sys.argv[2]]
main()
"""
)


def _child(program: str, db: str, exp: Path) -> tuple[subprocess.Popen[str], int]:
    """The child running `program` on `exp` against `db`, and the run id it printed once its
    run was recorded."""
    child = subprocess.Popen(
        [sys.executable, "-c", program, db, str(exp)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert child.stdout is not None
    line = child.stdout.readline()  # blocks until the run exists
    if not line:
        _end(child)
        pytest.fail(f"the child exited {child.returncode} before printing its run's id")
    return child, int(line)


def _end(child: subprocess.Popen[str]) -> None:
    """Kill `child` if it still runs, and reap it."""
    child.kill()
    child.wait(timeout=DEADLINE_S)
    for pipe in (child.stdin, child.stdout):
        if pipe is not None:
            pipe.close()


@pytest.mark.faults  # the child imports torch and trains: over 10 s on a busy machine
def test_delete_force_leaves_a_dlperf_run_programs_run_alone(
    cli: Cli, db: str, store: RunStore, tiny_exp: Callable[..., Path]
) -> None:
    """Before: SIGTERM ended the user's program (exit -15), its run left unmarked."""
    exp = tiny_exp(epochs=1)  # 64 images: once let go, the run has only to reach its end
    exp.write_text(exp.read_text().replace('name = "digits"', 'name = "digits"\nlimit = 64'))
    child, run = _child(API_RUN, db, exp)
    try:
        forced = cli("runs", "delete", str(run), "--yes", "--force")
        assert forced.code == 2, (forced.out, forced.err)
        assert forced.out == ""
        assert forced.err == (
            f"error: run {run} is recorded by pid {child.pid}, a Python program running it "
            "with dlperf.run, not a dlperf command: --force sends it no signal; nothing "
            "deleted (stop that program, then delete the run again: once its process is "
            "gone, the run reads as lost and deletes without --force)\n"
        )
        assert child.poll() is None  # still alive, and its run untouched
        assert store.get_run(run).status == "running"
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write("go on\n")
        child.stdin.flush()
        assert child.stdout.readline() == "finished\n"  # its run trained to the end
        assert child.wait(timeout=DEADLINE_S) == 0
    finally:
        _end(child)
    assert store.get_run(run).status == "finished"
    assert cli("runs", "delete", str(run), "--yes").code == 0


@pytest.mark.faults  # the child imports torch: over 10 s on a busy machine
def test_delete_force_still_stops_a_dlperf_run_commands_run(
    cli: Cli, db: str, store: RunStore, tiny_exp: Callable[..., Path]
) -> None:
    """The command takes SIGTERM as a stop: it marks its run killed, and the run goes."""
    child, run = _child(COMMAND_RUN, db, tiny_exp(epochs=1))
    try:
        forced = cli("runs", "delete", str(run), "--yes", "--force")
        assert forced.code == 0, forced.err
        assert forced.out.splitlines() == [
            f"stopped run {run}: pid {child.pid} marked it killed",
            f"deleted run {run}",
        ]
        assert child.wait(timeout=DEADLINE_S) == 143  # 128 + SIGTERM, as the command exits
    finally:
        _end(child)
    assert store.list_runs() == []


def test_only_the_process_that_started_a_dlperf_run_is_spared(store: RunStore) -> None:
    """A run that `dlperf.run` started but `dlperf run --resume` writes now (another
    process) is the command's: --force may stop it. Told by the process recorded at the
    start against the one writing the run."""
    config = {"model": {}, "data": {}, "train": {}, "run": {}}  # an experiment's sections
    me = this_process()
    elsewhere = {**me, "pid": me["pid"] + 1}  # the program that started it, since gone
    started_here = store.create_run("a", "run", config, None, {API_PROCESS: me})
    resumed = store.create_run("b", "run", config, None, {API_PROCESS: elsewhere})
    command = store.create_run("c", "run", config, None, {})
    assert [run_by_api(store.get_run(r)) for r in (started_here, resumed, command)] == [
        True,
        False,
        False,
    ]


# --- 2: "run.name, else the model's name" written once -----------------------------------


def test_run_name_else_the_models_is_written_only_in_store_names() -> None:
    """Each copy could drift from `store.names.given` (what the other commands use)."""
    copies = [
        f"{path.relative_to(SRC)}:{n}"
        for path in sorted(SRC.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"run\.name or \S*model\.name", line)
    ]
    assert copies == []


# --- 3: the sweep's hint for a name too long says how long -------------------------------


def _sweep(root: Path, name: str) -> Path:
    path = root / "sw.toml"
    path.write_text(f'base = "tiny.toml"\nname = "{name}"\n[grid]\n"train.lr" = [0.1]\n')
    return path


def test_a_sweep_name_too_long_for_its_run_names_is_told_how_long_to_be(
    tmp_path: Path, tiny_exp: Callable[..., Path]
) -> None:
    """A point's run is named "SWEEP-NAME train.lr=0.1" (13 characters added): a sweep name
    of at most 200 - 13 = 187 characters fits the store's 200. Before, the hint read "give a
    shorter sweep name", however many characters over it was."""
    tiny_exp()
    path = _sweep(tmp_path, "s" * 190)
    with pytest.raises(UserError) as caught:
        load_sweep(path)
    assert str(caught.value) == (
        f"{path}: sweep name of 190 characters + point label 'train.lr=0.1' makes run names "
        "of 203 characters; the run store keeps at most 200 "
        "(give a sweep name of at most 187 characters)"
    )
    assert load_sweep(_sweep(tmp_path, "s" * 187)).name == "s" * 187  # the length it says
