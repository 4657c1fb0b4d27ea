"""dlperf.distill.summary: the best student and the sentence that says by how much it won."""

from __future__ import annotations

from typing import Any

from dlperf.distill.summary import best, verdict


def student(top_k: int, accuracy: float | None) -> dict[str, Any]:
    return {"top_k": top_k, "test_accuracy": accuracy}


def test_the_best_student_is_the_most_accurate_and_the_smaller_k_on_a_tie() -> None:
    assert best([student(10, 0.90), student(50, 0.95), student(100, 0.93)]) == student(50, 0.95)
    assert best([student(100, 0.95), student(50, 0.95)]) == student(50, 0.95)
    assert best([student(10, None), student(20, 0.5)]) == student(20, 0.5)  # a failed K
    assert best([student(10, None)]) is None and best([]) is None


def test_the_verdict_names_each_gain_with_its_run() -> None:
    won = student(50, 0.9694)
    teacher = {"run_id": 1, "test_accuracy": 0.9415}
    baseline = {"run_id": 2, "test_accuracy": 0.95, "same_as_teacher": False}
    assert verdict(won, teacher, baseline) == (
        "best K = 50: 0.9694, +0.0279 over the teacher (0.9415, run 1); "
        "+0.0194 over the baseline (0.9500, run 2)"
    )
    itself = {**teacher, "same_as_teacher": True}
    assert verdict(won, teacher, itself) == (
        "best K = 50: 0.9694, +0.0279 over the teacher (0.9415, run 1); "
        "the teacher is also the baseline"
    )
    unmeasured = {"run_id": 1, "test_accuracy": None}  # a teacher reused without a test
    assert verdict(student(10, 0.9), unmeasured, baseline) == (
        "best K = 10: 0.9000, -0.0500 over the baseline (0.9500, run 2)"
    )
