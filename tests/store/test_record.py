"""dlperf.store.record: a stored run's status as it stands (`lost` for a `running` run whose
process is known to be gone), its recorded process, its typed summary and its JSON form."""

from __future__ import annotations

import socket
import subprocess
from typing import Any

import pytest

from dlperf.procs import proc_stat, this_process
from dlperf.records import RunSummary
from dlperf.store.record import LOST, RUNNING, RunRecord, current_status, recorded_process

DEAD_PID = 2**22 + 1  # above Linux's pid_max: no process has it


def record(**fields: Any) -> RunRecord:
    base: dict[str, Any] = {
        "id": 1, "study_id": None, "name": "r", "kind": "run", "config": {},
        "config_hash": None,
    }  # fmt: skip
    status, system = fields.pop("status", "finished"), fields.pop("system", None)
    return RunRecord.read(status, system, **{**base, **fields})


def test_a_running_run_of_a_gone_process_reads_lost() -> None:
    me = this_process()
    gone = {**me, "pid": DEAD_PID}
    assert current_status(RUNNING, {"process": me}) == RUNNING
    assert current_status(RUNNING, {"process": gone}) == LOST
    # a pid now held by another process: not the process that wrote the run
    assert current_status(RUNNING, {"process": {**me, "start": (me["start"] or 0) + 1}}) == LOST
    # what this host cannot tell stays running: another host, or no process recorded
    other_host = {**gone, "host": "not-" + socket.gethostname()}
    assert current_status(RUNNING, {"process": other_host}) == RUNNING
    assert current_status(RUNNING, None) == RUNNING
    assert current_status(RUNNING, {"process": "pid 3"}) == RUNNING  # not a process record
    # only `running` is ever worked out
    for stored in ("finished", "failed", "killed"):
        assert current_status(stored, {"process": gone}) == stored


def test_a_process_that_ended_while_its_run_was_stored_running() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        stat = proc_stat(child.pid)
        assert stat is not None
        process = {
            "host": socket.gethostname(),
            "pid": child.pid,
            "start": stat[1],
            "boot_id": None,
        }
        run = record(status=RUNNING, system={"process": process})
        assert (run.status, run.unfinished) == (RUNNING, True)
    finally:
        child.kill()
        child.wait()
    assert record(status=RUNNING, system={"process": process}).status == LOST


def test_unfinished_and_process() -> None:
    me = this_process()
    assert record(status="lost").unfinished and not record(status="killed").unfinished
    assert record(system={"process": me, "host": "h"}).process == me
    assert record(system={"host": "h"}).process is None
    assert recorded_process(None) is None


def test_a_training_run_s_summary_is_typed_and_others_keep_their_own_shape() -> None:
    trained = record(summary={"test_accuracy": 0.9, "throughput": 1200.0})
    assert isinstance(trained.trained, RunSummary)
    assert trained.trained == RunSummary.stored(trained.summary)
    assert record(kind="scale", summary={"test_accuracy": 0.9}).trained == RunSummary()


def test_to_dict_is_every_field_with_the_status_as_read() -> None:
    run = record(
        status=RUNNING, system={"process": {**this_process(), "pid": DEAD_PID}}, tags={"a": "b"}
    )
    document = run.to_dict()
    assert document["status"] == LOST and document["tags"] == {"a": "b"}
    assert list(document) == [
        "id", "study_id", "name", "kind", "status", "config", "config_hash", "system",
        "summary", "started", "ended", "error", "tags",
    ]  # fmt: skip


def test_a_record_is_frozen() -> None:
    with pytest.raises(AttributeError):
        record().status = "finished"  # type: ignore[misc]
