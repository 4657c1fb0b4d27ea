"""`dlperf predict --plot`: the roofline (each layer's arithmetic intensity under the device's
compute and memory roofs) beside PALEO's time per layer, drawn from a real prediction."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dlperf.analytic.tables import si
from dlperf.report.roofline import draw_roofline, on_roofline
from tests.conftest import CliResult


@pytest.fixture(scope="module")
def prediction() -> dict:
    """PALEO's prediction of the small CNN on one GPU of a K80 (no store, nothing measured)."""
    from dlperf.analytic.recorded import predict_model

    return predict_model("smallcnn", "K80", lambda: None, input_shape=(1, 8, 8)).to_dict()


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


def test_measured_layers_above_the_calibrated_roof_get_the_roof_they_achieved(
    prediction: dict,
) -> None:
    """Issue 39: `predict --measure --plot` put measured layers 2-6x above the calibrated
    compute roof, as if they ran faster than the machine can. Measured points are drawn, and
    where one beats the calibrated roof the roof this run achieved is drawn too, each roof
    named in the legend; no text on the figure overlaps another."""
    from itertools import cycle

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    peak, bandwidth = prediction["peak_flops"], prediction["memory_bandwidth"]
    placed = [row for row in prediction["layers"] if on_roofline(row)]
    roof = {row["name"]: min(peak, bandwidth * row["flops"] / row["bytes"]) for row in placed}
    measured = [
        {"name": row["name"], "type": row["type"], "predicted_s": row["time_s"],
         "measured_s": row["flops"] / (factor * roof[row["name"]]), "error_pct": None}
        for row, factor in zip(placed, cycle([2.0, 6.0, 0.5]))
    ]  # fmt: skip
    basis = {**prediction["basis"], "kind": "calibrated", "interleaved": False,
             "calibrated_at": "2026-11-23T10:02:11+00:00", "on": "a CPU, 2 threads"}  # fmt: skip
    fig = draw_roofline({**prediction, "basis": basis, "measured": {"layers": measured}})
    roof_ax = fig.axes[0]

    roofs = {line.get_label(): line for line in roof_ax.lines if len(line.get_xdata()) > 2}
    rates = [(row["flops"] / row["bytes"], row["flops"] / m["measured_s"])
             for row, m in zip(placed, measured, strict=True)]  # fmt: skip
    fastest, widest = max(r for _, r in rates), max(r / i for i, r in rates)
    assert list(roofs) == [
        f"calibrated roof: {si(peak, 'FLOP/s')}, {si(bandwidth, 'B/s')}\n"
        "(dlperf calibrate 2026-11-23T10:02:11+00:00)",
        f"achieved by this run (max measured):\n{si(fastest, 'FLOP/s')}, {si(widest, 'B/s')}",
    ]
    legends = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    assert set(roofs) <= set(legends)
    points = np.concatenate(
        [c.get_offsets() for c in roof_ax.collections if c.get_label().startswith("measured")]
    )
    assert len(points) == len(measured)
    log_roofs = [(np.log(line.get_xdata()), np.log(line.get_ydata())) for line in roofs.values()]
    for intensity, rate in points:  # under the highest roof drawn at its intensity
        highest = max(np.exp(np.interp(np.log(intensity), x, y)) for x, y in log_roofs)
        assert rate <= highest * (1 + 1e-9)
    assert any(rate > min(peak, bandwidth * i) * 1.5 for i, rate in points)  # some beat it

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    texts = [t for legend in [*fig.legends, *roof_ax.artists] for t in legend.findobj(Text)]
    for ax in fig.axes:
        texts += [*ax.texts, ax.title, ax.xaxis.label, ax.yaxis.label]
        for axis in (ax.xaxis, ax.yaxis):  # the tick labels drawn: those in view
            low, high = sorted(axis.get_view_interval())
            ticks = [*axis.get_major_ticks(), *axis.get_minor_ticks()]
            texts += [tick.label1 for tick in ticks if low <= tick.get_loc() <= high]
    texts = [t for t in texts if t.get_visible() and t.get_text().strip()]
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    overlapping = [
        (a, b)
        for i, (a, box) in enumerate(boxes)
        for b, other in boxes[i + 1 :]
        if box.overlaps(other)
    ]
    assert not overlapping
