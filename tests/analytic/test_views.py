"""dlperf.analytic.views: the tables `dlperf predict` prints, from a prediction on a made-up
device (and a measurement made up by hand)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from torch import nn

from dlperf.analytic.counting import analyze_module
from dlperf.analytic.paleo import basis, compare, predict_with_basis
from dlperf.analytic.results import Prediction, SameMomentPrediction
from dlperf.analytic.views import prediction_tables
from tests.analytic.test_paleo import FAKE


@pytest.fixture(scope="module")
def prediction() -> Prediction:
    # 2·10^7 FLOPs at 1 TFLOP/s and 4.08 MB at 100 GB/s: 0.02 + 0.0408 ms.
    return predict_with_basis(analyze_module(nn.Linear(1000, 1000, bias=False), [1000], 10), FAKE)


def rows(table_rows: list[list[object]]) -> dict[object, object]:
    return {row[0]: row[1] for row in table_rows}


def test_a_catalog_peak_is_shown_once_as_the_peak(prediction: Prediction) -> None:
    layers, totals = prediction_tables(prediction)
    assert layers.title is not None and layers.title.endswith(
        "; peak (PPP=1) of fake (a test, 2026-01-01)"
    )
    assert layers.rows[0][-1] == pytest.approx(0.0608)  # time ms
    shown = rows(totals.rows)
    assert shown["peak (PPP=1), compute + memory: time per batch (ms)"] == pytest.approx(0.0608)
    assert "peak (PPP=1), compute + memory: time per image (ms)" not in shown  # the same figure
    assert shown["FLOPs ÷ peak: time per image (ms)"] == pytest.approx(0.002)
    assert shown["  FLOPs per image"] == "2 M counted (1 M MACs)"


def test_a_measurement_adds_its_layers_and_rows(prediction: Prediction) -> None:
    measured = replace(
        compare(prediction, {"min": 1e-4, "median": 2e-4, "max": 3e-4}, {"(model)": 2e-4}),
        same_moment=SameMomentPrediction(1e-4, -50.0, ({},), basis(FAKE, None, interleaved=True)),
        run_id=7,
        local_device="cpu",
    )
    _, by_layer, totals = prediction_tables(replace(prediction, measured=measured))
    assert (
        by_layer.title
        == "forward per layer: peak (PPP=1), compute + memory vs measured (torch.profiler)"
    )
    assert by_layer.rows[0][-1] == pytest.approx(100 * (0.0608 - 0.2) / 0.2)
    shown = rows(totals.rows)
    assert shown["measured on cpu: median (min-max) ms"] == "0.2 (0.1-0.3)"
    assert shown["stored as run"] == 7
    assert "unreliable" not in shown  # not judged: no mark
