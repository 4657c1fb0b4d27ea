"""The PALEO time model (Qi, Sparks, Talwalkar, "Paleo: A Performance Model for Deep
Neural Networks", ICLR 2017), per layer from dlperf's counts:

    time(layer) = flops / (peak[precision] * PPP) + bytes / (bandwidth * PPP_mem)
    time        = sum over layers

`flops` and `bytes` are the layer's counted FLOPs and the bytes its operators read and
write (forward; with `train` forward + backward). PPP, the platform percent of peak,
is the fraction of the peak the software reaches; PPP_mem the same for bandwidth. The
theoretical figures take PPP = PPP_mem = 1.
"""

from __future__ import annotations

from typing import Any

from dlperf.analytic.counting import Analysis
from dlperf.analytic.devices import Device
from dlperf.errors import UserError


def layer_time(
    flops: float, nbytes: float, peak: float, bandwidth: float, ppp: float, ppp_mem: float
) -> tuple[float, float]:
    """(compute seconds, memory seconds) of one layer."""
    return flops / (peak * ppp), nbytes / (bandwidth * ppp_mem)


def predict(
    analysis: Analysis, device: Device, ppp: float | None = None, ppp_mem: float | None = None
) -> dict[str, Any]:
    """Per-layer and total predicted time of one forward (or training step) at the batch."""
    ppp = ppp if ppp is not None else device.ppp or 1.0
    ppp_mem = ppp_mem if ppp_mem is not None else device.ppp_mem or 1.0
    if ppp <= 0 or ppp_mem <= 0:
        raise UserError(f"PPP must be positive, got {ppp} and {ppp_mem}", "e.g. --ppp 0.62")
    peak = device.peak_flops(analysis.precision)
    bandwidth = device.memory_bandwidth_gbs * 1e9
    layers = []
    for layer in analysis.layers:
        flops = layer.flops + layer.backward_flops
        nbytes = layer.bytes + layer.backward_bytes
        compute, memory = layer_time(flops, nbytes, peak, bandwidth, ppp, ppp_mem)
        layers.append(
            {
                "name": layer.name,
                "type": layer.type,
                "flops": flops,
                "bytes": nbytes,
                "compute_s": compute,
                "memory_s": memory,
                "time_s": compute + memory,
            }
        )
    flops = sum(row["flops"] for row in layers)
    nbytes = sum(row["bytes"] for row in layers)
    compute, memory = layer_time(flops, nbytes, peak, bandwidth, ppp, ppp_mem)
    ideal = sum(layer_time(flops, nbytes, peak, bandwidth, 1.0, 1.0))
    batch = analysis.batch
    return {
        "model": analysis.model,
        "device": device.name,
        "precision": analysis.precision,
        "batch": batch,
        "train": analysis.train,
        "ppp": ppp,
        "ppp_mem": ppp_mem,
        "peak_flops": peak,
        "memory_bandwidth": bandwidth,
        "layers": layers,
        "totals": {
            "flops": flops,
            "bytes": nbytes,
            "compute_s": compute,
            "memory_s": memory,
            "time_s": compute + memory,
            "images_per_s": batch / (compute + memory),
            "theoretical_time_per_image_s": ideal / batch,
            "theoretical_images_per_s": batch / ideal,
        },
    }


def fit_ppp(
    flops: float, nbytes: float, measured_s: float, peak: float, bandwidth: float, ppp_mem: float
) -> float | None:
    """The PPP that makes the model's total equal the measured time (PPP_mem held fixed);
    None when the memory term alone already exceeds the measurement."""
    compute_s = measured_s - nbytes / (bandwidth * ppp_mem)
    return flops / (peak * compute_s) if compute_s > 0 else None


def error_pct(predicted: float, measured: float) -> float:
    return 100 * (predicted - measured) / measured


def compare(prediction: dict[str, Any], measurement: dict[str, Any]) -> dict[str, Any]:
    """Predicted vs measured, per layer (forward passes only: the profiler sees leaf
    modules' forwards) and in total, with the PPP that explains the measured total."""
    measured = measurement["spread_s"]["median"]
    predicted = prediction["totals"]["time_s"]
    layers = []
    if not prediction["train"]:
        for row in prediction["layers"]:
            seconds = measurement["layers_s"].get(row["name"])
            if seconds is not None:
                layers.append(
                    {
                        "name": row["name"],
                        "type": row["type"],
                        "predicted_s": row["time_s"],
                        "measured_s": seconds,
                        "error_pct": error_pct(row["time_s"], seconds),
                    }
                )
    fitted = fit_ppp(
        prediction["totals"]["flops"],
        prediction["totals"]["bytes"],
        measured,
        prediction["peak_flops"],
        prediction["memory_bandwidth"],
        prediction["ppp_mem"],
    )
    return {
        "layers": layers,
        "predicted_s": predicted,
        "measured_s": measurement["spread_s"],
        "error_pct": error_pct(predicted, measured),
        "measured_images_per_s": prediction["batch"] / measured,
        "fitted_ppp": fitted,
    }
