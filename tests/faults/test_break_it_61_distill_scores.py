"""Break-it round 61, fixer H1: distill's teacher is tried at the pool's batch sizes before
anything is stored, and what it returns as it scores the pool is checked.

U1's cause 5. `run`'s checks try a model at 2 and 3 images, the run's batch size and the
evaluation splits' last batches; distill then scored the pool at distill.score_batch (256)
and at the pool's last batch (1035 % 256 = 11 images), sizes no check had tried, and read
what the teacher returned there unchecked. A forward returning a sparse tensor at 256 was a
154-line traceback (torch's softmax refusing the SparseCPU backend) after the teacher and
the baseline had trained; one returning 255 rows for 256 images had its scores taken against
the wrong images (the last of each batch unscored); one returning NaN gave 1024 of the 1035
images NaN scores, read by the selection as class 0, with exit 0, a pseudo-label precision
of 0 and students pretrained on them.

Now the plan tries the teacher's model at distill.score_batch and the pool's last batch, as
`run` tries its batch sizes (engine.checks.check_run_batch): one line in `run`'s words, exit
2, nothing stored. What it returns while scoring (real images, trained weights) is checked
batch by batch as a run's scores are (a tensor, dense, float, one row of scores per image):
one line, exit 2; and scores that are NaN or inf are refused in one line that says for how
many images, rather than selected from.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from dlperf.distill.select import select
from dlperf.store import RunStore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

EXP = """
[model]
name = "m.py:make"
[data]
name = "digits"
[train]
epochs = 1
batch_size = 32
lr = 0.05
[run]
name = "dist"
threads = 1
[distill]
unlabeled = "digits:holdout=0.8"
top_k = [10]
"""

# Each model is sound at every batch size but one; the "real" ones only for real images
# (the plan's checks feed zeros), so that only the scoring meets them.
MODELS = """
import torch, torch.nn as nn

class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.c = nn.Conv2d(in_channels, 8, 3, padding=1)
        self.f = nn.Linear(8, num_classes)
    def forward(self, x):
        return self.f(torch.relu(self.c(x)).mean((2, 3)))

def make(num_classes=10, in_channels=1):
    return Net(num_classes, in_channels)

class Odd(Net):
    size = 256
    real = False
    def change(self, y):
        return y
    def forward(self, x):
        y = super().forward(x)
        hit = x.shape[0] == self.size and (bool((x != 0).any()) or not self.real)
        return self.change(y) if hit else y

class Sparse(Odd):
    def change(self, y):
        return y.to_sparse()

class Rows(Odd):
    def change(self, y):
        return y[:-1]

class LastRows(Rows):
    size = 11

class RealSparse(Sparse):
    real = True

class RealRows(Rows):
    real = True

class RealNan(Odd):
    real = True
    def change(self, y):
        return y * float("nan")

def sparse(num_classes=10, in_channels=1): return Sparse(num_classes, in_channels)
def rows(num_classes=10, in_channels=1): return Rows(num_classes, in_channels)
def last_rows(num_classes=10, in_channels=1): return LastRows(num_classes, in_channels)
def real_sparse(num_classes=10, in_channels=1): return RealSparse(num_classes, in_channels)
def real_rows(num_classes=10, in_channels=1): return RealRows(num_classes, in_channels)
def real_nan(num_classes=10, in_channels=1): return RealNan(num_classes, in_channels)
"""

SCORE = "distill's scoring, distill.score_batch"
LAST = "distill's scoring: the last batch of the 1035 unlabelled images"
ROWS_HINT = (
    "take the batch from the input and keep it: x.flatten(1), not .squeeze() (which drops a "
    "batch of one) nor a slice of the batch"
)

BEFORE = {
    "sparse": (
        "sparse",
        f"error: model '{{m}}:sparse' for a batch of 256 images ({SCORE}) returns a tensor of "
        "layout torch.sparse_coo; expected one row of scores per image, [256, classes] "
        "(return them dense: y.to_dense())",
    ),
    "rows": (
        "rows",
        f"error: model '{{m}}:rows' returns shape [255, 10] for a batch of 256 images ({SCORE}); "
        f"expected one row of scores per image, [256, classes] ({ROWS_HINT})",
    ),
    "last-batch": (
        "last_rows",
        f"error: model '{{m}}:last_rows' returns shape [10, 10] for a batch of 11 images "
        f"({LAST}); expected one row of scores per image, [11, classes] ({ROWS_HINT})",
    ),
}


@pytest.fixture
def models(db: str, tmp_path: Path) -> Path:
    (tmp_path / "m.py").write_text(MODELS)
    (tmp_path / "dist.toml").write_text(EXP)
    return tmp_path


@pytest.mark.parametrize("case", BEFORE)
def test_teacher_tried_at_the_scoring_batches_before_the_study(
    cli: Cli, db: str, models: Path, case: str
) -> None:
    """A teacher model wrong at distill.score_batch, or at the pool's last batch, is refused
    by the plan: one line, exit 2, no study, no run (it trained the teacher and the baseline
    first, then failed in a traceback or scored the wrong images)."""
    model, said = BEFORE[case]
    r = cli("distill", "dist.toml", "--set", f"model.name=m.py:{model}")
    assert r.code == 2, r.err
    assert r.err.strip() == said.format(m=models / "m.py")  # the config's path, resolved
    store = RunStore.open(db)
    assert store.find_study("dist", "distill") is None
    assert store.list_runs() == []
    assert not list(models.glob("dlperf_runs/*/study-*")), "a study folder was made"


def test_given_teacher_tried_at_the_scoring_batch(cli: Cli, db: str, models: Path) -> None:
    """A stored teacher (--teacher) is tried too, before the baseline trains."""
    sets = ("model.name=m.py:sparse", "data.holdout=0.8", "run.checkpoint=true")
    r = cli("run", "dist.toml", *(arg for value in sets for arg in ("--set", value)))
    assert r.code == 0, r.err
    r = cli("distill", "dist.toml", "--teacher", "1", "--student", "m.py:make")
    assert r.code == 2, r.err
    assert r.err.strip() == (
        f"error: model '{models / 'm.py'}:sparse' of teacher run 1 for a batch of 256 images "
        f"({SCORE}) returns a tensor of layout torch.sparse_coo; expected one row of scores "
        "per image, [256, classes] (return them dense: y.to_dense())"
    )
    assert [run.id for run in RunStore.open(db).list_runs()] == [1]  # no baseline trained


SCORING = {
    "sparse": (
        "real_sparse",
        f"error: model '{{m}}:real_sparse' of teacher run 1 for a batch of 256 images ({SCORE}) "
        "returns a tensor of layout torch.sparse_coo; expected one row of scores per image, "
        "[256, 10] (return them dense: y.to_dense())",
    ),
    "rows": (
        "real_rows",
        f"error: model '{{m}}:real_rows' of teacher run 1 returns shape [255, 10] for a batch of "
        f"256 images ({SCORE}); expected one row of scores per image, [256, 10] ({ROWS_HINT})",
    ),
    "nan": (
        "real_nan",
        "error: teacher run 1 (model '{m}:real_nan') gives NaN or inf scores for 1024 of the "
        "1035 unlabelled images: there is no selection to make from them (look at its forward "
        "for these images at distill.score_batch 256, or give --teacher another run)",
    ),
}


@pytest.mark.parametrize("case", SCORING)
def test_scores_checked_as_they_come(cli: Cli, db: str, models: Path, case: str) -> None:
    """What the trained teacher returns for the pool's images is checked batch by batch, and
    NaN scores are counted and refused: one line, exit 2, no select run (a traceback, or a
    selection from misaligned or NaN scores with exit 0)."""
    model, said = SCORING[case]
    # the student is the teacher's model and recipe: the teacher is the baseline, and the
    # scoring follows its training
    r = cli("distill", "dist.toml", "--set", f"model.name=m.py:{model}")
    assert r.code == 2, r.err
    assert r.err.strip().splitlines()[-1] == said.format(m=models / "m.py")
    assert "Traceback" not in r.err
    runs = RunStore.open(db).list_runs()
    assert [(run.id, run.kind, run.status) for run in runs] == [(1, "run", "finished")]


def test_select_takes_finite_scores_only() -> None:
    """The selection itself refuses NaN scores: torch's sort puts a NaN above every score, so
    an image of NaN scores was kept first for its first class."""
    scores = torch.tensor([[0.9, 0.1], [float("nan")] * 2, [0.2, 0.8]])
    with pytest.raises(ValueError) as refused:
        select(scores, 1, 1)
    assert str(refused.value) == "scores must be finite: 1 of the 3 images have NaN or inf"
    assert select(scores[[0, 2]], 1, 1).kept == [1, 1]
