"""Break-it round 64, X2 causes 2-4: deletes meeting deletes, and marks edited by hand.

Before: (C3) a second `runs delete --force` of a run another delete was stopping wrote its own
`dlperf.deleting` mark over the first's, and took it away on giving up (SIGTERM, the 60 s
wait): the stopped run then said "continue it from its last checkpoint: run --resume N" of the
run the first delete went on to delete. (C2) a mark or process record with a null start time
naming a live pid (init, pid 1) counted as that process alive, so a resume was refused "stop it
(kill 1)". (C4) a resume refused while its delete lives said "stop it (kill P)", which does
nothing to a delete that is itself stopped (SIGSTOP) until it is continued.

Now the second delete is refused in one line before it marks or signals anything; a record
without a start time where /proc gives one cannot be told apart from another process (None,
not alive); and the refusal's hint says to continue a stopped delete.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import replace

import pytest

from dlperf.errors import UserError
from dlperf.procs import proc_stat, process_alive, this_process
from dlperf.store import RunStore, query

HOST = socket.gethostname()


def _record(pid: int) -> dict[str, object]:
    stat = proc_stat(pid)
    assert stat is not None
    return {**this_process(), "pid": pid, "start": stat[1]}


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen(["sleep", "600"])
    try:
        yield child
    finally:
        child.kill()
        child.wait()


def test_a_second_delete_of_a_run_being_deleted_is_refused_before_it_signals(
    store: RunStore,
    sleeper: subprocess.Popen[bytes],
) -> None:
    """The run's trainer and the first delete are both live processes (sleepers standing in):
    the second delete neither signals the trainer nor touches the first's mark."""
    with subprocess.Popen(["sleep", "600"]) as first:
        try:
            run_id = store.create_run("r", "run", {})
            mark = json.dumps(_record(first.pid))
            store.set_tags(run_id, {query.DELETING_TAG: mark})
            stored = store.get_run(run_id)
            run = replace(stored, system={**(stored.system or {}), "process": _record(sleeper.pid)})
            with pytest.raises(UserError) as refused:
                query.stop(store, [run], wait_s=5)
            assert (refused.value.message, refused.value.hint) == (
                f"run {run_id} is already being deleted by `dlperf runs delete` (pid {first.pid}); "
                "nothing deleted",
                "let that delete end: it deletes the run",
            )
            assert sleeper.poll() is None  # not signalled
            assert store.get_run(run_id).tags == {query.DELETING_TAG: mark}
        finally:
            first.kill()


def test_a_record_without_a_start_time_is_no_live_process() -> None:
    assert process_alive({"host": HOST, "pid": 1, "start": None, "boot_id": None}) is None


def test_a_mark_of_init_with_a_null_start_refuses_no_resume(store: RunStore) -> None:
    run_id = store.create_run("r", "run", {})
    store.finish_run(run_id, "killed")
    mark = {"host": HOST, "pid": 1, "start": None, "boot_id": None}
    store.set_tags(run_id, {query.DELETING_TAG: json.dumps(mark)})
    store.take_over(run_id)
    assert store.get_run(run_id).status == "running"


def test_a_stopped_deletes_refusal_says_to_continue_it(
    store: RunStore, sleeper: subprocess.Popen[bytes]
) -> None:
    run_id = store.create_run("r", "run", {})
    store.finish_run(run_id, "killed")
    store.set_tags(run_id, {query.DELETING_TAG: json.dumps(_record(sleeper.pid))})
    sleeper.send_signal(signal.SIGSTOP)
    os.waitpid(sleeper.pid, os.WUNTRACED)  # returns once it is stopped: no race with the stop
    try:
        with pytest.raises(UserError) as refused:
            store.take_over(run_id)
    finally:
        sleeper.send_signal(signal.SIGCONT)
    pid = sleeper.pid
    assert refused.value.hint == (
        f"let that delete end, or stop it (kill {pid}, then kill -CONT {pid}: it is stopped) "
        "to keep the run"
    )


@pytest.mark.parametrize("force", [False, True])
def test_a_run_being_deleted_is_refused_with_or_without_force(
    store: RunStore, sleeper: subprocess.Popen[bytes], force: bool
) -> None:
    """Round 65 Y2 C2: without --force the line said "is still running; nothing deleted (stop
    it first, or pass --force)", and --force was then refused."""
    run_id = store.create_run("r", "run", {}, None, {"host": HOST})  # this process trains it
    store.set_tags(run_id, {query.DELETING_TAG: json.dumps(_record(sleeper.pid))})
    with pytest.raises(UserError) as refused:
        query.to_delete(store, [run_id], force)
    assert refused.value.message == (
        f"run {run_id} is already being deleted by `dlperf runs delete` (pid {sleeper.pid}); "
        "nothing deleted"
    )


def test_a_stopped_first_delete_is_said_to_need_continuing(
    store: RunStore, sleeper: subprocess.Popen[bytes]
) -> None:
    """Round 65 Y3 C7: "let that delete end" of a delete that is stopped, which never ends."""
    run_id = store.create_run("r", "run", {}, None, {"host": HOST})
    store.set_tags(run_id, {query.DELETING_TAG: json.dumps(_record(sleeper.pid))})
    sleeper.send_signal(signal.SIGSTOP)
    os.waitpid(sleeper.pid, os.WUNTRACED)  # returns once it is stopped
    try:
        with pytest.raises(UserError) as refused:
            query.to_delete(store, [run_id], True)
    finally:
        sleeper.send_signal(signal.SIGCONT)
    assert refused.value.hint == (
        f"let that delete end: it deletes the run once continued (it is stopped: kill -CONT "
        f"{sleeper.pid})"
    )
