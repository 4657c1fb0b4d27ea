"""dlperf.cli.sweep: the summary's cells from hand-made groups (mean ± std (min-max), epochs
to target over the repeats that reached it), the command's tables, --json and exit codes
with the sweep's running faked (tests/sweep runs real ones), and bad input as one line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dlperf import sweep as sweep_package
from dlperf.cli import app
from dlperf.cli.sweep import _accuracy, _params, _reached, _spread
from dlperf.report import sweep as sweep_figures
from dlperf.sweep.runner import SweepResult
from dlperf.sweep.summary import SweepRow
from tests.cli.test_app import one_line_error
from tests.conftest import REPO, CliResult

BASE = REPO / "examples" / "digits_smallcnn.toml"


def _group(rank: int, lr: float, acc: float, *, repeats: int = 1, reached: int = 1,
           **kw: Any) -> dict[str, Any]:  # fmt: skip
    group: dict[str, Any] = {
        "rank": rank, "params": {"train.lr": lr}, "run_ids": [rank], "repeats": repeats,
        "finished": repeats, "reached_target": reached, "test_accuracy": acc,
        "test_accuracy_std": None, "test_accuracy_min": acc, "test_accuracy_max": acc,
    }  # fmt: skip
    for key in ("best_val_accuracy", "epochs_to_target", "time_to_target_s", "elapsed_s",
                "throughput"):  # fmt: skip
        group[key], group[f"{key}_std"] = 1.0, None
    return group | kw


def test_params_are_key_value_pairs_in_order() -> None:
    assert _params({"train.lr": 0.1, "augment.cutout": 4}) == "train.lr=0.1 augment.cutout=4"
    assert _params({}) == ""


def test_accuracy_of_one_repeat_is_the_figure_of_several_its_spread() -> None:
    assert _accuracy(_group(1, 0.1, 0.93)) == "0.93"
    spread = _group(1, 0.1, 0.9, test_accuracy_std=0.01, test_accuracy_min=0.889,
                    test_accuracy_max=0.91)  # fmt: skip
    assert _accuracy(spread) == "0.9000 ± 0.0100 (0.8890-0.9100)"


def test_spread_adds_the_std_where_there_is_one() -> None:
    assert _spread({"x": 12.5, "x_std": None}, "x") == "12.5"
    assert _spread({"x": 12345.6, "x_std": 1.5}, "x") == "12,346 ± 1.5"
    assert _spread({"x": None, "x_std": None}, "x") == "-"


def test_reached_counts_the_repeats_that_reached_the_target() -> None:
    assert _reached(_group(1, 0.1, 0.9, epochs_to_target=7)) == "7"
    assert _reached(_group(1, 0.1, 0.9, repeats=2, reached=1, epochs_to_target=9.0)) == "9 (1/2)"
    missed = _group(1, 0.1, 0.5, repeats=2, reached=0, epochs_to_target=None)
    assert _reached(missed) == "not reached (0/2)"
    unfinished = _group(1, 0.1, 0.5, reached=0, epochs_to_target=None) | {"finished": 0}
    assert _reached(unfinished) == "-"  # a failed point did not miss it: it never got there


def test_help_ends_with_an_example() -> None:
    done = CliRunner().invoke(app, ["sweep", "--help"])
    assert done.exit_code == 0
    assert "Example: dlperf sweep examples/sweeps/cutout_batchaug.toml" in done.output


def _row(run_id: int, lr: float, status: str = "finished", **kw: Any) -> SweepRow:
    return SweepRow(run_id=run_id, status=status, params={"train.lr": lr}, epochs=3, **kw)


@pytest.fixture
def sweep_file(tmp_path: Path) -> Path:
    path = tmp_path / "lr.toml"
    path.write_text(f'base = "{BASE}"\n[grid]\n"train.lr" = [0.1, 0.01]\n')
    return path


class Sweeping:
    """run_sweep faked: the arguments of each call kept, `result` returned."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.result: SweepResult | None = None

    def __call__(self, spec: Any, store: Any, jobs: int, on_failure: str, resume: Any,
                 new: bool, rep: Any, sort: Any) -> SweepResult:  # fmt: skip
        self.calls.append((spec, jobs, on_failure, resume, new, sort))
        assert self.result is not None
        return self.result


@pytest.fixture
def swept(monkeypatch: pytest.MonkeyPatch) -> Sweeping:
    """The sweep's running faked (its file is loaded for real); no figure drawn."""
    sweeping = Sweeping()
    monkeypatch.setattr(sweep_package, "run_sweep", sweeping)
    monkeypatch.setattr(sweep_figures, "sweep_figures", lambda store, result: [Path("v.png")])
    return sweeping


def _result(points: list[SweepRow], groups: list[dict[str, Any]], target: float | None = 0.9,
            winner: int | None = 1) -> SweepResult:  # fmt: skip
    winners = {"train.lr": {"values": [
        {"value": g["params"]["train.lr"], "test_accuracy": g["test_accuracy"],
         "params": g["params"]} for g in groups]}}  # fmt: skip
    return SweepResult(3, "lr", {"train.lr": [0.1, 0.01]}, target, points, groups, winner,
                       winners, "runs/sweep-3")  # fmt: skip


def test_json_is_the_result_with_the_spread_and_the_plots(
    cli: Callable[..., CliResult], sweep_file: Path, swept: Sweeping
) -> None:
    swept.result = _result([_row(1, 0.1, test_accuracy=0.9)], [_group(1, 0.1, 0.9)])
    result = cli("sweep", str(sweep_file), "--jobs", "2", "--on-failure", "stop", "--sort",
                 "train.lr", "--new", "--json")  # fmt: skip
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert doc["spread"] == "std" and doc["plots"] == ["v.png"]
    assert (doc["study_id"], doc["name"], doc["winner"]) == (3, "lr", 1)
    assert doc["points"][0]["run_id"] == 1 and doc["groups"][0]["rank"] == 1
    [(spec, jobs, on_failure, resume, new, sort)] = swept.calls
    assert (jobs, on_failure, resume, new, sort) == (2, "stop", None, True, "train.lr")
    assert len(spec.points) == 2  # the file's grid, loaded for real


def test_the_tables_rank_the_points_and_name_the_winner(
    cli: Callable[..., CliResult], sweep_file: Path, swept: Sweeping
) -> None:
    groups = [_group(1, 0.1, 0.95), _group(2, 0.01, 0.5, reached=0, epochs_to_target=None)]
    swept.result = _result([_row(1, 0.1), _row(2, 0.01)], groups)
    result = cli("sweep", str(sweep_file))
    assert result.code == 0, result.err
    assert "sweep 'lr', study 3: points ranked by test accuracy" in result.out
    assert "wall s for 3 epochs" in result.out  # every point trained 3
    assert "not reached" in result.out and "winner: run 1" in result.out
    assert "best point per axis value (winner first)" in result.out
    assert result.err.splitlines()[-1] == "saved v.png"


def test_no_target_no_target_columns(
    cli: Callable[..., CliResult], sweep_file: Path, swept: Sweeping
) -> None:
    swept.result = _result([_row(1, 0.1)], [_group(1, 0.1, 0.9)], target=None)
    result = cli("sweep", str(sweep_file))
    assert result.code == 0, result.err
    assert "epochs to target" not in result.out and "wall s to target" not in result.out


def test_no_point_reaching_the_target_is_said(
    cli: Callable[..., CliResult], sweep_file: Path, swept: Sweeping
) -> None:
    swept.result = _result([_row(1, 0.1)], [_group(1, 0.1, 0.5, reached=0)], target=0.99)
    result = cli("sweep", str(sweep_file))
    assert result.code == 0, result.err
    assert (
        "no point reached the target (validation accuracy 0.99) in the epochs it trained: "
        "no time_to_target.png"
    ) in result.out


def test_a_failed_point_is_said_on_stderr_and_exits_1(
    cli: Callable[..., CliResult], sweep_file: Path, swept: Sweeping
) -> None:
    points = [_row(1, 0.1), _row(2, 0.01, status="failed", error="loss became nan at step 3")]
    swept.result = _result(points, [_group(1, 0.1, 0.9)])
    result = cli("sweep", str(sweep_file))
    assert result.code == 1
    assert "run 2 failed: loss became nan at step 3" in result.err
    as_json = cli("sweep", str(sweep_file), "--json")
    assert as_json.code == 1 and json.loads(as_json.out)["points"][1]["status"] == "failed"


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["missing.toml"], "missing.toml: no such sweep file (give the path of a sweep TOML"),
        (["{file}", "--jobs", "0"], "--jobs must be at least 1, got 0"),
        (["{file}", "--on-failure", "maybe"], "--on-failure 'maybe' (use continue or stop)"),
        (["{file}", "--set", "train.epoch=3"], "unknown key 'train.epoch' (did you mean"),
        (["{file}", "--jobs", "x"], "Invalid value for '--jobs'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    cli: Callable[..., CliResult], sweep_file: Path, args: list[str], text: str
) -> None:
    one_line_error(cli("sweep", *(a.replace("{file}", str(sweep_file)) for a in args)), text)
