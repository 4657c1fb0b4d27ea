"""ONNX Runtime against PyTorch eager (NCHW and channels_last), CPU inference latency.
torchvision ResNet-18 (3x224x224, 1000 classes) and CIFAR ResNet-20 (3x32x32), random
weights, exported with `dlperf export --dynamic-batch`, timed with `dlperf infer bench`'s
code: warm-up excluded, contenders interleaved call by call, same explicit thread count.
Goal: ONNX Runtime at least 1.3x faster than eager at batch 1 (ratio of median latencies)."""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from benchlib import save, table
from dlperf.deploy.bench import bench
from dlperf.deploy.export import export, from_registry

GOAL = 1.3
MODELS = {"resnet18": ((3, 224, 224), 1000), "resnet20": ((3, 32, 32), 10)}
# (batch sizes, timed calls per contender): batch 1 answers the question, so more calls.
PLAN = [([1], 40), ([8, 32], 10)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="for both contenders")
    threads = parser.parse_args().threads
    load = os.getloadavg()
    results: dict[str, list[dict]] = {}
    exports = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (shape, classes) in MODELS.items():
            source = from_registry(name, shape, classes)
            path = Path(tmp) / f"{name}.onnx"
            exports[name] = export(source, path, dynamic_batch=True, threads=threads)
            assert exports[name]["parity"], exports[name]
            results[name] = [
                row
                for batches, repeats in PLAN
                for row in bench(path, batches, source.model, threads, repeats, warmup=3)["rows"]
            ]
    rows = [
        [name, r["batch"], r["contender"], r["min_ms"], r["p50_ms"], r["max_ms"],
         r["throughput"], r["ort_speedup"]]
        for name, model_rows in results.items()
        for r in model_rows
    ]  # fmt: skip
    print(
        table(
            f"CPU inference, {threads} threads, latency ms (min / median / max), "
            "images/s, and eager median / ONNX Runtime median",
            ["model", "batch", "contender", "min", "median", "max", "images/s", "x ORT"],
            rows,
        )
    )
    speedups = {
        name: next(
            r["ort_speedup"]
            for r in model_rows
            if r["batch"] == 1 and r["contender"] == "torch eager"
        )
        for name, model_rows in results.items()
    }
    for name, speedup in speedups.items():
        verdict = "met" if speedup >= GOAL else "NOT met"
        print(f"{name}: ONNX Runtime {speedup:.2f}x faster than eager at batch 1 "
              f"(goal {GOAL}x: {verdict})")  # fmt: skip
    print(f"load average before the run: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    save(
        "onnx" if threads == 2 else f"onnx-threads{threads}",
        {
            "threads": threads,
            "goal_batch1_speedup": GOAL,
            "batch1_speedup": speedups,
            "load_average_before": load,
            "models": {
                name: {"input": list(shape), "classes": classes}
                for name, (shape, classes) in MODELS.items()
            },
            "parity": {
                name: {k: e[k] for k in ("exporter", "opset", "max_abs_diff", "parity")}
                for name, e in exports.items()
            },
            "rows": results,
        },
    )


if __name__ == "__main__":
    main()
