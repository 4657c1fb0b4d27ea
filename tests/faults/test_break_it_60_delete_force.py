"""`runs delete --force` of a running `dlperf run`: what the stopped run then tells its user.

Before: `runs delete ID --yes --force` sent SIGTERM, waited for the run to be marked killed,
then deleted it and its `run-ID/` directory; the stopped `dlperf run`, which reads its run
right after marking it, found it still there with its checkpoint and ended with "run ID
stopped; continue it from its last checkpoint: dlperf run --resume ID", a run that the delete
was removing (`--resume` then said "no run ID in the store"). On SQLite and PostgreSQL.

Now the delete marks the run before it sends the signal (`query.stop`, the tag
`query.DELETING_TAG` naming its own process), and a run so marked by a live delete says it
was stopped to be deleted, never to resume it; a delete that gives up (its process did not
stop in time) takes the mark back, and a mark whose delete is gone no longer counts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dlperf.engine.checkpoint import run_checkpoint
from dlperf.errors import UserError
from dlperf.procs import this_process
from dlperf.store import RunStore, query
from tests.cli.test_runs import LIVE
from tests.conftest import CliResult, fresh_store_url
from tests.faults.test_store_faults import RESUMED, _ended, _parked

# Epoch 1 (20 steps at batch 64) is checkpointed before step 25: the run is resumable there.
PARKED_AT = 25
ARGS = ["exp.toml", "--set", "train.batch_size=64"]


def _deleting_line(run_id: int) -> str:
    return f"run {run_id} stopped: `dlperf runs delete` (pid {os.getpid()}) is deleting it"


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "delforce")


@pytest.mark.faults
def test_a_run_stopped_to_be_deleted_says_so_not_to_resume_it(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stop that `runs delete --force` makes, on its own (the delete after it waits for
    the stopped process to end): the run, resumable at that point, is not offered a resume."""
    monkeypatch.chdir(tmp_path)  # the run's dlperf_runs/, where its checkpoint is looked for
    (tmp_path / "exp.toml").write_text(RESUMED)
    proc = _parked(tmp_path, url, ["run", *ARGS], PARKED_AT, "run.txt")
    store = RunStore.open(url)
    try:
        run = store.get_run(1)
        run_checkpoint(store, 1, "", "")  # resumable: the old hint would be given
        stopped = query.stop(store, [run])
        assert [s.said() for s in stopped] == [
            (f"stopped run 1: pid {proc.pid} marked it killed", False)
        ]
        assert _ended(proc) == 143  # 128 + SIGTERM
        err = (tmp_path / "run.txt").read_text()
        assert "--resume" not in err
        assert err.splitlines()[-1] == _deleting_line(1)
        store.delete_runs([1], force=True)
        assert store.list_runs() == []
    finally:
        proc.kill()
        proc.join()
        store.engine.dispose()


@pytest.mark.faults
def test_runs_delete_force_of_a_training_run_never_offers_its_resume(
    cli: Callable[..., CliResult], db: str, tmp_path: Path
) -> None:
    """The whole command: whether the stopped process reads its run before the delete (it is
    marked) or after (it is gone), it never tells to resume it."""
    (tmp_path / "exp.toml").write_text(RESUMED)
    proc = _parked(tmp_path, db, ["run", *ARGS], PARKED_AT, "run.txt")
    try:
        forced = cli("runs", "delete", "1", "--yes", "--force")
        assert forced.code == 0, forced.err
        assert forced.out.startswith(f"stopped run 1: pid {proc.pid} marked it killed\n")
        assert _ended(proc) == 143
    finally:
        proc.kill()
        proc.join()
    err = (tmp_path / "run.txt").read_text()
    assert "--resume" not in err and "Traceback" not in err
    said = [line for line in err.splitlines() if line.startswith("run 1 ")]
    assert said in ([], [_deleting_line(1)]), err
    assert not list(tmp_path.glob("dlperf_runs/*/run-1"))  # its checkpoint went with it


def test_a_delete_that_gives_up_takes_its_mark_back(store: RunStore, db: str) -> None:
    """A process that does not stop in time (held by SIGSTOP) is left running and unmarked,
    its own tags kept: once continued and stopped, it is a run to resume, not one deleted."""
    child = subprocess.Popen([sys.executable, "-c", LIVE, db], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        run_id = int(child.stdout.readline())
        store.set_tags(run_id, {"mine": "kept"})
        os.kill(child.pid, signal.SIGSTOP)
        with pytest.raises(UserError) as e:
            query.stop(store, [store.get_run(run_id)], wait_s=0.5)
        said = f"run {run_id}: pid {child.pid} did not stop within 0.5 s; nothing deleted"
        assert e.value.message == said
        run = store.get_run(run_id)
        assert (run.status, run.tags) == ("running", {"mine": "kept"})
        assert query.deleted_by(run) is None
        os.kill(child.pid, signal.SIGCONT)  # the SIGTERM it held now stops it
        assert child.wait(timeout=60) == 143
        assert store.get_run(run_id).status == "killed"
    finally:
        child.kill()
        child.wait(timeout=60)
        if child.stdout is not None:
            child.stdout.close()


def test_a_mark_counts_only_while_its_delete_runs(store: RunStore, db: str) -> None:
    """The mark of a delete whose process is gone (killed before it deleted) is no delete: the
    run is to resume again; one of this live process is."""
    gone = subprocess.run(
        [sys.executable, "-c", "import json; from dlperf.procs import this_process as t; "
         "print(json.dumps(t()))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    run_id = store.create_run("r", "run", {}, None, {"host": "h"})
    store.set_tags(run_id, {query.DELETING_TAG: gone.stdout.strip()})
    assert query.deleted_by(store.get_run(run_id)) is None
    store.set_tags(run_id, {query.DELETING_TAG: json.dumps(this_process())})
    assert query.deleted_by(store.get_run(run_id)) == os.getpid()
    store.set_tags(run_id, {query.DELETING_TAG: "not a process"})
    assert query.deleted_by(store.get_run(run_id)) is None
