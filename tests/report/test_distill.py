"""dlperf.report.distill: the figure `dlperf distill` draws, and its file's name."""

from __future__ import annotations

from pathlib import Path

from dlperf.distill.summary import BaselineRow, DistillResult, StudentRow, TeacherRow
from dlperf.report.distill import distill_figure, figure_name


def result(directory: Path, model: str, unlabeled: str) -> DistillResult:
    row = StudentRow(2, 1, 3, [2, 1], 0.5, [0.5, None], 900.0, 3, False, pretrain_run_id=4,
                     finetune_run_id=5, test_accuracy=0.8, status="finished")  # fmt: skip
    return DistillResult(7, "dist", TeacherRow(1, model, 0.9, None, False),
                         BaselineRow(6, model, 0.7), [row], 3, ["a", "b"], unlabeled,
                         str(directory))  # fmt: skip


def test_the_name_is_the_recipe() -> None:
    name = figure_name(result(Path("/d"), "smallcnn", "digits:holdout=0.5"))
    assert name == "distill_top-p1_top-k2_smallcnn_digits-holdout-0.5.png"


def test_a_model_named_by_its_file_path_is_drawn_into_the_study_directory(
    tmp_path: Path,
) -> None:
    # A model given as /abs/path/file.py:Factory wrote to a path under the study's directory
    # that did not exist, after every stage had trained.
    model = f"{tmp_path}/my models/net.py:Net"
    done = result(tmp_path, model, f"{tmp_path}/pool")
    figure = distill_figure(done)
    assert figure is not None and figure.parent == tmp_path and figure.is_file()
    assert "my-models-net.py-Net_" in figure.name


def test_a_long_recipe_keeps_its_name_within_a_file_name(tmp_path: Path) -> None:
    done = result(tmp_path, "m" * 300 + ".py:Net", "p" * 300)
    figure = distill_figure(done)
    assert figure is not None and figure.is_file() and len(figure.name.encode()) <= 255
