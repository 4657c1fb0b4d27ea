"""Break-it round 55, fixer G4: `dlperf distill` checks every labelled stage as `dlperf run`
checks a run, before its study is made.

T2's C1. docs/distill.md says bad input is "checked before the study is made", but distill's
plan made only some of the checks `dlperf run` makes up front: a train.batch_size larger than
the labelled training images, a target.accuracy with an empty validation split, a training
split of one class (`--unlabeled digits:holdout=0.999`) were refused by the teacher stage's
run, after the study row and its dlperf_runs/<id>/study-N/ folder were made: one line, exit 2,
and an empty study left in `report` under the experiment's name. So were a teacher model
that does not build (an unknown model.kwargs key with another --student: only the student was
built up front), a run.profile window longer than the fine-tuning's distill.finetune_epochs
train (refused once the teacher had trained, scored and selected) and one longer than any
pretrain run of a K can train, whatever the teacher keeps. Now the plan puts the teacher's
and the baseline's experiments through the checks `run` makes before recording a run
(engine.build.check_unrecorded, a sweep's too), the fine-tuning's epochs and each K's most
pretrain steps through the profile window's: one line, exit 2, no "study" line, no study
row, no folder.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

EXP = """
[model]
name = "smallcnn"
[data]
name = "digits"
limit = 256
[train]
epochs = 1
batch_size = 16
lr = 0.05
[run]
threads = 1
[distill]
unlabeled = "digits:holdout=0.5"
top_k = [4]
"""

CASES = {
    "batch": (
        ["--set", "data.limit=16", "--set", "train.batch_size=32"],
        "error: train.batch_size 32 is larger than the 16 training images of digits",
    ),
    "target": (
        ["--set", "data.val_fraction=0", "--set", "target.accuracy=0.9"],
        "error: target.accuracy is measured on the validation split, which is empty",
    ),
    "one-class": (
        ["--unlabeled", "digits:holdout=0.999", "--set", "train.batch_size=1"],
        "a classifier needs at least 2 classes",
    ),
    "teacher-model": (
        ["--set", "model.kwargs={nope=1}", "--student", "resnet20"],
        "error: model 'smallcnn' does not accept nope",
    ),
    "finetune-profile": (
        [
            *("--set", "run.profile.enabled=true", "--set", "run.profile.active=20"),
            *("--set", "run.warmup_steps=5", "--set", "train.epochs=3"),
            *("--set", "distill.finetune_epochs=1"),
        ],
        "error: the finetune stage (distill.finetune_epochs = 1): run.profile records steps "
        "6..26 and throughput is timed after them, but this run trains 16 steps",
    ),
    "pretrain-profile": (
        [
            *("--set", "run.profile.enabled=true", "--set", "run.profile.active=20"),
            *("--set", "run.warmup_steps=5", "--set", "train.epochs=3"),
        ],
        "error: the pretrain stage of K = 4 (at most 40 images kept, distill.pretrain_epochs = "
        "3): run.profile records steps 6..26 and throughput is timed after them, but this run "
        "trains 6 steps",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_distill_refuses_before_its_study(cli: Cli, db: str, tmp_path: Path, case: str) -> None:
    """Each mistake `run` refuses before recording is refused before the study: one line,
    exit 2, nothing stored, no study folder."""
    (tmp_path / "dist.toml").write_text(EXP)
    args, said = CASES[case]
    r = cli("distill", "dist.toml", *args)
    assert r.code == 2, r.err
    assert said in r.err
    assert len(r.err.strip().splitlines()) == 1, r.err  # no "distill 'dist', study 1" line
    store = RunStore.open(db)
    assert store.find_study("dist", "distill") is None
    assert store.list_runs() == []
    assert not list(tmp_path.glob("dlperf_runs/*/study-*")), "a study folder was made"


def test_run_refuses_the_same(cli: Cli, db: str, tmp_path: Path) -> None:
    """The teacher's refusals are `run`'s own lines (the batch case, say)."""
    (tmp_path / "dist.toml").write_text(EXP)
    r = cli("run", "dist.toml", "--set", "data.limit=16", "--set", "train.batch_size=32")
    assert r.code == 2
    assert CASES["batch"][1] in r.err
