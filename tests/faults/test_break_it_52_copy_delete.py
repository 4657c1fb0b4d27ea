"""Break-it round 52, fixer F4: `runs delete` without --force in a copy of a store refused the
original's running run as if it were the copy's own, and advised stopping it.

T2 C1: in a copy of a store (`cp` of a SQLite file, a PostgreSQL copy) made while a run
trained in the original, `runs delete 1 --yes` said `run 1 (pid N on HOST) is still running;
nothing deleted (stop it first, or pass --force)`: it did not say that the run is the
original's, and stopping pid N ends the original's training, which is not the copy's to stop.
`run --resume` and `runs delete --force` in the same copy already said whose the run is. It now
says so too, in their words, and advises what fits a copy's row that nothing updates: `error:
run 1 runs in pid N on HOST, which writes ORIGINAL (this store is a copy of it): it is that
store's run; nothing deleted (pass --force to delete it from this store only: its process is
not stopped)`. The delete's own re-check in its transaction (`RunStore.delete_runs`, which a
library caller reaches without `to_delete`) says the same. Both backends alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult, finished, fresh_store_url, python_child
from tests.faults.test_break_it_47_copies import WRITER, _copied


@pytest.fixture(params=["sqlite", "postgresql"])
def original(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "fx52")


def test_deleting_the_originals_running_run_in_a_copy_says_whose_it_is(
    cli: Callable[..., CliResult], original: str, tmp_path: Path
) -> None:
    with python_child(WRITER, original) as writer:
        run_id = int(writer.stdout.readline())
        for copy_url, named in _copied(original, tmp_path):
            copy = RunStore.open(copy_url)
            try:
                process = copy.get_run(run_id).process or {}
                whose = (
                    f"run {run_id} runs in pid {writer.pid} on {process.get('host')}, which "
                    f"writes {named} (this store is a copy of it): it is that store's run; "
                    "nothing deleted"
                )
                hint = "pass --force to delete it from this store only: its process is not stopped"
                # The transaction's re-check, as a library caller meets it (no to_delete first).
                with pytest.raises(UserError) as refused:
                    copy.delete_runs([run_id], force=False)
                assert refused.value.message == whose  # before: "run 1 is running; nothing ..."
                assert refused.value.hint == hint  # before: "stop it first"
                assert copy.get_run(run_id).status == "running"  # nothing deleted
            finally:
                copy.engine.dispose()
            r = cli("--db", copy_url, "runs", "delete", str(run_id), "--yes")
            said = " ".join(r.err.split())
            assert r.code == 2, r.err
            # before: "run 1 (pid N on HOST) is still running; nothing deleted (stop it first,
            # or pass --force)"
            assert f"error: {whose}" in said, r.err
            assert hint in said, r.err
            assert "stop it" not in said, r.err
        finished(writer)  # untouched, it ends its run in the original
