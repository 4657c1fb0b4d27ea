"""dlperf.cli.distill: the options as [distill] keys, the summary tables and verdict from a
hand-made result, --json, exit 1 when a stage failed (the study's running faked: tests/distill
runs real ones), and bad input as one line, exit 2."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dlperf.cli import app
from dlperf.cli.distill import _kept
from dlperf.distill import runner
from dlperf.distill.summary import BaselineRow, DistillResult, StudentRow, TeacherRow
from dlperf.report import distill as distill_report
from tests.cli.test_app import one_line_error
from tests.conftest import REPO, CliResult

EXP = str(REPO / "examples" / "distill_digits.toml")


def _student(k: int, acc: float | None, kept: list[int], precision: list[float | None] | None,
             **kw: Any) -> StudentRow:  # fmt: skip
    return StudentRow(top_k=k, top_p=1, selected=sum(kept), kept=kept,
                      pseudo_label_precision=0.9, class_precision=precision,
                      scoring_images_per_s=5000.0, select_run_id=3, select_reused=False,
                      pretrain_run_id=4, finetune_run_id=5, test_accuracy=acc, **kw)  # fmt: skip


def _result(error: str | None = None, same: bool = False) -> DistillResult:
    teacher = TeacherRow(1, "resnet20", 0.9, 4321.0, False)
    baseline = BaselineRow(2, "smallcnn", 0.92, same_as_teacher=same)
    students = [_student(10, 0.95, [5, 5], [1.0, 0.8]), _student(20, 0.94, [9, 10], None)]
    return DistillResult(7, "digits", teacher, baseline, students, 10, ["zero", "one"],
                         "digits:holdout=0.8", "runs/distill-7", error)  # fmt: skip


def test_kept_shows_each_class_count_with_its_precision_where_known() -> None:
    student = _student(10, 0.9, [5, 3], [1.0, None])
    assert [_kept(student, c) for c in (0, 1)] == ["5 (1.00)", "3"]
    assert _kept(_student(10, 0.9, [4], None), 0) == "4"


def test_help_ends_with_an_example() -> None:
    done = CliRunner().invoke(app, ["distill", "--help"])
    assert done.exit_code == 0
    assert "Example: dlperf distill examples/distill_digits.toml --top-k 25,50,100" in done.output


class Distilling:
    """run_distill faked: the jobs it was given kept, `result` returned."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.result = _result()

    def __call__(self, job: Any, store: Any, resume: Any, new: bool, rep: Any) -> DistillResult:
        self.calls.append((job, resume, new))
        return self.result


@pytest.fixture
def distilled(monkeypatch: pytest.MonkeyPatch) -> Distilling:
    distilling = Distilling()
    monkeypatch.setattr(runner, "run_distill", distilling)
    monkeypatch.setattr(distill_report, "distill_figure", lambda result: Path("d.png"))
    return distilling


def test_options_are_the_distill_keys(cli: Callable[..., CliResult], distilled: Distilling) -> None:
    result = cli("distill", EXP, "--unlabeled", "mnist5k:image_size=8", "--top-k", "25,50",
                 "--top-p", "2", "--student", "resnet20", "--pretrain-epochs", "3",
                 "--finetune-epochs", "4", "--finetune-lr", "0.01", "--resume", "7",
                 "--json")  # fmt: skip
    assert result.code == 0, result.err
    [(job, resume, new)] = distilled.calls
    d = job.distill
    assert (d.unlabeled, d.top_k, d.top_p, d.student) == ("mnist5k:image_size=8", [25, 50], 2,
                                                          "resnet20")  # fmt: skip
    assert (d.pretrain_epochs, d.finetune_epochs, d.finetune_lr) == (3, 4, 0.01)
    assert (resume, new) == (7, False)


def test_json_is_the_result_with_its_plots(
    cli: Callable[..., CliResult], distilled: Distilling
) -> None:
    result = cli("distill", EXP, "--new", "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out) == _result().to_dict() | {"plots": ["d.png"]}
    assert distilled.calls[0][2] is True


def test_tables_and_the_verdict(cli: Callable[..., CliResult], distilled: Distilling) -> None:
    result = cli("distill", EXP)
    assert result.code == 0, result.err
    out = result.out
    assert "distill 'digits', study 7" in out and "3 > 4 > 5" in out
    assert "images kept per class (pseudo-label precision)" in out
    assert "5 (1.00)" in out and "5 (0.80)" in out
    assert "teacher scoring: 4,321 images/s" in out
    # K = 10 wins with 0.95: +0.05 over the teacher's 0.9, +0.03 over the baseline's 0.92
    assert ("best K = 10: 0.9500, +0.0500 over the teacher (0.9000, run 1); +0.0300 over the "
            "baseline (0.9200, run 2)") in out  # fmt: skip
    assert result.err.splitlines()[-1] == "saved d.png"


def test_a_baseline_that_is_the_teacher_is_said_once(
    cli: Callable[..., CliResult], distilled: Distilling
) -> None:
    distilled.result = _result(same=True)
    result = cli("distill", EXP)
    assert result.code == 0, result.err
    assert "the teacher itself" in result.out
    assert "over the baseline" not in result.out
    assert "; the teacher is also the baseline" in result.out


def test_a_stage_that_failed_stops_the_study_and_exits_1(
    cli: Callable[..., CliResult], distilled: Distilling
) -> None:
    distilled.result = _result(error="K=20 pretrain: loss became nan at step 2")
    result = cli("distill", EXP)
    assert result.code == 1
    assert "stopped: K=20 pretrain: loss became nan at step 2" in result.err
    as_json = cli("distill", EXP, "--json")
    assert as_json.code == 1
    assert json.loads(as_json.out)["error"] == "K=20 pretrain: loss became nan at step 2"


@pytest.mark.parametrize(
    ("args", "text"),
    [
        ([EXP, "--top-k", "x"], "--top-k: distill.top_k.0: Input should be a valid integer"),
        ([EXP, "--top-k", "10,0"], "--top-k: distill.top_k.1: must be at least 1 (got 0)"),
        ([EXP, "--top-p", "0"], "--top-p: distill.top_p: must be at least 1 (got 0)"),
        ([EXP, "--finetune-lr", "-1"], "--finetune-lr: distill.finetune_lr: must be greater"),
        ([EXP, "--set", "distill.topk=5"], "unknown key 'distill.topk'"),
        (["missing.toml"], "missing.toml: no such experiment file"),
        ([EXP, "--teacher", "x"], "Invalid value for '--teacher'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    cli: Callable[..., CliResult], args: list[str], text: str
) -> None:
    one_line_error(cli("distill", *args), text)
