"""`dlperf predict --plot`: the roofline of a prediction beside PALEO's time per layer.

Left, the roofline (Williams, Waterman and Patterson, "Roofline: an insightful visual
performance model for multicore architectures", CACM 2009): attainable FLOP/s against
arithmetic intensity (FLOPs per byte moved), under the device's two roofs, its peak FLOP/s
and its memory bandwidth times the intensity, which meet at the ridge point. Each layer is
a point at its intensity and the rate PALEO predicts for it (its FLOPs / its predicted
time), so a layer left of the ridge is bound by memory, one right of it by compute, and its
distance below the roof is what PALEO's PPP and its adding of compute and memory time cost.
Right, PALEO's predicted time per layer, split into compute, memory and calls.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure  # no pyplot: files only, no global state

from dlperf.analytic.tables import si

MS = 1e3
MARKERS = "osD^vP*X"  # layers of two types often share an intensity (a ReLU's, a pool's)
PARTS = (("compute_s", "compute"), ("memory_s", "memory"), ("overhead_s", "calls"))


def on_roofline(layer: dict[str, Any]) -> bool:
    """A layer has a place on the log-log roofline when it does arithmetic and moves bytes
    (a flatten or a view does neither)."""
    return bool(layer["flops"] > 0 and layer["bytes"] > 0 and layer["time_s"] > 0)


def draw_roofline(prediction: dict[str, Any]) -> Figure:
    """The figure of a `predict_model` result: roofline and per-layer time, side by side."""
    layers = prediction["layers"]
    peak, bandwidth = prediction["peak_flops"], prediction["memory_bandwidth"]
    fig = Figure(figsize=(13, max(4.5, 1.5 + 0.17 * len(layers))))
    roof_ax, time_ax = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.25, 1]})

    placed = [row for row in layers if on_roofline(row)]
    ridge = peak / bandwidth  # FLOPs per byte where the two roofs meet
    intensity = [row["flops"] / row["bytes"] for row in placed]
    low, high = min([ridge, *intensity]) / 4, max([ridge, *intensity]) * 4
    x = np.geomspace(low, high, 200)
    roof_ax.loglog(x, np.minimum(peak, bandwidth * x), "k-", lw=1.5)
    roof_ax.axhline(peak, color="0.6", ls=":", lw=0.8)
    roof_ax.axvline(ridge, color="0.6", ls=":", lw=0.8)
    roof_ax.text(high, peak, f"compute roof: {si(peak, 'FLOP/s')} ", ha="right", va="bottom",
                 fontsize=8)  # fmt: skip
    roof_ax.text(x[8], bandwidth * x[8], f" memory roof: {si(bandwidth, 'B/s')}", rotation=0,
                 ha="left", va="bottom", fontsize=8)  # fmt: skip
    roof_ax.text(ridge, roof_ax.get_ylim()[0], f" ridge {ridge:.3g} FLOP/B", rotation=90,
                 ha="right", va="bottom", fontsize=7, color="0.4")  # fmt: skip
    types = list(dict.fromkeys(row["type"] for row in placed))
    for i, kind in enumerate(types):
        mine = [row for row in placed if row["type"] == kind]
        roof_ax.scatter(
            [row["flops"] / row["bytes"] for row in mine],
            [row["flops"] / row["time_s"] for row in mine],
            s=22, color=f"C{i % 10}", marker=MARKERS[i % len(MARKERS)], alpha=0.8,
            label=kind, zorder=3,
        )  # fmt: skip
    left_out = len(layers) - len(placed)
    note = f"; {left_out} layers without FLOPs or bytes not placed" if left_out else ""
    roof_ax.set_xlabel(f"arithmetic intensity (FLOPs per byte){note}")
    roof_ax.set_ylabel("FLOP/s: the roofs, and each layer's FLOPs / PALEO time")
    roof_ax.set_title(
        f"{prediction['model']} on {prediction['device']}: roofline, {prediction['precision']}, "
        f"batch {prediction['batch']}{', training step' if prediction['train'] else ''}",
        fontsize=9,
    )
    roof_ax.grid(alpha=0.3, which="both")
    if types:
        roof_ax.legend(fontsize=7, title="layer type", title_fontsize=7)

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
    fig.tight_layout()
    return fig


def plot_roofline(path: Path, prediction: dict[str, Any]) -> Path:
    """draw_roofline's figure, saved to `path` (its suffix picks the format)."""
    draw_roofline(prediction).savefig(path, dpi=120)
    return path
