"""What a distill study found, without torch (the report reads it too): the result of one
`dlperf distill` command, its stages' records, the best K, and the sentence that says by how
much it won."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dlperf.records import Record


@dataclass(frozen=True)
class Trained(Record):
    """A teacher or a baseline as the figure and the verdict read it."""

    run_id: int
    model: str | None
    test_accuracy: float | None


@dataclass(frozen=True)
class TeacherRow(Trained):
    scoring_images_per_s: float | None
    reused: bool


@dataclass(frozen=True)
class BaselineRow(Trained):
    reused: bool = False  # by this command; the report's rows are no command's
    same_as_teacher: bool = False


@dataclass(frozen=True)
class Point:
    """A student as the figure and `best` read it: the report's, of a finished fine-tuning."""

    top_k: int
    top_p: int
    test_accuracy: float | None
    pseudo_label_precision: float | None


@dataclass(frozen=True)
class StudentRow(Record):
    """One K: its select run's figures, then its pretrain and finetune runs (None where the
    study stopped before them)."""

    top_k: int
    top_p: int
    selected: int
    kept: list[int]  # per class
    pseudo_label_precision: float | None  # None: the pool has no labels to check
    class_precision: list[float | None] | None
    scoring_images_per_s: float | None
    select_run_id: int
    select_reused: bool
    pretrain_run_id: int | None = None
    finetune_run_id: int | None = None
    pretrain_test_accuracy: float | None = None
    test_accuracy: float | None = None
    pretrain_batch_size: int | None = None
    status: str = "finished"
    error: str | None = None


@dataclass
class DistillResult(Record):
    study_id: int
    name: str
    teacher: TeacherRow | None  # None: the study stopped before it
    baseline: BaselineRow | None
    students: list[StudentRow]  # one per K, in the order given
    best_top_k: int | None
    classes: list[str]
    unlabeled: str  # the pool, as --unlabeled gave it
    directory: str  # the study's own directory: the pseudo-labelled files, and its figures
    error: str | None = None  # the stage that failed, which ended the study early

    def to_dict(self) -> dict[str, Any]:
        """`dlperf distill --json`'s document but its plots: a stage not reached is {}."""
        data = super().to_dict()
        return data | {stage: {} for stage in ("teacher", "baseline") if data[stage] is None}


Student = StudentRow | Point  # what `best`, `verdict` and the figure read


def best(students: Sequence[Student]) -> Student | None:
    """The student of the highest test accuracy (the smaller K on a tie)."""
    done = [s for s in students if s.test_accuracy is not None]
    return max(done, key=lambda s: (s.test_accuracy or 0.0, -s.top_k)) if done else None


def verdict(
    student: Student, teacher: Trained | None, baseline: BaselineRow | None, percent: bool = False
) -> str:
    """'best K = 50: 0.9694, +0.0279 over the teacher (0.9415, run 1); ...', as `dlperf
    distill` prints it below its table of fractions; with `percent`, as the report's pages show
    accuracies: 'best K = 50: 96.9%, +2.8 points over the teacher (94.2%, run 1); ...'."""

    def shown(fraction: float) -> str:
        return f"{100 * fraction:.1f}%" if percent else f"{fraction:.4f}"

    def gain(difference: float) -> str:
        return f"{100 * difference:+.1f} points" if percent else f"{difference:+.4f}"

    accuracy = student.test_accuracy or 0.0  # the best student's: it has one
    same = baseline is not None and baseline.same_as_teacher
    others = [("teacher", teacher)] + ([] if same else [("baseline", baseline)])
    gains = [
        f"{gain(accuracy - run.test_accuracy)} over the {name} "
        f"({shown(run.test_accuracy)}, run {run.run_id})"
        for name, run in others
        if run is not None and run.test_accuracy is not None
    ]
    also = "; the teacher is also the baseline" if same else ""
    return f"best K = {student.top_k}: {shown(accuracy)}, {'; '.join(gains)}{also}"
