"""dlperf.distill.summary: the best student, the sentence that says by how much it won, and
the result's document."""

from __future__ import annotations

import json

from dlperf.distill.summary import (
    BaselineRow,
    DistillResult,
    Point,
    StudentRow,
    TeacherRow,
    Trained,
    best,
    verdict,
)


def student(top_k: int, accuracy: float | None) -> Point:
    return Point(top_k, 1, accuracy, None)


def test_the_best_student_is_the_most_accurate_and_the_smaller_k_on_a_tie() -> None:
    assert best([student(10, 0.90), student(50, 0.95), student(100, 0.93)]) == student(50, 0.95)
    assert best([student(100, 0.95), student(50, 0.95)]) == student(50, 0.95)
    assert best([student(10, None), student(20, 0.5)]) == student(20, 0.5)  # a failed K
    assert best([student(10, None)]) is None and best([]) is None


def test_the_verdict_names_each_gain_with_its_run() -> None:
    won = student(50, 0.9694)
    teacher = Trained(1, "resnet20", 0.9415)
    baseline = BaselineRow(2, "smallcnn", 0.95)
    assert verdict(won, teacher, baseline) == (
        "best K = 50: 0.9694, +0.0279 over the teacher (0.9415, run 1); "
        "+0.0194 over the baseline (0.9500, run 2)"
    )
    itself = BaselineRow(1, "resnet20", 0.9415, same_as_teacher=True)
    assert verdict(won, teacher, itself) == (
        "best K = 50: 0.9694, +0.0279 over the teacher (0.9415, run 1); "
        "the teacher is also the baseline"
    )
    unmeasured = Trained(1, "resnet20", None)  # a teacher reused without a test
    assert verdict(student(10, 0.9), unmeasured, baseline) == (
        "best K = 10: 0.9000, -0.0500 over the baseline (0.9500, run 2)"
    )
    assert verdict(student(10, 0.9), None, None) == "best K = 10: 0.9000, "  # neither found


def test_the_document_is_each_record_in_field_order_and_a_stage_not_reached_is_empty() -> None:
    row = StudentRow(2, 1, 3, [2, 1], 0.5, [0.5, None], 900.0, 3, False, pretrain_run_id=4,
                     status="failed", error="pretrain run 4 failed: loss became nan")  # fmt: skip
    result = DistillResult(7, "dist", TeacherRow(1, "smallcnn", 0.9, None, False),
                           BaselineRow(1, "smallcnn", 0.9, False, True), [row], None,
                           ["a", "b"], "digits:holdout=0.5", "/d", row.error)  # fmt: skip
    doc = result.to_dict()
    assert doc == json.loads(json.dumps(doc))
    assert doc["teacher"] == {"run_id": 1, "model": "smallcnn", "test_accuracy": 0.9,
                              "scoring_images_per_s": None, "reused": False}  # fmt: skip
    assert list(doc["baseline"]) == ["run_id", "model", "test_accuracy", "reused",
                                     "same_as_teacher"]  # fmt: skip
    assert doc["students"] == [{
        "top_k": 2, "top_p": 1, "selected": 3, "kept": [2, 1], "pseudo_label_precision": 0.5,
        "class_precision": [0.5, None], "scoring_images_per_s": 900.0, "select_run_id": 3,
        "select_reused": False, "pretrain_run_id": 4, "finetune_run_id": None,
        "pretrain_test_accuracy": None, "test_accuracy": None, "pretrain_batch_size": None,
        "status": "failed", "error": "pretrain run 4 failed: loss became nan"}]  # fmt: skip
    early = DistillResult(7, "dist", None, None, [], None, ["a"], "u", "/d", "teacher run 1 ...")
    assert list(early.to_dict().items())[:5] == [("study_id", 7), ("name", "dist"),
                                                 ("teacher", {}), ("baseline", {}),
                                                 ("students", [])]  # fmt: skip
