"""Break-it round 62, V2 cause 1: the mark of a `runs delete --force` that is gone.

Before: a `runs delete --force` SIGKILLed while it waited for the run it stopped (that run's
process SIGSTOPped) left its mark, the tag `dlperf.deleting` naming its own dead process, on
the run for good. `runs list`, `runs show`, their --json, `--where tag.dlperf.deleting=...`
and the exports showed the killed run as being deleted, and `run --resume` kept the mark on
the resumed, running run; only `query.deleted_by` took it as nothing.

Now the store's readers leave out the mark of a delete known to be gone (`query.stale_mark`),
while the mark of a delete that lives still shows; a resume (`RunStore.take_over`) removes a
stale mark from the store, and is refused in one line while the delete that marked the run
lives; a later `runs delete` of the run deletes it as any other. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from dlperf.errors import UserError
from dlperf.procs import this_process
from dlperf.store import RunStore, query
from dlperf.store.schema import Tag
from tests.conftest import CliResult, fresh_store_url

Cli = Callable[..., CliResult]
LIVE = json.dumps(this_process())  # the mark of a delete that lives: this process's


def _gone() -> str:
    """The mark a delete SIGKILLed while it waited leaves: its process, now ended (a pid
    reused since has another start time, which counts as gone too)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return json.dumps({**this_process(), "pid": child.pid})


def _killed(store: RunStore, name: str, mark: str) -> int:
    """A run its process marked killed, with the delete's mark and a tag of the user's."""
    run_id = store.create_run(name, "run", {})
    store.finish_run(run_id, "killed")
    store.set_tags(run_id, {query.DELETING_TAG: mark, "mine": "yes"})
    return run_id


def _stored_marks(store: RunStore) -> dict[int, str]:
    """The marks as the store holds them, past the readers."""
    with Session(store.engine) as s:
        rows = s.execute(select(Tag.run_id, Tag.value).where(Tag.key == query.DELETING_TAG))
        return {run_id: value for run_id, value in rows}


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "stalemark")


def test_listings_leave_out_a_gone_deletes_mark(cli: Cli, store: RunStore) -> None:
    gone = _killed(store, "a", _gone())
    live = _killed(store, "b", LIVE)
    listed = cli("runs", "list", "--json")
    assert listed.code == 0, listed.err
    assert {r["id"]: r["tags"] for r in json.loads(listed.out)} == {
        gone: {"mine": "yes"},
        live: {query.DELETING_TAG: LIVE, "mine": "yes"},
    }
    table = cli("runs", "list")
    assert table.code == 0, table.err
    row = {line.split()[0]: line for line in table.out.splitlines() if line.split()[:1]}
    assert query.DELETING_TAG not in row[str(gone)] and "mine=yes" in row[str(gone)]
    assert query.DELETING_TAG in row[str(live)]
    shown = cli("runs", "show", str(gone), "--json")
    assert shown.code == 0, shown.err
    assert json.loads(shown.out)["tags"] == {"mine": "yes"}
    text = cli("runs", "show", str(gone))
    assert [line.split()[:2] for line in text.out.splitlines() if line.startswith("tag ")] == [
        ["tag", "mine"]
    ]
    where = cli("runs", "list", "--json", "--where", f"tag.{query.DELETING_TAG}={LIVE}")
    assert where.code == 0, where.err
    assert [r["id"] for r in json.loads(where.out)] == [live]
    # The run stays a run to delete as any other: no word of the mark.
    deleted = cli("runs", "delete", str(gone), "--yes")
    assert (deleted.code, deleted.out.strip(), deleted.err) == (0, f"deleted run {gone}", "")


def test_a_resume_takes_a_gone_deletes_mark_away(url: str) -> None:
    store = RunStore.open(url)
    try:
        run_id = _killed(store, "a", _gone())
        store.take_over(run_id)
        run = store.get_run(run_id)
        assert (run.status, run.tags) == ("running", {"mine": "yes"})
        assert _stored_marks(store) == {}  # removed, not only left out
    finally:
        store.engine.dispose()


def test_a_resume_is_refused_while_its_delete_lives(url: str) -> None:
    store = RunStore.open(url)
    try:
        run_id = _killed(store, "a", LIVE)
        with pytest.raises(UserError) as refused:
            store.take_over(run_id)
        pid = this_process()["pid"]
        assert (refused.value.message, refused.value.hint) == (
            f"run {run_id} is being deleted by `dlperf runs delete` (pid {pid}); not resumed",
            f"let that delete end, or stop it (kill {pid}) to keep the run",
        )
        run = store.get_run(run_id)
        assert (run.status, run.tags) == ("killed", {query.DELETING_TAG: LIVE, "mine": "yes"})
    finally:
        store.engine.dispose()
