"""dlperf.converge.results: the records' JSON is the commands' documents, key for key; the
keys a command never printed are absent, not null."""

from __future__ import annotations

import json
from dataclasses import replace

from dlperf.converge.results import Comparison, Regression, RegressPrediction

CURVE = ((10.0, 0.5), (20.0, 0.4))


def prediction(**more: object) -> RegressPrediction:
    return RegressPrediction({"depth": "56"}, 0.01, 1.0, 0.1, CURVE, "a basis", **more)  # type: ignore[arg-type]


def test_a_prediction_without_a_target_has_no_step_keys() -> None:
    doc = prediction().to_dict()
    assert list(doc) == ["features", "beta0", "beta1", "beta2", "curve", "basis"]
    assert doc["curve"] == [[10.0, 0.5], [20.0, 0.4]]  # as JSON holds it


def test_a_target_not_reached_keeps_its_keys_as_null() -> None:
    doc = prediction(target=0.2).to_dict()
    assert doc["target"] == 0.2 and doc["predicted_step"] is None and doc["error_pct"] is None
    assert "compare" not in doc


def test_a_comparison_has_the_target_keys_only_with_a_target() -> None:
    plain = Comparison("5", "run 5", 40, 0.01, 2.5)
    assert list(plain.to_dict()) == ["source", "legend", "n_points", "curve_rmse",
                                     "curve_error_pct"]  # fmt: skip
    at_target = Comparison("5", "run 5", 40, 0.01, 2.5, actual_step=300, target=0.2)
    doc = prediction(target=0.2, compare=at_target).to_dict()["compare"]
    assert doc["actual_step"] == 300 and doc["actual_epoch"] is None
    assert "target" not in doc  # the prediction carries it


def test_a_regression_nests_its_prediction_through_its_own_to_dict() -> None:
    regression = Regression(("depth",), "loss", {}, ("intercept", "depth"), {"beta0": [1.0, 2.0]},
                            {"beta0": 0.1}, ({"source": "a.csv", "depth": "20"},))  # fmt: skip
    assert "prediction" not in regression.to_dict()
    predicted = replace(regression, prediction=prediction())
    doc = json.loads(json.dumps(predicted.to_dict()))
    assert doc["features"] == ["depth"] and "target" not in doc["prediction"]
