"""dlperf.analytic.results: the Result codec (fields in order, OPTIONAL ones left out when
None, nested results through their own to_dict, tuples as lists) on PALEO's records, and
from_dict reading back what to_dict wrote."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar

import pytest

from dlperf.analytic.results import (
    Basis,
    LayerComparison,
    LayerTime,
    Measured,
    Peak,
    Prediction,
    Result,
    Totals,
)
from dlperf.records import ContractError

LAYER = LayerTime("conv1", "Conv2d", 2e6, 4e5, 1, 1e-3, 2e-4, 5e-6, 1.005e-3)
TOTALS = Totals(2e6, {"conv": 2e6, "matmul": 0.0}, 4e5, 1, 1e-3, 2e-4, 5e-6, 1.005e-3, 995.0,
                1e-3, 1000.0)  # fmt: skip
BASIS = Basis("catalog peak", "cpu", None, None, None, False, "catalog peak, PPP 1")


def _prediction(**kw: object) -> Prediction:
    return Prediction(model="smallcnn", device="cpu", precision="fp32", batch=1, train=False,
                      ppp=1.0, ppp_by_kind={"conv": 1.0}, ppp_mem=1.0, op_overhead_s=5e-6,
                      peak_flops=2e9, memory_bandwidth=2e9, layers=(LAYER,), totals=TOTALS,
                      **kw)  # type: ignore[arg-type]  # fmt: skip


def test_a_prediction_leaves_out_what_its_command_did_not_add() -> None:
    doc = _prediction().to_dict()
    assert list(doc) == ["model", "device", "precision", "batch", "train", "ppp", "ppp_by_kind",
                         "ppp_mem", "op_overhead_s", "peak_flops", "memory_bandwidth", "layers",
                         "totals"]  # fmt: skip
    assert set(Prediction.OPTIONAL).isdisjoint(doc)


def test_given_optional_fields_are_written_nested_through_their_own_codec() -> None:
    peak = Peak(2e9, "fp32", True, 1, "given")
    doc = _prediction(basis=BASIS, peak=peak, plot="p.png").to_dict()
    assert doc["basis"] == {"kind": "catalog peak", "device": "cpu", "ppp": None,
                            "calibrated_at": None, "on": None, "interleaved": False,
                            "label": "catalog peak, PPP 1"}  # fmt: skip
    assert doc["peak"]["given"] is True and doc["plot"] == "p.png"
    assert "measured" not in doc and "flops_over_peak" not in doc


def test_tuples_of_results_become_lists_of_objects() -> None:
    doc = _prediction().to_dict()
    assert doc["layers"] == [{"name": "conv1", "type": "Conv2d", "flops": 2e6, "bytes": 4e5,
                              "calls": 1, "compute_s": 1e-3, "memory_s": 2e-4,
                              "overhead_s": 5e-6, "time_s": 1.005e-3}]  # fmt: skip
    assert doc["totals"]["flops_by_kind"] == {"conv": 2e6, "matmul": 0.0}
    json.dumps(doc)  # JSON holds it as it is


def test_a_result_without_optional_fields_writes_none_as_null() -> None:
    measured = Measured((LayerComparison("conv1", "Conv2d", 1e-3, 0.0, None),), 1e-3,
                        {"min": 1e-3, "median": 2e-3, "max": 3e-3}, 100.0, 500.0, None)  # fmt: skip
    doc = measured.to_dict()
    assert doc["basis"] is None and doc["fitted_ppp"] is None and doc["run_id"] is None
    assert doc["layers"] == [{"name": "conv1", "type": "Conv2d", "predicted_s": 1e-3,
                              "measured_s": 0.0, "error_pct": None}]  # fmt: skip
    nested = _prediction(measured=measured).to_dict()["measured"]
    assert nested == doc


def test_from_dict_reads_back_what_to_dict_wrote() -> None:
    peak = Peak(2e9, "fp32", False, 2, "board")
    prediction = _prediction(basis=BASIS, peak=peak)
    assert Prediction.from_dict(json.loads(json.dumps(prediction.to_dict()))) == prediction
    assert Prediction.from_dict(_prediction().to_dict()) == _prediction()


def test_from_dict_refuses_an_unknown_key() -> None:
    doc = _prediction().to_dict() | {"extra": 1}
    with pytest.raises(ContractError, match=r"Prediction: unknown field\(s\) extra"):
        Prediction.from_dict(doc)


@dataclass(frozen=True)
class Pair(Result):
    """A result of this test's own: lists and dicts of results inside, one optional field."""

    inner: dict[str, LayerComparison]
    many: list[tuple[int, int]]
    note: str | None = None

    OPTIONAL: ClassVar[tuple[str, ...]] = ("note",)


def test_results_inside_dicts_and_lists_of_tuples_are_plain() -> None:
    pair = Pair({"a": LayerComparison("a", "Linear", 1.0, 2.0, -50.0)}, [(1, 2)])
    assert pair.to_dict() == {"inner": {"a": {"name": "a", "type": "Linear", "predicted_s": 1.0,
                                              "measured_s": 2.0, "error_pct": -50.0}},
                              "many": [[1, 2]]}  # fmt: skip
    assert list(Pair({}, [], note="n").left_out()) == []
    assert Pair({}, [], note="n").to_dict()["note"] == "n"
