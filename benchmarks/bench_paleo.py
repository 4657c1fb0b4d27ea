"""How good is the PALEO prediction on this CPU? One `calibrate` (square matmuls, a copy
and five small kernels: nothing from the models below), then for each model the
predicted forward and training-step time against the median of interleaved measured
repetitions. Two versions of the model from the same calibration: one PPP for all
operators at the copy bandwidth (the plain PALEO formula), and a PPP per operator kind
with the calibrated PPP_mem and per-call overhead (dlperf's default for a calibrated
device). Goal: median absolute error at most 20 %.

On a 2-core machine shared with other jobs, wall time measures the neighbours as much as
the model: two OpenMP threads that wait for each other at every barrier slow down 3-5x
whenever another process takes a core, and the load changes between calibration and
measurement. So this runs one thread and times calibration and models alike in CPU time
of the process (time.process_time), which leaves out the time other jobs held the core;
the wall time of each model is recorded next to it.
"""

from __future__ import annotations

import os
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

from benchlib import save, spread, table
from dlperf.analytic.counting import analyze
from dlperf.analytic.devices import Device
from dlperf.analytic.measure import calibrate, make_step, timings
from dlperf.analytic.paleo import error_pct, predict
from dlperf.models import create_model
from dlperf.system import set_threads

warnings.filterwarnings("ignore")
SHAPE, BATCH, THREADS, WARMUP, ROUNDS = [3, 128, 128], 4, 1, 2, 7
MODELS = [
    "resnet18",
    "resnet50",
    "mobilenet_v2",
    "mobilenet_v3_large",
    "efficientnet_b0",
    "densenet121",
    "squeezenet1_1",
    "shufflenet_v2_x1_0",
    "regnet_x_400mf",
    "alexnet",
]
MODES = {"forward": False, "step": True}


def plain(device: Device) -> Device:
    """The same calibration read the plain PALEO way: the convolution kernel's PPP for
    every operator, the copy bandwidth (PPP_mem 1), no per-call overhead."""
    update = {"ppp": device.kind_ppp()["conv"], "ppp_by_kind": None, "ppp_mem": 1.0}
    return device.model_copy(update=update | {"op_overhead_us": None})


def describe(device: Device) -> str:
    kinds = ", ".join(f"{k} {v:.2f}" for k, v in device.kind_ppp().items())
    return (
        f"fp32 matmul {device.peak_tflops['fp32'] * 1e3:.1f} GFLOP/s, copy "
        f"{device.memory_bandwidth_gbs:.1f} GB/s, PPP {kinds}, PPP_mem {device.ppp_mem:.2f}, "
        f"{device.op_overhead_us:.1f} us per call"
    )


def main() -> None:
    set_threads(THREADS)
    cpu = torch.device("cpu")
    torch.manual_seed(0)
    load_before = os.getloadavg()
    device = calibrate(cpu, "bench-cpu", reps=ROUNDS, clock=time.process_time)
    print(f"calibrated: {describe(device)}", flush=True)

    steps: dict[tuple[str, str], Callable[[], None]] = {}
    records: dict[str, dict[str, Any]] = {}
    for name in MODELS:
        records[name] = {"model": name}
        for mode, train in MODES.items():
            a = analyze(name, SHAPE, BATCH, train)
            records[name][mode] = {
                "flops": a.totals()["step_flops" if train else "flops"],
                "predicted_s": predict(a, device)["totals"]["time_s"],
                "plain_predicted_s": predict(a, plain(device))["totals"]["time_s"],
            }
            model = create_model(name, num_classes=1000)
            steps[name, mode] = make_step(model, SHAPE, BATCH, train, "fp32", cpu)
            timings(steps[name, mode], cpu, WARMUP, 0)

    # Every round times each model once in each mode, so a drift in the machine's load
    # hits all models alike instead of the ones measured last.
    times: dict[tuple[str, str], list[float]] = {key: [] for key in steps}
    walls: dict[tuple[str, str], list[float]] = {key: [] for key in steps}
    for i in range(ROUNDS):
        for key, step in steps.items():
            wall, cpu_time = time.perf_counter(), time.process_time()
            step()
            times[key].append(time.process_time() - cpu_time)
            walls[key].append(time.perf_counter() - wall)
        print(f"round {i + 1}/{ROUNDS}, load average {os.getloadavg()[0]:.1f}", flush=True)
    load_during = os.getloadavg()

    after = calibrate(cpu, "bench-cpu", reps=ROUNDS, clock=time.process_time)
    print(f"calibrated again after the measurements: {describe(after)}", flush=True)

    for (name, mode), seconds in times.items():
        r = records[name][mode]
        r["measured_s"] = spread(seconds)
        r["wall_s"] = spread(walls[name, mode])
        r["error_pct"] = error_pct(r["predicted_s"], r["measured_s"]["median"])
        r["plain_error_pct"] = error_pct(r["plain_predicted_s"], r["measured_s"]["median"])

    rows = [
        [
            f"{name} {mode}",
            r[mode]["flops"] / 1e9,
            r[mode]["measured_s"]["median"] * 1e3,
            r[mode]["wall_s"]["median"] * 1e3,
            r[mode]["predicted_s"] * 1e3,
            r[mode]["error_pct"],
            r[mode]["plain_predicted_s"] * 1e3,
            r[mode]["plain_error_pct"],
        ]
        for mode in MODES
        for name, r in records.items()
    ]
    print(
        table(
            f"PALEO on this CPU ({THREADS} thread), input {SHAPE}, batch {BATCH}, median of "
            f"{ROUNDS} interleaved rounds after {WARMUP} warm-up",
            [
                "model",
                "GFLOP",
                "CPU ms",
                "wall ms",
                "per-kind ms",
                "err %",
                "plain ms",
                "plain err %",
            ],
            rows,
        )
    )
    summary: dict[str, Any] = {}
    for variant, key in (("per_kind", "error_pct"), ("plain", "plain_error_pct")):
        summary[variant] = {}
        for mode in (*MODES, "both"):
            errors = [
                abs(r[m][key]) for r in records.values() for m in MODES if mode in (m, "both")
            ]
            summary[variant][mode] = {
                "median_abs_error_pct": statistics.median(errors),
                "worst_abs_error_pct": max(errors),
            }
            print(
                f"{variant:8s} {mode:7s}: median |error| "
                f"{summary[variant][mode]['median_abs_error_pct']:.1f} %, worst "
                f"{summary[variant][mode]['worst_abs_error_pct']:.1f} %"
            )
    path = save(
        "paleo",
        {
            "input": SHAPE,
            "batch": BATCH,
            "threads": THREADS,
            "clock": "time.process_time (CPU time); wall_s: time.perf_counter",
            "warmup": WARMUP,
            "rounds": ROUNDS,
            "load_average": {
                "before": load_before,
                "after_measuring": load_during,
                "end": os.getloadavg(),
            },
            "device": device.model_dump(),
            "device_calibrated_after": after.model_dump(),
            "models": list(records.values()),
            "summary": summary,
        },
    )
    print(f"saved {path}")


if __name__ == "__main__":
    main()
