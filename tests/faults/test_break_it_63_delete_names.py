"""Break-it round 62, V2 cause 3: `runs delete --force` of a run that `distill`, `scale` or
`detect finetune` trains.

Before: the delete marks the run it stops and sends its process SIGTERM; `dlperf run` and a
sweep read the mark and said "run N stopped: `dlperf runs delete` (pid P) is deleting it"
(the line lived in cli/run.py), but distill ended with "distill study 1 stopped; continue it
...", scale with "scale study 1 stopped; a scale study is not continued ...", both as if
Ctrl-C had stopped them, and `detect finetune` with no line at all.

Now each says the same line, from one library helper (`dlperf.store.deleting`), before the
study's own stop line: distill of the stage's run, scale of the point's run (read before it
is marked killed), detect of its run (as it is recorded, for `detect eval` too).
"""

from __future__ import annotations

import json
import os
import time
from multiprocessing.process import BaseProcess
from pathlib import Path

import pytest
import torch

from dlperf.detect import finetune, voc
from dlperf.detect.ssd import Detector
from dlperf.procs import this_process
from dlperf.progress import NullReporter
from dlperf.store import RunStore, query
from dlperf.store.deleting import deleting_line
from tests.conftest import write_distill_exp
from tests.distributed.test_study import WEAK, write_experiment
from tests.faults.test_store_faults import DEADLINE_S, _ended, forked_dlperf
from tests.hooks import hook_env

PARKED = "parked"


def _line(run_id: int) -> str:
    """What the stopped command says: this test's process is the delete that stopped it."""
    return f"run {run_id} stopped: `dlperf runs delete` (pid {os.getpid()}) is deleting it"


def _parked(root: Path, db: str, args: list[str], step: int) -> BaseProcess:
    """`dlperf ARGS` as a real process (stderr to root/err.txt), parked once a training step
    `step` is done (in a scale worker too: torchrun hands its environment on)."""
    env = {"DLPERF_DB": db, **hook_env("pause_at_step", f"{step}:{root / PARKED}")}
    proc = forked_dlperf(root, args, root / "err.txt", env)
    deadline = time.monotonic() + DEADLINE_S
    while not (root / PARKED).exists():
        assert proc.is_alive(), (root / "err.txt").read_text()
        assert time.monotonic() < deadline, f"not parked in {DEADLINE_S} s"
        time.sleep(0.1)
    return proc


def _deleted(root: Path, db: str, args: list[str], step: int, run_id: int) -> list[str]:
    """Park `dlperf ARGS`, stop its run `run_id` as `runs delete --force` does (mark, SIGTERM,
    wait for the mark killed), then delete the run once the process has ended (read after its
    stop, the run is still there to read): the process's stderr lines."""
    proc = _parked(root, db, args, step)
    store = RunStore.open(db)
    try:
        (stopped,) = query.stop(store, [store.get_run(run_id)])
        assert stopped.said() == (f"stopped run {run_id}: pid {proc.pid} marked it killed", False)
        assert _ended(proc) == 143  # 128 + SIGTERM
        store.delete_runs([run_id], force=True)
    finally:
        proc.kill()
        proc.join()
        store.engine.dispose()
    return (root / "err.txt").read_text().splitlines()


def test_the_line_is_runs_line() -> None:
    """One helper makes the line `run` said (tests/faults/test_break_it_60_delete_force.py)."""
    assert deleting_line(7, 4242) == "run 7 stopped: `dlperf runs delete` (pid 4242) is deleting it"


@pytest.mark.faults  # a real process, parked: over 10 s under load
def test_a_distill_stage_stopped_by_runs_delete_force_says_so(db: str, tmp_path: Path) -> None:
    """The teacher's run (run 1) parked at its first step: the delete's line, then the
    study's own line to continue it (the stage is trained anew then)."""
    path = write_distill_exp(tmp_path, '[distill]\nunlabeled = "digits:holdout=0.5"\n')
    lines = _deleted(tmp_path, db, ["distill", str(path), "--top-k", "2"], 1, 1)
    assert "Traceback" not in "\n".join(lines)
    assert lines[-2:] == [
        _line(1),
        "distill study 1 stopped; continue it (the stages that finished are skipped): "
        f"dlperf distill {path} --top-k 2 --resume 1",
    ], lines


@pytest.mark.faults  # a real process, parked: over 10 s under load
def test_a_detect_finetune_stopped_by_runs_delete_force_says_so(db: str, tmp_path: Path) -> None:
    """It ended 143 with no word: now the delete's line, its last."""
    voc.make_shapes(tmp_path / "shapes", images=4, size=96, seed=2)
    args = ["detect", "finetune", str(tmp_path / "shapes"), "--size", "96", "--batch", "2",
            "--epochs", "2", "--threads", "1", "--out", str(tmp_path / "d.pt")]  # fmt: skip
    lines = _deleted(tmp_path, db, args, 1, 1)
    assert lines[-1:] == [_line(1)], lines
    assert not (tmp_path / "d.pt").exists()


def test_a_detect_run_says_it_before_its_run_is_marked(store: RunStore, tmp_path: Path) -> None:
    """`detect_run` (finetune's and eval's recording) reads its run inside the recording, as
    the delete's mark left it; a stop not made by a delete says nothing."""
    det = Detector(None, "ssd300_vgg16", 300, ["bg", "a"])
    said: list[str] = []

    class Told(NullReporter):
        def log(self, message: str) -> None:
            said.append(message)

    for marked in (False, True):
        with (
            pytest.raises(KeyboardInterrupt),
            finetune.detect_run(
                store, "eval", tmp_path, det, {}, None, torch.device("cpu"), 1, None, Told()
            ) as record,
        ):
            if marked:  # as query.stop marks it, with this (live) process as the delete
                store.set_tags(record.id, {query.DELETING_TAG: json.dumps(this_process())})
            raise KeyboardInterrupt
        assert store.get_run(record.id).status == "killed"
    assert said == [_line(2)]


@pytest.mark.faults  # a torchrun launch: over 10 s under load
def test_a_scale_point_stopped_by_runs_delete_force_says_so(db: str, tmp_path: Path) -> None:
    """The point's worker parked at its first step: the study's process, which records the
    point's run, says the delete's line, then that the study is measured anew."""
    exp = write_experiment(tmp_path)
    args = ["scale", "run", str(exp), *WEAK, "--workers", "1", "--steps", "50",
            "--no-comm-split", "--threads-per-worker", "1"]  # fmt: skip
    lines = _deleted(tmp_path, db, args, 1, 1)
    assert lines[-2:] == [
        _line(1),
        "scale study 1 stopped; a scale study is not continued: run the command again to "
        "measure it anew",
    ], lines
