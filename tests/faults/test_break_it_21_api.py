"""The twenty-first break-it round (P3, causes C3 and C4): the Python API's config keys, and
`runs delete --force` of a run that `dlperf.track` records.

C3: a config key that is not text crashed the API: `dlperf.track(config={1: 'a', '1': 'b'})`
with a TypeError (json.dumps sorting keys of mixed types; once written as text the two keys
would also have been one, a value lost without a word), and `dlperf.run` of a dict with a key
3 or None in a section with an AttributeError (`.lower()` in the did-you-mean hint). A key
that is not a str, at any depth, is now a UserError naming its path and type, before any run
is stored.

C4: `runs delete --force` sent SIGTERM to the process of a `dlperf.track` run: the user's own
program (a notebook's kernel), which has Python's default action and died, then said "pid P
marked it lost" though nothing was marked. Such a run is refused in one line naming the pid,
and its program is left alone; and a process that ends without marking its run is said to
have done so.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

import dlperf
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]
DEADLINE_S = 300  # generous: the machine is shared and busy; every wait below is on an event
KEYS_HINT = "write each key as a str"


# --- C3: config keys that are not text ------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ({1: "a", "1": "b"}, "config key 1 is int: keys are text"),
        ({True: 1, None: 2}, "config key True is bool: keys are text"),
        ({"k": {None: 1, "a": 2}}, "config key None in config['k'] is None: keys are text"),
        ({"k": [{"a": 1}, {2.5: 1}]}, "config key 2.5 in config['k'][1] is float: keys are text"),
        ({("a", "b"): 1}, "config key ('a', 'b') is tuple: keys are text"),
        ({b"x": 1}, "config key b'x' is bytes: keys are text"),
    ],
    ids=["int beside its text", "bool and None", "None nested", "float in list", "tuple", "bytes"],
)
def test_track_refuses_a_config_key_that_is_not_text(
    db: str, config: dict[Any, Any], said: str
) -> None:
    # before: TypeError: '<' not supported between instances of 'str' and 'int'
    with pytest.raises(UserError) as caught, dlperf.track("x", config=config, store=db):
        pass
    assert str(caught.value) == f"{said} ({KEYS_HINT})"
    assert dlperf.Store(db).runs() == []


@pytest.mark.parametrize(
    ("experiment", "said"),
    [
        ({"model": {"name": "smallcnn", 3: 1}}, "config key 3 in model is int"),
        ({"model": {"name": "smallcnn", None: 1}}, "config key None in model is None"),
        ({3: {"name": "smallcnn"}}, "config key 3 is int"),
        (
            {"model": {"name": "smallcnn", "kwargs": {(1, 2): 1}}},
            "config key (1, 2) in model.kwargs is tuple",
        ),
        ({"model": {"name": "smallcnn", b"name": 1}}, "config key b'name' in model is bytes"),
    ],
    ids=["int in a section", "None in a section", "int section", "tuple in kwargs", "bytes"],
)
def test_run_refuses_a_config_key_that_is_not_text(
    db: str, experiment: dict[Any, Any], said: str
) -> None:
    # before: AttributeError: 'int' object has no attribute 'lower'
    with pytest.raises(UserError) as caught:
        dlperf.run(experiment, store=db)
    assert str(caught.value) == f"experiment: {said}: keys are text ({KEYS_HINT})"
    assert dlperf.Store(db).runs() == []


def test_text_keys_still_work(db: str) -> None:
    with dlperf.track("x", config={"1": "b", "k": {"a": [{"b": 2}]}}, store=db):
        pass
    (run,) = dlperf.Store(db).runs()
    assert run.config == {"1": "b", "k": {"a": [{"b": 2}]}}


# --- C4: runs delete --force of a tracked run ----------------------------------------------

# Each child prints its run's id, then blocks reading stdin until the test writes a line (or
# closes it): an event the test controls, no timer.
TRACKED = """
import sys
import dlperf
with dlperf.track("notebook", config={"lr": 0.1}, store=sys.argv[1]) as run:
    run.log(1, loss=1.0)
    print(run.id, flush=True)
    sys.stdin.readline()
    run.log(2, loss=0.5)
print("left the block", flush=True)
"""

# A run as a dlperf command records it (its config holds the experiment's sections), in a
# process that ends on SIGTERM without marking it: a dlperf command that exits unmarked.
UNMARKED = """
import sys
from dlperf.store import RunStore
store = RunStore.open(sys.argv[1])
config = {"model": {"name": "smallcnn"}, "data": {}, "train": {}, "run": {}}
with store.new_run("unmarked", "run", config, None, {"host": "h"}) as record:
    print(record.id, flush=True)
    sys.stdin.readline()
"""


def _child(program: str, db: str) -> tuple[subprocess.Popen[str], int]:
    """The child running `program` against `db`, and the run id it printed."""
    child = subprocess.Popen(
        [sys.executable, "-c", program, db],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    line = child.stdout.readline()  # blocks until the run exists
    if not line:
        child.kill()
        child.wait(timeout=DEADLINE_S)
        pytest.fail(f"the child exited {child.returncode} before printing its run's id")
    return child, int(line)


def _end(child: subprocess.Popen[str]) -> None:
    """Kill `child` if it still runs, and reap it."""
    child.kill()
    child.wait(timeout=DEADLINE_S)
    for pipe in (child.stdin, child.stdout):
        if pipe is not None:
            pipe.close()


@pytest.mark.faults  # about 10 s on a busy machine: the child imports torch for dlperf.track
def test_delete_force_leaves_a_tracked_runs_program_alone(
    cli: Cli, db: str, store: RunStore
) -> None:
    """Before: SIGTERM killed the user's program (exit 143), then "pid P marked it lost"."""
    child, run = _child(TRACKED, db)
    try:
        forced = cli("runs", "delete", str(run), "--yes", "--force")
        assert forced.code == 2, (forced.out, forced.err)
        assert forced.out == ""
        assert forced.err == (
            f"error: run {run} is recorded by pid {child.pid}, a Python program recording "
            "with dlperf.track, not a dlperf command: --force sends it no signal; nothing "
            "deleted (stop that program, then delete the run again: once its process is "
            "gone, the run reads as lost and deletes without --force)\n"
        )
        assert child.poll() is None  # still alive, and its run untouched
        assert store.get_run(run).status == "running"
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write("go on\n")
        child.stdin.flush()
        assert child.stdout.readline() == "left the block\n"
        assert child.wait(timeout=DEADLINE_S) == 0
    finally:
        _end(child)
    assert store.get_run(run).status == "finished"  # the program went on to the block's end
    assert [s for s, _ in store.metrics(run, "train/loss")] == [1, 2]
    assert cli("runs", "delete", str(run), "--yes").code == 0


def test_delete_force_says_marked_only_when_the_process_marked_its_run(
    cli: Cli, db: str, store: RunStore
) -> None:
    """A process that ends on SIGTERM without marking its run: the run reads as lost, and the
    line says the process did not mark it. Before: "pid P marked it lost"."""
    child, run = _child(UNMARKED, db)
    try:
        forced = cli("runs", "delete", str(run), "--yes", "--force")
        assert forced.code == 0, forced.err
        assert forced.out.splitlines() == [
            f"stopped run {run}: pid {child.pid} ended without marking it (it reads as lost)",
            f"deleted run {run}",
        ]
        assert "marked it" not in forced.out
        assert child.wait(timeout=DEADLINE_S) == -15  # SIGTERM's default action: no marking
    finally:
        _end(child)
    assert store.list_runs() == []
