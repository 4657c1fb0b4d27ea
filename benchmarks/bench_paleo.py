"""How good is the PALEO prediction on this CPU? One `calibrate`, then for each model the
predicted forward and training-step time (dlperf's counts, the calibrated peak, its PPP)
against the measured median of timed repetitions after warm-up.
Goal: median absolute error at most 20 %.
"""

from __future__ import annotations

import os
import statistics
import warnings
from typing import Any

import torch

from benchlib import save, table
from dlperf.analytic.counting import analyze
from dlperf.analytic.measure import calibrate, measure_model
from dlperf.analytic.paleo import error_pct, predict
from dlperf.models import create_model
from dlperf.system import set_threads

warnings.filterwarnings("ignore")
SHAPE, BATCH, WARMUP, REPS = [3, 128, 128], 4, 2, 5
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


def joint_fit(records: list[dict[str, Any]]) -> dict[str, float]:
    """The (PPP, PPP_mem) grid point whose PALEO times best explain every measurement:
    how well the formula itself can do, apart from how calibration picks its constants."""
    cases = [r[key] for r in records for key in ("forward", "step")]

    def errors(ppp: float, ppp_mem: float) -> list[float]:
        return [
            abs(
                error_pct(
                    c["compute_s_at_peak"] / ppp + c["memory_s_at_peak"] / ppp_mem,
                    c["measured_s"]["median"],
                )
            )
            for c in cases
        ]

    grid = [(p / 50, m / 50) for p in range(5, 101) for m in range(1, 51)]
    ppp, ppp_mem = min(grid, key=lambda g: statistics.median(errors(*g)))
    best = errors(ppp, ppp_mem)
    return {
        "ppp": ppp,
        "ppp_mem": ppp_mem,
        "median_abs_error_pct": statistics.median(best),
        "worst_abs_error_pct": max(best),
    }


def main() -> None:
    threads = set_threads(None)
    cpu = torch.device("cpu")
    torch.manual_seed(0)
    device = calibrate(cpu, "bench-cpu")
    print(
        f"calibrated: fp32 matmul {device.peak_tflops['fp32'] * 1e3:.1f} GFLOP/s, "
        f"PPP (3x3 conv / matmul) {device.ppp:.2f}, copy {device.memory_bandwidth_gbs:.1f} GB/s",
        flush=True,
    )
    records = []
    for name in MODELS:
        record: dict[str, Any] = {"model": name}
        for train in (False, True):
            a = analyze(name, SHAPE, BATCH, train)
            predicted = predict(a, device)["totals"]["time_s"]
            at_peak = predict(a, device, ppp=1.0, ppp_mem=1.0)["totals"]
            model = create_model(name, num_classes=1000)
            m = measure_model(
                model, SHAPE, BATCH, train, "fp32", cpu, WARMUP, REPS, profile_layers=False
            )
            key = "step" if train else "forward"
            record[key] = {
                "flops": a.totals()["step_flops" if train else "flops"],
                "predicted_s": predicted,
                "measured_s": m["spread_s"],
                "error_pct": error_pct(predicted, m["spread_s"]["median"]),
                "compute_s_at_peak": at_peak["compute_s"],
                "memory_s_at_peak": at_peak["memory_s"],
            }
        records.append(record)
        print(
            f"{name}: forward {record['forward']['error_pct']:+.0f} %, "
            f"step {record['step']['error_pct']:+.0f} %",
            flush=True,
        )

    rows = []
    for r in records:
        f, s = r["forward"], r["step"]
        rows.append(
            [
                r["model"],
                f["flops"] / 1e9,
                f["predicted_s"] * 1e3,
                f["measured_s"]["median"] * 1e3,
                f["error_pct"],
                s["predicted_s"] * 1e3,
                s["measured_s"]["median"] * 1e3,
                s["error_pct"],
            ]
        )
    print(
        table(
            f"PALEO on this CPU ({threads} threads), input {SHAPE}, batch {BATCH}, "
            f"median of {REPS} after {WARMUP} warm-up",
            [
                "model",
                "fwd GFLOP",
                "fwd pred ms",
                "fwd meas ms",
                "fwd err %",
                "step pred ms",
                "step meas ms",
                "step err %",
            ],
            rows,
        )
    )
    summary = {}
    for key in ("forward", "step"):
        errors = [abs(r[key]["error_pct"]) for r in records]
        summary[key] = {
            "median_abs_error_pct": statistics.median(errors),
            "worst_abs_error_pct": max(errors),
        }
        print(
            f"{key}: median |error| {summary[key]['median_abs_error_pct']:.1f} %, "
            f"worst {summary[key]['worst_abs_error_pct']:.1f} %"
        )
    joint = joint_fit(records)
    print(
        f"PPP {joint['ppp']:.2f} and PPP_mem {joint['ppp_mem']:.2f}, fitted to all these "
        f"measurements at once: median |error| {joint['median_abs_error_pct']:.1f} %, "
        f"worst {joint['worst_abs_error_pct']:.1f} %"
    )
    path = save(
        "paleo",
        {
            "input": SHAPE,
            "batch": BATCH,
            "warmup": WARMUP,
            "reps": REPS,
            "threads": threads,
            "load_average": os.getloadavg(),
            "device": device.model_dump(),
            "models": records,
            "summary": summary,
            "joint_fit": joint,
        },
    )
    print(f"saved {path}")


if __name__ == "__main__":
    main()
