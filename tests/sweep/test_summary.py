"""dlperf.sweep.summary: a sweep's points pooled over repeats, ranked, the winner per axis
and overall, validation curves merged, and --sort's orders; every figure worked by hand."""

from __future__ import annotations

from typing import Any

import pytest

from dlperf.errors import UserError
from dlperf.sweep.summary import (
    SweepPointResult,
    SweepRow,
    axis_winners,
    group_rows,
    mean_curves,
    sort_key,
    winner,
)


def row(
    run_id: int, lr: float, acc: float | None, status: str = "finished", **figures: Any
) -> SweepRow:
    result = SweepPointResult(
        run_id, status, None if status == "finished" else "boom", acc, **figures
    )
    return SweepRow.of(result, {"lr": lr}, seed=run_id)


# Accuracies exact in binary, so that the three points' means are exact too.
ROWS = [
    row(1, 0.1, 0.75, time_to_target_s=10.0, epochs_to_target=2),
    row(2, 0.1, 0.875, time_to_target_s=20.0, epochs_to_target=3),
    row(3, 0.2, 0.8125, time_to_target_s=5.0, epochs_to_target=1),
    row(4, 0.2, None, status="failed"),
    row(5, 0.4, 0.8125, time_to_target_s=4.0),
]


def test_repeats_pool_into_one_point_each_ranked_best_first() -> None:
    groups = group_rows(ROWS)
    by_lr = {g["params"]["lr"]: g for g in groups}
    first = by_lr[0.1]
    assert (first["run_ids"], first["repeats"], first["finished"]) == ([1, 2], 2, 2)
    assert first["test_accuracy"] == 0.8125
    assert first["test_accuracy_std"] == pytest.approx(0.0883883, rel=1e-5)  # n - 1
    assert (first["test_accuracy_min"], first["test_accuracy_max"]) == (0.75, 0.875)
    assert first["time_to_target_s"] == 15.0
    assert first["time_to_target_s_std"] == pytest.approx(7.0710678)
    assert first["reached_target"] == 2
    failed_one = by_lr[0.2]
    assert (failed_one["repeats"], failed_one["finished"]) == (2, 1)
    assert failed_one["test_accuracy"] == 0.8125  # the finished repeat's alone
    assert failed_one["test_accuracy_std"] is None  # one value: no spread
    assert by_lr[0.4]["reached_target"] == 0  # no epochs to target


def test_equal_accuracy_ranks_by_time_to_target_then_epochs() -> None:
    groups = group_rows(ROWS)
    # all three points average 0.8125: 4 s (lr 0.4), 5 s (lr 0.2), 15 s (lr 0.1)
    assert [g["params"]["lr"] for g in groups] == [0.4, 0.2, 0.1]
    assert [g["rank"] for g in groups] == [1, 2, 3]
    tied = group_rows([row(1, 0.1, 0.9, epochs_to_target=3), row(2, 0.2, 0.9, epochs_to_target=2)])
    assert [g["params"]["lr"] for g in tied] == [0.2, 0.1]
    unfinished = group_rows([row(1, 0.1, None, status="failed"), row(2, 0.2, 0.1)])
    assert [g["params"]["lr"] for g in unfinished] == [0.2, 0.1]  # no accuracy ranks last


def test_means_that_differ_only_by_float_rounding_tie() -> None:
    """Repeats of 0.8 and 0.9 average 0.8500000000000001, a single run 0.85: the same
    accuracy, so time to target decides, not the last bit of a float."""
    rows = [
        row(1, 0.1, 0.8, time_to_target_s=20.0),
        row(2, 0.1, 0.9, time_to_target_s=20.0),
        row(3, 0.2, 0.85, time_to_target_s=5.0),
    ]
    assert [g["params"]["lr"] for g in group_rows(rows)] == [0.2, 0.1]


def test_the_winner_is_the_best_repeat_of_the_best_point() -> None:
    groups = group_rows(ROWS)
    assert winner(ROWS, groups) == 5
    pooled = [row(1, 0.1, 0.9), row(2, 0.1, 0.95), row(3, 0.2, 0.8)]
    assert winner(pooled, group_rows(pooled)) == 2
    failed = [row(1, 0.1, None, status="failed")]
    assert winner(failed, group_rows(failed)) is None
    assert winner([], []) is None


def test_each_axis_value_s_best_point_and_the_axis_winner() -> None:
    rows = [
        SweepRow.of(SweepPointResult(1, "finished", None, 0.7), {"lr": 0.1, "m": 0.9}),
        SweepRow.of(SweepPointResult(2, "finished", None, 0.9), {"lr": 0.2, "m": 0.9}),
        SweepRow.of(SweepPointResult(3, "finished", None, 0.8), {"lr": 0.1, "m": 0.0}),
        SweepRow.of(SweepPointResult(4, "failed", "boom"), {"lr": 0.2, "m": 0.0}),
    ]
    verdict = axis_winners(group_rows(rows), {"lr": [0.1, 0.2, 0.3], "m": [0.0, 0.9]})
    assert verdict["lr"]["winner"] == 0.2
    assert [(v["value"], v["test_accuracy"], v["run_ids"]) for v in verdict["lr"]["values"]] == [
        (0.2, 0.9, [2]),
        (0.1, 0.8, [3]),  # lr 0.1's best point; 0.3 never ran
    ]
    assert verdict["m"]["winner"] == 0.9
    assert [v["value"] for v in verdict["m"]["values"]] == [0.9, 0.0]
    assert axis_winners([], {"lr": [0.1]}) == {"lr": {"winner": None, "values": []}}


def test_curves_merge_over_repeats_epoch_by_epoch() -> None:
    curves = [
        ({"lr": 0.1}, [(1, 0.5), (2, 0.7)]),
        ({"lr": 0.2}, [(1, 0.4)]),
        ({"lr": 0.1}, [(1, 0.6), (2, 0.9), (3, 0.95)]),  # a repeat that ran an epoch more
    ]
    first, second = mean_curves(curves)
    assert (first["params"], first["runs"], first["epochs"]) == ({"lr": 0.1}, 2, [1, 2, 3])
    assert first["mean"] == pytest.approx([0.55, 0.8, 0.95])
    assert (first["min"], first["max"]) == ([0.5, 0.7, 0.95], [0.6, 0.9, 0.95])
    assert (second["params"], second["mean"]) == ({"lr": 0.2}, [0.4])


def test_sort_by_an_axis_by_its_values_numbers_first() -> None:
    key = sort_key("opt", {"opt": [2, "adam", 0.5, True]})
    groups = [{"params": {"opt": v}} for v in ("adam", 2, True, 0.5)]
    # numbers by value, then the rest by their text (a boolean is no number here)
    assert [g["params"]["opt"] for g in sorted(groups, key=key)] == [0.5, 2, True, "adam"]


def test_sort_by_a_result_best_first_and_missing_last() -> None:
    groups = [
        {"throughput": 10.0, "epochs_to_target": 3},
        {"throughput": None, "epochs_to_target": None},
        {"throughput": 30.0, "epochs_to_target": 1},
    ]
    assert [g["throughput"] for g in sorted(groups, key=sort_key("throughput", {}))] == [
        30.0,
        10.0,
        None,
    ]
    assert [
        g["epochs_to_target"] for g in sorted(groups, key=sort_key("epochs_to_target", {}))
    ] == [1, 3, None]
    with pytest.raises(UserError) as e:
        sort_key("speed", {"lr": [0.1]})
    assert e.value.message == "--sort 'speed': not a swept key or result column"
    assert e.value.hint is not None and e.value.hint.startswith(
        "choose one of lr, rank, test_accuracy"
    )


def test_a_point_takes_every_figure_its_run_summary_holds() -> None:
    """of_run names each figure field: one added to the record but not read is caught here."""
    import dataclasses

    names = [f.name for f in dataclasses.fields(SweepPointResult)]
    figures = {
        name: float(i)
        for i, name in enumerate(names)
        if name not in ("run_id", "status", "error", "frames")
    }
    result = SweepPointResult.of_run(7, "finished", {**figures, "unrelated": 1.0})
    said = {"run_id": 7, "status": "finished", "error": None, "frames": []}
    assert result.to_dict() == {**said, **figures}
