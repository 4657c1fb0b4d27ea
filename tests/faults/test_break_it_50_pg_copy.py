"""Round 48, left until round 50: `doctor` in a PostgreSQL copy of a store (its tables copied
into another schema while a run trained) still advised `run --resume N` for the original's
run, once that run's process had ended (the copy's row reads as lost), a resume the copy
refuses. A store opened only to read (doctor, report) had no place of its own on PostgreSQL,
so it could not tell that the run's process wrote another store; SQLite's reader read its
file's path. A reader now reads its place when it asks (`RunStore.writes_elsewhere`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult, finished, fresh_store_url, python_child
from tests.faults.test_break_it_47_copies import _copied
from tests.faults.test_break_it_48_copies import WRITER  # a point's run: an epoch, a checkpoint


@pytest.fixture(params=["sqlite", "postgresql"])
def original(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "fx50")


def test_doctor_in_a_copy_does_not_advise_resuming_the_originals_run(
    cli: Callable[..., CliResult], original: str, tmp_path: Path
) -> None:
    with python_child(WRITER, original, str(tmp_path / "checkpoint.pt")) as writer:
        _, run_id = map(int, writer.stdout.readline().split())
        for copy_url, named in _copied(original, tmp_path):
            finished(writer)  # it ends its run in the original
            copy = RunStore.open(copy_url, create=False)  # as doctor opens it
            try:
                assert copy.get_run(run_id).status == "lost"
                assert copy.writes_elsewhere(copy.get_run(run_id)) == named
            finally:
                copy.engine.dispose()
            r = cli("--db", copy_url, "doctor", str(run_id))
            said = " ".join(r.out.split())
            assert "unfinished" in said, r.out
            # before, on PostgreSQL: "continue it from its last checkpoint: ... --resume 1"
            assert "--resume" not in said, r.out
            assert f"its process wrote {named} (this store is a copy of it)" in said, r.out
            # round 51's Left: the headline read "the run was lost after 1 of 1 epoch(s)"
            assert "the run was still training when this store was copied" in said, r.out
            assert "was lost" not in said, r.out
