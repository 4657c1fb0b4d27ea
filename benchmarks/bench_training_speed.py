"""Training speed of ResNet-18 (32x32 variant) on synthetic data through the dlperf engine:
fp32, bf16 autocast, channels_last and torch.compile; images/s, and the achieved FLOP/s as
a share of this machine's measured dense matmul peak in the same dtype.

FLOPs per image are counted (forward + backward) by torch.utils.flop_counter, which counts
matmuls and convolutions (2 FLOPs per multiply-accumulate)."""

from __future__ import annotations

import tempfile
import time

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchlib import interleaved, save, spread, table
from dlperf.config import Experiment
from dlperf.engine.run import run_experiment
from dlperf.models import create_model
from dlperf.store import Store

REPEATS, BATCH = 3, 64
CONTENDERS = {
    "fp32": {},
    "bf16": {"precision": "bf16"},
    "channels_last": {"channels_last": True},
    "compiled": {"compile": True},
}


def matmul_peak(dtype: torch.dtype, n: int = 2048, repeats: int = 5) -> float:
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    best = min(_time(lambda: a @ b) for _ in range(repeats))
    return 2 * n**3 / best


def _time(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def train_flops_per_image() -> float:
    model = create_model("resnet18_cifar")
    x = torch.randn(BATCH, 3, 32, 32)
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.cross_entropy(model(x), torch.zeros(BATCH, dtype=torch.long)).backward()
    return counter.get_total_flops() / BATCH


def images_per_s(store: Store, run: dict) -> float:
    exp = Experiment.model_validate(
        {
            "model": {"name": "resnet18_cifar"},
            "data": {"name": "synthetic", "size": 12 * BATCH, "val_fraction": 0.0},
            "train": {"epochs": 1, "batch_size": BATCH, "lr": 0.05},
            "run": {"warmup_steps": 3, "checkpoint": False, "threads": 2, **run},
        }
    )
    return run_experiment(exp, store)["throughput"]


def main() -> None:
    torch.set_num_threads(2)
    peaks = {"fp32": matmul_peak(torch.float32), "bf16": matmul_peak(torch.bfloat16)}
    flops = train_flops_per_image()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(f"{tmp}/bench.db")
        results = interleaved(
            {name: (lambda run=run: images_per_s(store, run)) for name, run in CONTENDERS.items()},
            REPEATS,
        )
    rows = []
    for name, rates in results.items():
        peak = peaks["bf16" if name == "bf16" else "fp32"]
        median = spread(rates)["median"]
        rows.append([name, *spread(rates).values(), median * flops / 1e9, median * flops / peak])
    print(
        table(
            f"ResNet-18 (32x32), batch {BATCH}, synthetic data: images/s; training = "
            f"{flops / 1e9:.2f} GFLOP/image; matmul peak fp32 {peaks['fp32'] / 1e9:.0f} GFLOP/s, "
            f"bf16 {peaks['bf16'] / 1e9:.0f} GFLOP/s",
            ["variant", "min", "median", "max", "GFLOP/s", "share of peak"],
            rows,
        )
    )
    save(
        "training_speed",
        {
            "images_per_s": results,
            "train_flops_per_image": flops,
            "matmul_peak_flops": peaks,
            "batch": BATCH,
        },
    )


if __name__ == "__main__":
    main()
