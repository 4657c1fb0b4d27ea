"""dlperf.converge.views: the tables and lines `converge predict | regress` print, from
records made by hand."""

from __future__ import annotations

from dlperf.converge import views
from dlperf.converge.results import Comparison, Regression, RegressPrediction, StepPrediction
from dlperf.table import Table


def step(source: str, reachable: bool) -> StepPrediction:
    return StepPrediction(
        source=source, form="optimus", target=0.2, reachable=reachable,
        predicted_step=900 if reachable else None, interval=(800.0, None) if reachable else None,
        predicted_epoch=None, actual_step=None, error_pct=None, asymptote=0.25, plateau=0.25,
        n_points=20, basis=f"basis of {source}",
    )  # fmt: skip


def test_predict_names_the_unreachable_and_each_basis() -> None:
    predictions = [step("a.csv", True), step("b.csv", False)]
    blocks, warnings = views.prediction_view(predictions, "optimus", 0.2, "loss")
    table, *lines = blocks
    assert isinstance(table, Table) and table.title == "optimus model: step reaching loss 0.2"
    assert [row[:4] for row in table.rows] == [
        ["a.csv", 900, 800.0, None],  # an open upper end stays open
        ["b.csv", "unreachable", None, None],
    ]
    assert lines == ["a.csv: basis of a.csv", "b.csv: basis of b.csv"]
    assert warnings == ["b.csv: unreachable, the fitted curve levels off at 0.25 loss (β2 = 0.25)"]


def regression(prediction: RegressPrediction | None) -> Regression:
    return Regression(
        features=("depth",), metric="loss", dropped_features={},
        columns=("intercept", "depth"),
        coef={"beta0": [-4.6, -0.02], "beta1": [0.0, 0.0], "beta2": [-2.3, 0.0]},
        rmse_log={"beta0": 0.01, "beta1": 0.0, "beta2": 0.0},
        runs=({"source": "a.csv"}, {"source": "b.csv"}), prediction=prediction,
    )  # fmt: skip


def test_regress_without_predict_is_the_coefficients_alone() -> None:
    (table,) = views.regression_blocks(regression(None), None)
    assert isinstance(table, Table)
    assert table.title == "log β regressed on depth over 2 runs"
    assert table.rows[-1] == ["rmse (log)", 0.01, 0.0, 0.0]


def test_regress_prediction_rows_follow_the_target_and_the_comparison() -> None:
    compared = Comparison("5", "run 5", 40, 0.02, 3.0, actual_step=None, target=0.3)
    # β2 0.35 above the target 0.3: unreachable (with β2 below it, the step is only None
    # where it is more than a float counts, and the row says so)
    pred = RegressPrediction({"depth": "56"}, 0.003, 1.0, 0.35, (), "the basis", target=0.3,
                             predicted_step=None, compare=compared)  # fmt: skip
    _, table, basis = views.regression_blocks(regression(pred), "depth=56")
    assert isinstance(table, Table) and table.title == "prediction for depth=56"
    rows = dict((row[0], row[1]) for row in table.rows)
    assert rows["step reaching 0.3"] == "unreachable"
    assert rows["measured step reaching 0.3"] == "not reached"
    assert "measured step (a run with these features)" not in rows  # none has depth 56
    assert basis == "basis: the basis"
