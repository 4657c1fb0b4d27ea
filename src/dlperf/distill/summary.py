"""What a distill study found, without torch (the report reads it too): the result of one
`dlperf distill` command, the best K, and the sentence that says by how much it won."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class DistillResult:
    study_id: int
    name: str
    teacher: dict[str, Any]  # run_id, model, test_accuracy, scoring_images_per_s, reused
    baseline: dict[str, Any]  # run_id, model, test_accuracy, reused, same_as_teacher
    students: list[dict[str, Any]]  # one per K, in the order given
    best_top_k: int | None
    classes: list[str]
    unlabeled: str  # the pool, as --unlabeled gave it
    directory: str  # the study's own directory: the pseudo-labelled files, and its figures
    error: str | None = None  # the stage that failed, which ended the study early


def best(students: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The student of the highest test accuracy (the smaller K on a tie)."""
    done = [s for s in students if s.get("test_accuracy") is not None]
    return max(done, key=lambda s: (s["test_accuracy"], -s["top_k"])) if done else None


def verdict(student: dict[str, Any], teacher: dict[str, Any], baseline: dict[str, Any]) -> str:
    """'best K = 50: 0.9694, +0.0279 over the teacher (0.9415, run 1); ...'."""
    accuracy = student["test_accuracy"]
    others = [("teacher", teacher)]
    if not baseline.get("same_as_teacher"):
        others.append(("baseline", baseline))
    gains = [
        f"{accuracy - run['test_accuracy']:+.4f} over the {name} "
        f"({run['test_accuracy']:.4f}, run {run['run_id']})"
        for name, run in others
        if run.get("test_accuracy") is not None
    ]
    same = "; the teacher is also the baseline" if baseline.get("same_as_teacher") else ""
    return f"best K = {student['top_k']}: {accuracy:.4f}, {'; '.join(gains)}{same}"
