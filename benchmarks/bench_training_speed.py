"""Training speed of ResNet-18 (32x32 variant) on synthetic data through the dlperf engine:
fp32, bf16 autocast, channels_last and torch.compile; images/s, and the achieved FLOP/s as
a share of a peak in the same dtype: on a GPU the device catalog's entry for it (MFU; the
fp32 variants against TF32's peak where cuDNN's convolutions use it, as torch lets them by
default), elsewhere this machine's measured dense matmul.

FLOPs per image are counted (forward + backward) by torch.utils.flop_counter, which counts
matmuls and convolutions (2 FLOPs per multiply-accumulate)."""

from __future__ import annotations

import re
import tempfile

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchlib import save, spread, table
from dlperf.analytic.devices import Device, load_catalog
from dlperf.config import Experiment
from dlperf.experiment.run import run_experiment
from dlperf.models import create_model
from dlperf.store import RunStore
from dlperf.system import pick_device
from dlperf.timing import round_robin, timed

REPEATS, BATCH = 3, 64
CONTENDERS = {
    "fp32": {},
    "bf16": {"precision": "bf16"},
    "channels_last": {"channels_last": True},
    "compiled": {"compile": True},
}


def matmul_peak(dtype: torch.dtype, device: torch.device, n: int = 2048, repeats: int = 5) -> float:
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)
    best = min(timed(lambda: a @ b, 1, repeats, device))
    return 2 * n**3 / best


def catalog_entry(gpu: str) -> Device | None:
    """The catalog's entry for a GPU as CUDA names it ("NVIDIA H100 80GB HBM3", "Tesla
    V100-SXM2-16GB"): the entry whose model, the key up to its first '-', is a word of the
    name, narrowed by the key's other parts (40GB) where several are; None if not one."""
    words = set(re.split(r"[\s_-]+", gpu.upper()))
    gpus = [d for d in load_catalog().values() if d.kind == "gpu"]
    found = [d for d in gpus if d.name.upper().split("-")[0] in words]
    if len(found) > 1:
        found = [d for d in found if set(d.name.upper().split("-")[1:]) <= words]
    return found[0] if len(found) == 1 else None


def peaks(device: torch.device) -> tuple[dict[str, float | None], str]:
    """Peak FLOP/s of the fp32 and bf16 variants, and where the figures come from."""
    if device.type != "cuda":
        measured = {"fp32": matmul_peak(torch.float32, device)}
        measured["bf16"] = matmul_peak(torch.bfloat16, device)
        return measured, f"measured dense matmul on {device}"
    name = torch.cuda.get_device_name(device)
    entry = catalog_entry(name)
    if entry is None:
        return {"fp32": None, "bf16": None}, f"{name}: not in the device catalog"
    tf32 = torch.backends.cudnn.allow_tf32 and torch.cuda.get_device_capability(device)[0] >= 8
    fp32 = "tf32" if tf32 and "tf32" in entry.peak_tflops else "fp32"
    figures = {
        "fp32": entry.peak_tflops.get(fp32),
        "bf16": entry.peak_tflops.get("bf16"),
    }
    return (
        {k: v * 1e12 if v is not None else None for k, v in figures.items()},
        f"catalog {entry.name} ({fp32} for the fp32 variants; {entry.source})",
    )


def train_flops_per_image() -> float:
    model = create_model("resnet18_cifar")
    x = torch.randn(BATCH, 3, 32, 32)
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.cross_entropy(model(x), torch.zeros(BATCH, dtype=torch.long)).backward()
    return counter.get_total_flops() / BATCH


def images_per_s(store: RunStore, run: dict) -> float:
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
    device = pick_device()  # where the runs train
    peak_flops, basis = peaks(device)
    flops = train_flops_per_image()
    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore.open(f"{tmp}/bench.db")
        results = round_robin(
            {name: (lambda run=run: images_per_s(store, run)) for name, run in CONTENDERS.items()},
            REPEATS,
        )
    rows = []
    for name, rates in results.items():
        peak = peak_flops["bf16" if name == "bf16" else "fp32"]
        median = spread(rates)["median"]
        share = median * flops / peak if peak else None
        rows.append([name, *spread(rates).values(), median * flops / 1e9, share])
    shown = ", ".join(
        f"{k} {v / 1e9:,.0f} GFLOP/s" if v else f"{k} unknown" for k, v in peak_flops.items()
    )
    print(
        table(
            f"ResNet-18 (32x32), batch {BATCH}, synthetic data, on {device}: images/s; "
            f"training = {flops / 1e9:.2f} GFLOP/image; peak {shown} ({basis})",
            ["variant", "min", "median", "max", "GFLOP/s", "share of peak"],
            rows,
        )
    )
    save(
        "training_speed",
        {
            "images_per_s": results,
            "train_flops_per_image": flops,
            "peak_flops": peak_flops,
            "peak_basis": basis,
            "device": str(device),
            "batch": BATCH,
        },
    )


if __name__ == "__main__":
    main()
