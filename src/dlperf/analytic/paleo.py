"""The PALEO time model (Qi, Sparks, Talwalkar, "Paleo: A Performance Model for Deep
Neural Networks", ICLR 2017), per layer from dlperf's counts:

    time(layer) = sum over operator kinds k of flops_k / (peak[precision] * PPP_k)
                  + bytes / (bandwidth * PPP_mem)
                  + calls * op_overhead
    time        = sum over layers

`flops_k` are the layer's counted FLOPs of kind k (convolution, depthwise convolution,
their backward, matrix product, pooling, normalisation, other: `devices.KINDS`), `bytes`
what its operators read and write, `calls` its operator calls (forward; with `train`
forward + backward). PPP, the platform percent of peak, is the fraction of the peak the
software reaches: one number (`--ppp`, or a device's `ppp`) or, on a calibrated device or
an entry that gives `ppp_by_kind`, one per kind. PPP_mem is the same for bandwidth;
`op_overhead` the fixed cost of one call (0 unless calibrated or given). The theoretical
figures take PPP = PPP_mem = 1 and no overhead. Beside them, the plain count a course asks
for: time = FLOPs / peak FLOP/s, without memory time (`flops_over_peak`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import replace

from dlperf.analytic.counting import Analysis

# CALIBRATED_BY re-exported (as itself): interleaved and the tests name it from here
from dlperf.analytic.devices import CALIBRATED_BY as CALIBRATED_BY
from dlperf.analytic.devices import KINDS, Device
from dlperf.analytic.results import (
    Basis,
    FlopsOverPeak,
    LayerComparison,
    LayerTime,
    Measured,
    Peak,
    Prediction,
    Totals,
)
from dlperf.errors import UserError


def layer_time(
    kind_flops: Mapping[str, float],
    nbytes: float,
    calls: int,
    peak: float,
    bandwidth: float,
    ppp: Mapping[str, float],
    ppp_mem: float,
    overhead_s: float,
) -> tuple[float, float, float]:
    """(compute, memory, overhead) seconds of one layer."""
    compute = sum(flops / (peak * ppp[kind]) for kind, flops in kind_flops.items())
    return compute, nbytes / (bandwidth * ppp_mem), calls * overhead_s


def predict(
    analysis: Analysis, device: Device, ppp: float | None = None, ppp_mem: float | None = None
) -> Prediction:
    """Per-layer and total predicted time of one forward (or training step) at the batch.

    `ppp` replaces every kind's PPP with one number; `ppp_mem` the device's PPP_mem.
    """
    kind_ppp: dict[str, float] = (
        {kind: ppp for kind in KINDS} if ppp is not None else device.kind_ppp()
    )
    ppp_mem = ppp_mem if ppp_mem is not None else device.ppp_mem or 1.0
    if min(kind_ppp.values()) <= 0 or ppp_mem <= 0:
        raise UserError(f"PPP must be positive, got {ppp} and {ppp_mem}", "e.g. --ppp 0.62")
    peak = device.peak_flops(analysis.precision)
    bandwidth = device.memory_bandwidth_gbs * 1e9
    overhead = (device.op_overhead_us or 0.0) * 1e-6
    layers = []
    kind_totals: Counter[str] = Counter()
    for layer in analysis.layers:
        kinds = layer.kind_flops + layer.backward_kind_flops
        kind_totals += kinds
        nbytes = layer.bytes + layer.backward_bytes
        calls = layer.calls + layer.backward_calls
        compute, memory, fixed = layer_time(
            kinds, nbytes, calls, peak, bandwidth, kind_ppp, ppp_mem, overhead
        )
        layers.append(
            LayerTime(
                layer.name, layer.type, layer.flops + layer.backward_flops, nbytes, calls,
                compute, memory, fixed, compute + memory + fixed,
            )
        )  # fmt: skip
    return Prediction(
        model=analysis.model,
        device=device.name,
        precision=analysis.precision,
        batch=analysis.batch,
        train=analysis.train,
        ppp=ppp if ppp is not None else device.ppp or 1.0,
        ppp_by_kind=kind_ppp,
        ppp_mem=ppp_mem,
        op_overhead_s=overhead,
        peak_flops=peak,
        memory_bandwidth=bandwidth,
        layers=tuple(layers),
        totals=_totals(layers, kind_totals, analysis.batch, peak, bandwidth),
        unsupported_ops=analysis.unsupported_ops,
    )


def does_arithmetic(analysis: Analysis) -> None:
    """Refuse a model of no FLOPs (an nn.Identity, a forward that only copies): both bases
    divide by its time or its FLOPs, and there is nothing to predict. Checked once, by
    `recorded.predict_model`, before anything is measured or stored."""
    t = analysis.totals()
    if not t["flops"] + t.get("backward_flops", 0):
        shape = ",".join(map(str, analysis.input))
        raise UserError(
            f"model {analysis.model} does no arithmetic (0 FLOPs at input {shape}): "
            "there is no compute time to predict",
            f"dlperf analyze {analysis.model} counts what it does",
        )


def _totals(
    layers: list[LayerTime], kinds: Counter[str], batch: int, peak: float, bandwidth: float
) -> Totals:
    """The layers' sums, and the theoretical time: every PPP 1, no overhead."""
    nbytes = sum(row.bytes for row in layers)
    ideal = sum(layer_time(kinds, nbytes, 0, peak, bandwidth, dict.fromkeys(KINDS, 1.0), 1.0, 0))
    time_s = sum(row.time_s for row in layers)
    return Totals(
        flops=sum(row.flops for row in layers),
        flops_by_kind={kind: kinds[kind] for kind in KINDS},
        bytes=nbytes,
        calls=sum(row.calls for row in layers),
        compute_s=sum(row.compute_s for row in layers),
        memory_s=sum(row.memory_s for row in layers),
        overhead_s=sum(row.overhead_s for row in layers),
        time_s=time_s,
        images_per_s=batch / time_s,
        theoretical_time_per_image_s=ideal / batch,
        theoretical_images_per_s=batch / ideal,
    )


def fit_ppp(prediction: Prediction, measured_s: float) -> float | None:
    """The one PPP (for every kind) that makes the predicted total equal the measured
    time, PPP_mem and the overhead held fixed; None when those alone take longer."""
    t = prediction.totals
    compute_s = measured_s - t.memory_s - t.overhead_s
    return t.flops / (prediction.peak_flops * compute_s) if compute_s > 0 else None


def error_pct(predicted: float, measured: float) -> float:
    return 100 * (predicted - measured) / measured


def compare(
    prediction: Prediction, spread_s: dict[str, float], layers_s: Mapping[str, float]
) -> Measured:
    """Predicted vs measured (`spread_s` its min, median and max over the rounds; `layers_s`
    the profiler's time of each layer by name), per layer (forward passes only: the profiler
    sees leaf modules' forwards) and in total, with the PPP that explains the measured
    total."""
    measured = spread_s["median"]
    predicted = prediction.totals.time_s
    layers = [
        LayerComparison(
            row.name,
            row.type,
            row.time_s,
            seconds,
            # a GPU's profiler may give a tiny layer 0 s: no error to speak of
            error_pct(row.time_s, seconds) if seconds > 0 else None,
        )
        for row in (() if prediction.train else prediction.layers)
        if (seconds := layers_s.get(row.name)) is not None
    ]
    return Measured(
        layers=tuple(layers),
        predicted_s=predicted,
        measured_s=spread_s,
        error_pct=error_pct(predicted, measured),
        measured_images_per_s=prediction.batch / measured,
        fitted_ppp=fit_ppp(prediction, measured),
    )


def calibrated(device: Device) -> bool:
    """Whether `dlperf calibrate` measured the entry's rates: its `source` says so. A user
    may write `ppp_by_kind` or `op_overhead_us` by hand; those are the entry's own figures."""
    return device.source.startswith(CALIBRATED_BY)


def _own_ppp(device: Device) -> str | None:
    """'PPP 0.5', or 'PPP conv 0.7, matmul 1.3, else 0.9' for an entry of PPPs by kind: the
    PPP of an entry with figures of its own, as the arithmetic takes it (devices.kind_ppp);
    None for an entry without (vendor figures)."""
    own = (device.ppp, device.ppp_by_kind, device.ppp_mem, device.op_overhead_us)
    if all(figure is None for figure in own):
        return None
    default = f"{device.ppp or 1.0:g}"
    if not device.ppp_by_kind:
        return f"PPP {default}"
    kinds = ", ".join(f"{kind} {v:g}" for kind, v in device.ppp_by_kind.items())
    rest = f", else {default}" if len(device.ppp_by_kind) < len(KINDS) else ""
    return f"PPP {kinds}{rest}"


def basis(
    device: Device, ppp: float | None, interleaved: bool = False, precision: str | None = None
) -> Basis:
    """What a prediction for `device` at `ppp` (None: the device's own) rests on: `kind`
    ("catalog peak": vendor peaks at PPP 1; "device ppp": an entry's own PPP (and PPP_mem,
    call overhead); "calibrated": rates `dlperf calibrate` measured on `on` at
    `calibrated_at`; "given ppp": --ppp), and a `label` for tables. `interleaved`:
    calibrated in the same rounds as the measurement it is compared with. `precision`: the
    peak the prediction uses (None: a peak given, not the entry's), so that the label names
    the user's file for it where that file set it."""
    measured = interleaved or calibrated(device)
    own = _own_ppp(device)
    if ppp is not None:
        kind, label = "given ppp", f"given PPP {ppp:g}"
    elif measured:
        kind, label = "calibrated", "calibrated"
    elif own is not None:
        kind, label = "device ppp", f"{own} of the {device.name} entry"
    else:
        kind, label = "catalog peak", "peak (PPP=1)"
    if interleaved:
        label += " in the same rounds as the measurement"
    elif measured:
        label += f" {device.date}"
    if measured:
        label += f" on {device.description or device.name}"
    elif kind != "device ppp":
        label += (
            f" of {device.name} ({device.source}, {device.date}{_set_by_user(device, precision)})"
        )
    return Basis(
        kind=kind,
        device=device.name,
        ppp=ppp,
        calibrated_at=device.date if measured else None,
        on=(device.description or device.name) if measured else None,
        interleaved=interleaved,
        label=label,
    )


def _set_by_user(device: Device, precision: str | None) -> str:
    """ "; peak_tflops.fp32 from FILE" for the figures a prediction uses that the user's file
    set over a built-in entry, whose source and date it cites: a V100 at the user's 1 TFLOPS
    was credited to "NVIDIA Tesla V100 datasheet, 2018-01"."""
    used = [f"peak_tflops.{precision}"] if precision is not None else []
    used += ["memory_bandwidth_gbs", "ppp_mem", "op_overhead_us"]
    keys = [key for key in used if device.from_user(key) is not None]
    return f"; {', '.join(keys)} from {device.from_user(keys[0])}" if keys else ""


def flops_over_peak(analysis: Analysis, peak: float, flops: float | None = None) -> FlopsOverPeak:
    """time = FLOPs / peak FLOP/s for one image and for the batch, from the counted FLOPs
    (forward, with `train` forward + backward) or from `flops` per image."""
    t = analysis.totals()
    batch = analysis.batch
    counted = (t["flops"] + t.get("backward_flops", 0)) / batch
    per_image = counted if flops is None else flops
    return FlopsOverPeak(
        flops_per_image=per_image,
        flops_source="counted" if flops is None else "given (--flops)",
        counted_flops_per_image=counted,
        counted_macs_per_image=(t["macs"] + t.get("backward_macs", 0)) / batch,
        peak_flops=peak,
        time_per_image_s=per_image / peak,
        time_s=per_image * batch / peak,
        images_per_s=peak / per_image,
    )


def predict_with_basis(
    analysis: Analysis,
    device: Device,
    ppp: float | None = None,
    interleaved: bool = False,
    peak_tflops: float | None = None,
    flops: float | None = None,
) -> Prediction:
    """predict() with the prediction's `basis`, its `peak` (the device's at the precision,
    or `peak_tflops`) and `flops_over_peak` (with `flops` per image if given) added."""
    precision = analysis.precision
    if peak_tflops is not None:
        peaks = {**device.peak_tflops, precision: peak_tflops}
        device = device.model_copy(update={"peak_tflops": peaks, "gpus_per_board": 1})
    prediction = predict(analysis, device, ppp)
    b = basis(device, ppp, interleaved, precision if peak_tflops is None else None)
    if peak_tflops is None:
        peak_label = device.peak_label(precision)
    else:
        peak_label = f"{peak_tflops:g} TFLOPS {precision}, given (--peak-tflops)"
        b = replace(b, label=f"{b.label}; peak given: {peak_tflops:g} TFLOPS {precision}")
    peak = Peak(
        flops_per_s=prediction.peak_flops,
        precision=precision,
        given=peak_tflops is not None,
        gpus_per_board=device.gpus_per_board,
        label=peak_label,
    )
    return replace(
        prediction,
        basis=b,
        peak=peak,
        flops_over_peak=flops_over_peak(analysis, prediction.peak_flops, flops),
    )
