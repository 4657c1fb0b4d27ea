"""`dlperf predict --plot`: the roofline (each layer's arithmetic intensity under the device's
compute and memory roofs) beside PALEO's time per layer, drawn from a real prediction."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dlperf.report.roofline import draw_roofline, on_roofline
from tests.conftest import CliResult


@pytest.fixture(scope="module")
def prediction() -> dict:
    """PALEO's prediction of the small CNN on one GPU of a K80 (no store, nothing measured)."""
    from dlperf.analytic.recorded import predict_model

    return predict_model("smallcnn", "K80", lambda: None, input_shape=(1, 8, 8))


def test_predict_saves_the_roofline_named_in_its_output(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    path = tmp_path / "roofline.png"
    r = cli("predict", "smallcnn", "--device", "K80", "--input", "1,8,8", "--plot", str(path))
    assert r.code == 0, r.err
    assert r.err.strip().splitlines()[-1] == f"saved {path}"
    with Image.open(path) as image:
        assert image.format == "PNG" and image.width > 1000
    r = cli("predict", "smallcnn", "--device", "K80", "--input", "1,8,8", "--plot",
            str(tmp_path / "roofline.svg"), "--json")  # fmt: skip
    assert r.code == 0, r.err
    assert json.loads(r.out)["plot"] == str(tmp_path / "roofline.svg")
    assert (tmp_path / "roofline.svg").read_text().lstrip().startswith("<?xml")


def test_a_figure_that_cannot_be_saved_is_refused_before_the_prediction(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    r = cli("predict", "smallcnn", "--device", "K80", "--plot", str(tmp_path / "roof.doc"))
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert "not a figure format matplotlib writes" in r.err
    r = cli("predict", "smallcnn", "--device", "K80", "--plot", str(tmp_path / "no/roof.png"))
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err


def test_layers_sit_under_the_roofs_at_their_intensity(prediction: dict) -> None:
    roof_ax, time_ax = draw_roofline(prediction).axes
    peak, bandwidth = prediction["peak_flops"], prediction["memory_bandwidth"]
    assert (roof_ax.get_xscale(), roof_ax.get_yscale()) == ("log", "log")
    (roof,) = [line for line in roof_ax.lines if len(line.get_xdata()) > 2]
    x, y = np.asarray(roof.get_xdata()), np.asarray(roof.get_ydata())
    assert y == pytest.approx(np.minimum(peak, bandwidth * x))  # the two roofs, meeting
    assert x.min() < peak / bandwidth < x.max()  # the ridge point is in view

    placed = [row for row in prediction["layers"] if on_roofline(row)]
    points = np.concatenate([c.get_offsets() for c in roof_ax.collections])
    assert len(points) == len(placed) > 0
    want = sorted((r["flops"] / r["bytes"], r["flops"] / r["time_s"]) for r in placed)
    assert np.array(sorted(map(tuple, points))) == pytest.approx(np.array(want))
    for intensity, rate in points:  # PALEO never beats the roofline
        assert rate <= min(peak, bandwidth * intensity) * (1 + 1e-9)

    # Right: every layer's compute, memory and calls time, stacked, summing to the total.
    widths = sum(bar.get_width() for bar in time_ax.patches)
    assert widths == pytest.approx(prediction["totals"]["time_s"] * 1e3)
    assert len(time_ax.get_yticklabels()) == len(prediction["layers"])
