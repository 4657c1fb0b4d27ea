"""Input pipeline: dlperf's batched tensor augmentation against torchvision's per-sample
transforms through a DataLoader with 2 workers, on 32x32 images (crop 4, flip, Cutout 16,
normalise), one epoch each, interleaved. Goal: at least 10x more images/s."""

from __future__ import annotations

import torch

from benchlib import save, spread, table
from dlperf.config import AugmentConfig, DataConfig
from dlperf.data import load_data, make_loader
from dlperf.timing import Timer, round_robin

REPEATS = 5
AUGMENT = AugmentConfig(crop_padding=4, flip=True, cutout=16)


def epoch_rate(loader) -> float:
    n, timer = 0, Timer()
    timer.start()
    for x, _ in loader:
        n += len(x)
    return n / timer.stop()


def main() -> None:
    torch.set_num_threads(2)
    cfg = DataConfig(name="synthetic", shape=[3, 32, 32], size=10_000, num_workers=2)
    data = load_data(cfg)
    cpu = torch.device("cpu")
    tensor = make_loader(data, data.train, cfg, 256, cpu, AUGMENT)
    classic_cfg = cfg.model_copy(update={"loader": "torchvision"})
    classic = make_loader(data, data.train, classic_cfg, 256, cpu, AUGMENT)
    results = round_robin(
        {
            "tensor (batched)": lambda: epoch_rate(tensor),
            "torchvision (2 workers)": lambda: epoch_rate(classic),
        },
        REPEATS,
    )
    ratios = [
        a / b
        for a, b in zip(
            results["tensor (batched)"], results["torchvision (2 workers)"], strict=True
        )
    ]
    rows = [[name, *spread(v).values()] for name, v in results.items()]
    rows.append(["speed-up", *spread(ratios).values()])
    print(
        table(
            "10,000 32x32 images, batch 256, crop+flip+cutout+normalise: images/s",
            ["pipeline", "min", "median", "max"],
            rows,
        )
    )
    print(f"median speed-up: {spread(ratios)['median']:.1f}x (goal: at least 10x)")
    save("input_pipeline", {"images_per_s": results, "speedup": ratios})


if __name__ == "__main__":
    main()
