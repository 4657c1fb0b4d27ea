"""dlperf.report.site.figures: a sweep's, a staleness study's and a distill study's figures are
the commands' own figures, drawn in memory and fitted to the page like every other figure of
the report (html.png), not saved to a temporary file and read back."""

from __future__ import annotations

from typing import Any

import pytest
from matplotlib.figure import Figure

from dlperf.distill.summary import BaselineRow, StudentRow, TeacherRow
from dlperf.report.site import figures


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[Figure]:
    """The figures the report encodes, in order (each as html.png receives it)."""
    seen: list[Figure] = []
    monkeypatch.setattr(figures, "png", lambda fig: seen.append(fig) or "data:image/png;base64,")
    return seen


def _group(rank: int, lr: float, acc: float, time: float | None) -> dict[str, Any]:
    return {"rank": rank, "params": {"train.lr": lr}, "test_accuracy": acc,
            "test_accuracy_std": None, "time_to_target_s": time}  # fmt: skip


def test_a_sweeps_figures_are_its_commands_with_their_captions(drawn: list[Figure]) -> None:
    curves = [({"train.lr": 0.1}, [(1, 0.5), (2, 0.7)]), ({"train.lr": 0.2}, [(1, 0.6)])]
    groups = [_group(1, 0.2, 0.6, 3.0), _group(2, 0.1, 0.7, None)]
    shown = figures.sweep(curves, groups, {"train.lr": [0.1, 0.2]}, 0.65)
    assert [caption for caption, _ in shown] == [
        "validation error against epoch, each point's mean over its seeds",
        "accuracy vs train lr",
        "wall time to the target accuracy per point",
    ]
    assert len(drawn) == 3
    assert [b.get_width() for b in drawn[2].axes[0].patches] == [3.0, 0.0]  # time to target


def test_a_staleness_studys_figure_is_drawn_once_sync_beside_async(drawn: list[Figure]) -> None:
    shown = figures.staleness({"sync": [0.5, 0.6], "async": [0.4, 0.5]}, {"0": 3, "1": 5})
    assert [c for c, _ in shown] == [
        "validation accuracy per epoch, sync vs async; staleness histogram"
    ]
    [fig] = drawn
    curves, histogram = fig.axes
    assert [line.get_label() for line in curves.lines] == ["sync", "async"]
    assert [bar.get_height() for bar in histogram.patches] == [3, 5]


def test_a_distill_studys_figure_draws_each_student_against_k(drawn: list[Figure]) -> None:
    student = StudentRow(2, 1, 3, [2, 1], 0.5, [0.5, None], 900.0, 3, False, pretrain_run_id=4,
                         finetune_run_id=5, test_accuracy=0.8, status="finished")  # fmt: skip
    teacher, baseline = TeacherRow(1, "smallcnn", 0.9, None, False), BaselineRow(6, "m", 0.7)
    shown = figures.distill((7, "dist"), teacher, baseline, [student])
    assert [c for c, _ in shown] == [
        "student test accuracy against K (images kept per class), teacher and baseline"
    ]
    [fig] = drawn
    [ax] = fig.axes
    assert list(ax.lines[0].get_ydata()) == [0.8]
    assert ax.get_title() == "distill study 7 (dist), P = 1"
