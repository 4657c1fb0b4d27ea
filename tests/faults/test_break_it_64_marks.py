"""Break-it round 64, X2: `dlperf.deleting` marks and process records edited in the database.

Before: a mark naming a pid past any pid (`{"host": <this host>, "pid": 1099511627776}`) ended
`runs list`, `runs show`, `--where`, `report`, `doctor` and `runs delete` in an OverflowError
traceback from `os.kill`; a mark `stop` never writes (`{"host": ..., "pid": 1}`, or `"pid":
true`, which JSON reads back as a bool and Python counts as 1) named init as a live delete, so
`run --resume` was refused "being deleted by `dlperf runs delete` (pid 1) ... stop it (kill 1)".
Now a pid past any pid is a process that is gone, a mark not shaped as `stop` writes it is no
mark, and a bool is no pid anywhere a process record is read.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable

import pytest

from dlperf.procs import alive, process_alive, this_process
from dlperf.store import RunStore, query
from tests.conftest import CliResult

Cli = Callable[..., CliResult]
HOST = socket.gethostname()
HUGE = {**this_process(), "pid": 1 << 40}


def _killed(store: RunStore, mark: str) -> int:
    run_id = store.create_run("r", "run", {})
    store.finish_run(run_id, "killed")
    store.set_tags(run_id, {query.DELETING_TAG: mark, "mine": "yes"})
    return run_id


def test_a_pid_past_any_pid_is_gone() -> None:
    assert alive(1 << 40) is False
    assert alive(0) is False and alive(-1) is False  # process groups, to kill(2)
    assert process_alive(HUGE) is False


def test_a_bool_is_no_pid() -> None:
    assert process_alive({"host": HOST, "pid": True, "start": None, "boot_id": None}) is None


def test_a_mark_past_any_pid_reads_as_a_gone_delete(cli: Cli, store: RunStore) -> None:
    run_id = _killed(store, json.dumps(HUGE))
    for args in (
        ("runs", "list", "--json"),
        ("runs", "show", str(run_id), "--json"),
        ("runs", "list", "--json", "--where", "tag.mine=yes"),
        ("doctor", str(run_id), "--json"),
    ):
        done = cli(*args)
        assert done.code in (0, 1), (args, done.err)
        assert "Traceback" not in done.err and "OverflowError" not in done.err, (args, done.err)
    shown = json.loads(cli("runs", "show", str(run_id), "--json").out)
    assert shown["tags"] == {"mine": "yes"}
    deleted = cli("runs", "delete", str(run_id), "--yes")
    assert (deleted.code, deleted.out.strip()) == (0, f"deleted run {run_id}"), deleted.err


@pytest.mark.parametrize("pid", [1, True])
def test_a_mark_stop_never_writes_is_no_delete(store: RunStore, pid: object) -> None:
    run_id = _killed(store, json.dumps({"host": HOST, "pid": pid}))
    run = store.get_run(run_id)
    assert query.deleter(run.tags[query.DELETING_TAG]) is None
    assert query.deleted_by(run) is None
    store.take_over(run_id)  # a resume is not refused in init's name
    assert store.get_run(run_id).status == "running"
