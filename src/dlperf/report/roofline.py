"""`dlperf predict --plot`: the roofline of a prediction beside PALEO's time per layer.

Left, the roofline (Williams, Waterman and Patterson, "Roofline: an insightful visual
performance model for multicore architectures", CACM 2009): attainable FLOP/s against
arithmetic intensity (FLOPs per byte moved), under the device's two roofs, its peak FLOP/s
and its memory bandwidth times the intensity, which meet at the ridge point. Each layer is
a point at its intensity and the rate PALEO predicts for it (its FLOPs / its predicted
time), so a layer left of the ridge is bound by memory, one right of it by compute, and its
distance below the roof is what PALEO's PPP and its adding of compute and memory time cost.
With `predict --measure`, each profiled layer is a second, hollow point at its FLOPs / its
measured time; where one of them beats the device's (calibrated) roof, that roof is not
what this machine can do, so the roof this run achieved (its fastest measured FLOP/s and
bytes/s) is drawn too, and the legend names both. The roofs are named in the legend, not
on the axes, so that no text lands on another.
Right, PALEO's predicted time per layer, split into compute, memory and calls.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure  # no pyplot: files only, no global state

from dlperf.analytic.tables import si
from dlperf.paths import save_figure
from dlperf.report import tight_layout

MS = 1e3
MARKERS = "osD^vP*X"  # layers of two types often share an intensity (a ReLU's, a pool's)
PARTS = (("compute_s", "compute"), ("memory_s", "memory"), ("overhead_s", "calls"))
ROOF_LEGEND_IN = 0.45  # inches under the panels for the roofs' legend (two lines a roof)


def on_roofline(layer: dict[str, Any]) -> bool:
    """A layer has a place on the log-log roofline when it does arithmetic and moves bytes
    (a flatten or a view does neither)."""
    return bool(layer["flops"] > 0 and layer["bytes"] > 0 and layer["time_s"] > 0)


def measured_points(prediction: dict[str, Any]) -> list[tuple[dict[str, Any], float]]:
    """(layer, measured FLOP/s) of each layer on the roofline that `predict --measure`
    profiled with a time above 0."""
    seconds = {m["name"]: m["measured_s"] for m in prediction.get("measured", {}).get("layers", [])}
    return [
        (row, row["flops"] / seconds[row["name"]])
        for row in prediction["layers"]
        if on_roofline(row) and seconds.get(row["name"], 0) > 0
    ]


def _roof_label(prediction: dict[str, Any]) -> str:
    """The device's roof in the legend: its two rates, and where they come from."""
    rates = f"{si(prediction['peak_flops'], 'FLOP/s')}, {si(prediction['memory_bandwidth'], 'B/s')}"
    basis = prediction.get("basis") or {}
    if basis.get("kind") != "calibrated":
        return f"roof of {prediction['device']}: {rates}\n({basis.get('label', 'its entry')})"
    if basis.get("interleaved"):
        return f"calibrated roof: {rates}\n(calibrated in this run's rounds)"
    return f"calibrated roof: {rates}\n(dlperf calibrate {basis.get('calibrated_at')})"


def draw_roofline(prediction: dict[str, Any]) -> Figure:
    """The figure of a `predict_model` result: roofline and per-layer time, side by side."""
    layers = prediction["layers"]
    peak, bandwidth = prediction["peak_flops"], prediction["memory_bandwidth"]
    fig = Figure(figsize=(13, max(4.5, 1.5 + 0.17 * len(layers))))
    roof_ax, time_ax = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.25, 1]})

    placed = [row for row in layers if on_roofline(row)]
    measured = measured_points(prediction)
    ridge = peak / bandwidth  # FLOPs per byte where the two roofs meet
    ridges = [ridge]
    # A measured layer above the device's roof: the roof this run achieved (FLOP/s, B/s),
    # drawn too, so that every measured point lies under a roof.
    rates = [(row["flops"] / row["bytes"], rate) for row, rate in measured]
    achieved = None
    if any(rate > min(peak, bandwidth * i) for i, rate in rates):
        achieved = max(rate for _, rate in rates), max(rate / i for i, rate in rates)
        ridges.append(achieved[0] / achieved[1])
    intensity = [row["flops"] / row["bytes"] for row in placed]
    low, high = min([*ridges, *intensity]) / 4, max([*ridges, *intensity]) * 4
    # The ridges among the samples: the roofs' corners are drawn where they are.
    x = np.unique(np.concatenate([np.geomspace(low, high, 200), ridges]))
    roof_ax.loglog(x, np.minimum(peak, bandwidth * x), "k-", lw=1.5, label=_roof_label(prediction))
    if achieved is not None:
        roof_ax.loglog(x, np.minimum(achieved[0], achieved[1] * x), "--", color="C3", lw=1.5,
                       label="achieved by this run (max measured):\n"
                       f"{si(achieved[0], 'FLOP/s')}, {si(achieved[1], 'B/s')}")  # fmt: skip
    roof_ax.axvline(ridge, color="0.6", ls=":", lw=0.8, label=f"ridge: {ridge:.3g} FLOP/B")
    types = list(dict.fromkeys(row["type"] for row in placed))
    points = []
    for i, kind in enumerate(types):
        mine = [row for row in placed if row["type"] == kind]
        points.append(roof_ax.scatter(
            [row["flops"] / row["bytes"] for row in mine],
            [row["flops"] / row["time_s"] for row in mine],
            s=22, color=f"C{i % 10}", marker=MARKERS[i % len(MARKERS)], alpha=0.8,
            label=kind, zorder=3,
        ))  # fmt: skip
        timed = [(row, rate) for row, rate in measured if row["type"] == kind]
        if timed:
            roof_ax.scatter(
                [row["flops"] / row["bytes"] for row, _ in timed], [rate for _, rate in timed],
                s=30, facecolors="none", edgecolors=f"C{i % 10}", marker=MARKERS[i % len(MARKERS)],
                label=f"measured {kind}", zorder=3,
            )  # fmt: skip
    left_out = len(layers) - len(placed)
    note = f"; {left_out} layers without FLOPs or bytes not placed" if left_out else ""
    roof_ax.set_xlabel(f"arithmetic intensity (FLOPs per byte){note}")
    roof_ax.set_ylabel("FLOP/s (a layer's: its FLOPs / its time)")
    roof_ax.set_title(
        f"{prediction['model']} on {prediction['device']}: roofline, {prediction['precision']}, "
        f"batch {prediction['batch']}{', training step' if prediction['train'] else ''}",
        fontsize=9,
    )
    roof_ax.grid(alpha=0.3, which="both")
    # Two legends: the layer types on the axes, the roofs under the figure, out of the way.
    if types:
        title = "layer type" + ("\nfilled: PALEO's time\nhollow: measured time" if measured else "")
        kinds = roof_ax.legend(handles=points, fontsize=7, title=title, title_fontsize=7)
        roof_ax.add_artist(kinds)
    roofs = [line for line in roof_ax.get_lines() if not line.get_label().startswith("_")]
    fig.legend(handles=roofs, fontsize=7, loc="lower left", bbox_to_anchor=(0.01, 0),
               ncols=len(roofs), frameon=False)  # fmt: skip

    y = np.arange(len(layers))
    left = np.zeros(len(layers))
    for i, (key, label) in enumerate(PARTS):
        ms = np.array([row[key] * MS for row in layers])
        if ms.any():
            time_ax.barh(y, ms, left=left, color=f"C{i}", label=label)
            left += ms
    time_ax.set_yticks(y, [f"{row['name']} ({row['type']})" for row in layers], fontsize=6)
    time_ax.invert_yaxis()  # the first layer on top
    time_ax.set_xlabel("PALEO predicted time per batch (ms)")
    time_ax.set_title(
        f"time per layer: {prediction['totals']['time_s'] * MS:.4g} ms per batch in all",
        fontsize=9,
    )
    time_ax.grid(alpha=0.3, axis="x")
    time_ax.legend(fontsize=7)
    tight_layout(fig, rect=(0, ROOF_LEGEND_IN / fig.get_figheight(), 1, 1))
    return fig


def plot_roofline(path: Path, prediction: dict[str, Any]) -> Path:
    """draw_roofline's figure, saved to `path` (its suffix picks the format)."""
    return save_figure(draw_roofline(prediction), path)
