"""Break-it round 51, fixer H1: a copy of a store made in its run's first epoch.

T2 C2 (message, both backends): `doctor` in a copy of a store made while a run trained named
the original for the copy's row of that run (round 50: "its process wrote X (this store is a
copy of it), where it went on") only when the run had done an epoch, kept checkpoints and
still had its checkpoint: a copy made in the first epoch (or of a run with `run.checkpoint =
false`, or whose checkpoint is gone since) was told "run it again: it stopped before its first
epoch's checkpoint", of a run that never stopped but went on (here: finished) in the
original, which was not named. The copy's advice now comes first, whatever the epochs done
and the checkpoint. And `run --resume N` in that copy said "(it stopped before its first
epoch ended; start it again)": it now says whose the run is and where it went on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.conftest import CliResult, finished, fresh_store_url, python_child
from tests.faults.test_break_it_47_copies import _copied

# A run's process as a store sees it, training three runs until a line comes on stdin: one
# in its first epoch (no epoch done, no checkpoint), one with `run.checkpoint = false` after
# an epoch, and one after an epoch whose checkpoint the test deletes. Prints their ids.
WRITER = """
import contextlib
import sys
from pathlib import Path

from dlperf import stopping
from dlperf.store import RunStore
from dlperf.store.query import EXPERIMENT_SECTIONS


def command() -> int:
    store = RunStore.open(sys.argv[1])
    ids = []
    for name, keep, done in [("first", True, 0), ("nockpt", False, 1), ("gone", True, 1)]:
        config = {section: {} for section in EXPERIMENT_SECTIONS}
        config["train"]["epochs"] = 2
        config["run"]["checkpoint"] = keep
        run_id = store.create_run(name, "run", config, system={})
        if done:
            store.log_metrics(run_id, [("epoch/train_loss", 1, 0.5)])
        if keep and done:
            checkpoint = Path(sys.argv[2])
            checkpoint.write_bytes(b"weights")
            store.add_artifact(run_id, "checkpoint", checkpoint)
        ids.append(run_id)
    with contextlib.ExitStack() as runs:
        for run_id in ids:
            runs.enter_context(store.recording(run_id))
        print(*ids, flush=True)
        sys.stdin.readline()
    return 0


stopping.run(command, process=True)
"""


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def copied(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[list[int], str, str]]:
    """A store copied while its process trained the three runs of WRITER, that process ended
    since (the copy's rows of them read as lost) and the third's checkpoint deleted: the runs'
    ids, the copy's URL and what the copy calls the original. Once per backend: the tests
    only read the copy (a refused resume writes nothing)."""
    tmp_path = tmp_path_factory.mktemp(f"fx51-{request.param}")
    for original in fresh_store_url(request.param, tmp_path, "fx51"):
        checkpoint = tmp_path / "checkpoint.pt"
        with python_child(WRITER, original, str(checkpoint)) as writer:
            ids = [int(i) for i in writer.stdout.readline().split()]
            assert len(ids) == 3, writer.stderr.read() if writer.stderr else ""
            for copy_url, named in _copied(original, tmp_path):
                finished(writer)  # its runs finish in the original
                checkpoint.unlink()
                yield ids, copy_url, named


def test_doctor_in_a_copy_names_the_original_whatever_the_epochs_and_checkpoint(
    cli: Callable[..., CliResult], copied: tuple[list[int], str, str]
) -> None:
    ids, copy_url, named = copied
    for run_id in ids:
        r = cli("--db", copy_url, "doctor", str(run_id))
        said = " ".join(r.out.split())
        # round 52: "the run was lost after 0 of 2 epoch(s)" before (the copy's row reads lost)
        assert "unfinished: the run was still training when this store was copied" in said, r.out
        # before: "run it again: it stopped before its first epoch's checkpoint", "(it kept
        # no checkpoint: run.checkpoint = false)", "its checkpoint ... is gone"
        assert f"its process wrote {named} (this store is a copy of it), where it went on" in (
            said
        ), r.out
        assert "stopped" not in said and "kept no checkpoint" not in said, r.out
        assert "is gone" not in said and "--resume" not in said, r.out


def test_a_copys_resume_of_a_run_without_a_checkpoint_says_whose_it_is(
    cli: Callable[..., CliResult], copied: tuple[list[int], str, str]
) -> None:
    ids, copy_url, named = copied
    for run_id in ids[:2]:  # the first epoch's, and run.checkpoint = false's
        r = cli("--db", copy_url, "run", "--resume", str(run_id))
        assert r.code == 2, r.err
        said = " ".join(r.err.split())
        assert len(r.err.strip().splitlines()) == 1, r.err
        # before: "(it stopped before its first epoch ended; start it again)", "(it kept no
        # checkpoint: run.checkpoint = false; run it again)"
        assert f"error: run {run_id} has no checkpoint to resume from" in said, r.err
        assert f"its process wrote {named} (this store is a copy of it)" in said, r.err
        assert "stopped" not in said and "kept no checkpoint" not in said, r.err
