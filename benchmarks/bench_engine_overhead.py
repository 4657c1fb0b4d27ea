"""Instrumentation overhead: the dlperf engine (timing=coarse) against a plain 15-line
PyTorch loop, same model, data, batch and threads, in interleaved repetitions.
Goal: dlperf at most 3% slower. Images/s for both = samples / wall time after warm-up, on the
device a run picks (CUDA, then MPS, then CPU), synchronised before each clock read."""

from __future__ import annotations

import tempfile

import torch

from benchlib import save, spread, table
from dlperf.config import Experiment
from dlperf.data import load_data
from dlperf.experiment.run import run_experiment
from dlperf.models import create_model
from dlperf.store import RunStore
from dlperf.system import pick_device
from dlperf.timing import Timer, round_robin

REPEATS, EPOCHS, WARMUP = 5, 2, 5
SETTINGS = {
    "model": {"name": "resnet20"},
    "data": {"name": "synthetic", "shape": [3, 32, 32], "size": 2048, "val_fraction": 0.0},
    "train": {"epochs": EPOCHS, "batch_size": 128, "lr": 0.05},
    "run": {"timing": "coarse", "warmup_steps": WARMUP, "checkpoint": False, "threads": 2},
}


def plain_loop() -> float:
    """What a throw-away script does: tensors in memory, one loop, no instrumentation."""
    torch.manual_seed(0)
    device = pick_device()  # the engine's choice, so both race on the same device
    data = load_data(Experiment.model_validate(SETTINGS).data)
    x_all = ((data.train.images.float() / 255 - 0.5) / 0.25).to(device)
    y_all = data.train.labels.to(device)
    model = create_model("resnet20").to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    steps, samples, timer = 0, 0, Timer(device)
    for _ in range(EPOCHS):
        perm = torch.randperm(len(y_all), device=device)
        for i in range(len(y_all) // 128):
            idx = perm[i * 128 : (i + 1) * 128]
            loss = torch.nn.functional.cross_entropy(model(x_all[idx]), y_all[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            steps += 1
            if steps == WARMUP:
                timer.start()
            elif steps > WARMUP:
                samples += 128
    return samples / timer.stop()


def dlperf_engine(store: RunStore) -> float:
    exp = Experiment.model_validate(SETTINGS)
    return run_experiment(exp, store)["throughput"]


def main() -> None:
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore.open(f"{tmp}/bench.db")
        results = round_robin(
            {"plain loop": plain_loop, "dlperf (coarse)": lambda: dlperf_engine(store)}, REPEATS
        )
    ratios = [p / d for p, d in zip(results["plain loop"], results["dlperf (coarse)"], strict=True)]
    rows = [[name, *spread(v).values()] for name, v in results.items()]
    rows.append(["slowdown plain/dlperf", *spread(ratios).values()])
    print(
        table(
            f"resnet20, synthetic 32x32, batch 128, on {pick_device()}, images/s "
            "(min / median / max)",
            ["contender", "min", "median", "max"],
            rows,
        )
    )
    overhead = spread(ratios)["median"] - 1
    print(f"median overhead: {overhead:+.1%} (goal: at most +3%)")
    save(
        "engine_overhead",
        {
            "images_per_s": results,
            "ratio_plain_over_dlperf": ratios,
            "median_overhead": overhead,
            "settings": SETTINGS,
            "device": str(pick_device()),
        },
    )


if __name__ == "__main__":
    main()
