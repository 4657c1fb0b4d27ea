"""Break-it round 26: `runs repair` of a store whose `runs delete` was cut short.

Since round 26 `runs delete` records the files it is to remove (meta `deleting_run_<id>`) in
the transaction that deletes the run's rows, and the next `runs delete` finishes a delete
killed in between. `runs repair` copied only the meta rows it knew: a store repaired while
such a delete was pending lost the record, the run was "no run N in the store", and its files
stayed on disk for good. The record is now copied; its files are removed only by a repaired
store that owns them (moved in place of the damaged file), not by one beside a live original.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_break_it_26_delete import _run

Cli = Callable[..., CliResult]


class Killed(BaseException):
    """The `runs delete` process dying (SIGKILL) as it starts to remove the run's directory:
    its rows and the record of its files are committed, the files are not removed."""


def test_a_store_repaired_while_a_delete_was_cut_short_finishes_it(
    db: str, tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RunStore.open(db)
    where = _run(store, tmp_path / "runs", "checkpoint.pt")
    run_id = int(where.name.removeprefix("run-"))

    def killed(path: Any, *args: Any, **kwargs: Any) -> None:
        raise Killed

    with monkeypatch.context() as m:  # the same hook as the delete test's killed process
        m.setattr(shutil, "rmtree", killed)
        with pytest.raises(Killed):
            store.delete_runs([run_id])
    assert store.deleting() == {run_id}
    store.engine.dispose()
    assert (where / "checkpoint.pt").exists()
    # Repaired beside the original, which is still there: the files are the original's, and
    # a delete in the repaired copy leaves them (the copy has the record: no "no run N").
    beside = cli("runs", "repair", "beside.db")
    assert beside.code == 0, beside.err
    in_copy = cli("--db", "sqlite:///beside.db", "runs", "delete", str(run_id), "--yes")
    assert in_copy.code == 0, in_copy.err
    assert f"removed {where}" not in in_copy.out
    assert (where / "checkpoint.pt").exists()
    # Repaired, and moved in place of the damaged file (kept aside): the repaired store owns
    # the files, and its `runs delete` finishes the delete.
    repaired = cli("runs", "repair", "repaired.db")
    assert repaired.code == 0, repaired.err
    (tmp_path / "dlperf.db").rename(tmp_path / "damaged.db")
    (tmp_path / "repaired.db").rename(tmp_path / "dlperf.db")
    done = cli("runs", "delete", str(run_id), "--yes")
    assert done.code == 0, done.err
    assert f"deleted run {run_id}\n" in done.out
    assert f"removed {where}\n" in done.out
    assert not where.exists()
    nothing = cli("runs", "delete", str(run_id), "--yes")  # finished: no run now
    assert nothing.code != 0 and f"no run {run_id} in the store" in nothing.err
