"""Issue 33's GPU figures in one run of a few minutes (`python benchmarks/bench_gpu.py`):

1. training throughput and MFU of ResNet-50 (224x224) and ResNet-18 (32x32) at fp32, TF32,
   bf16 autocast, bf16 + channels_last and bf16 + torch.compile, through dlperf's engine
   (`run_experiment`, synthetic data) side by side with a plain PyTorch loop on one
   resident batch, in interleaved rounds; MFU against the device catalog's dense peak in the
   variant's precision (fp32: TF32 off for matmuls and cuDNN alike; the others with it on);
2. PALEO's error per operator kind on this GPU: `dlperf calibrate`, then
   `dlperf predict --measure` on both models;
3. ONNX Runtime against eager PyTorch at batch 1 and 64, on the providers this ONNX
   Runtime has (the CUDA provider needs the onnxruntime-gpu build);
4. a profiled run on the GPU (`dlperf run --profile`, `dlperf runs trace --json`): its top
   operators with their CUDA time.

`--quick` shrinks every size so that the script runs on a CPU in a minute (a smoke test of
the code, not a measurement). Results: benchmarks/results/gpu.json and stdout."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from bench_training_speed import catalog_entry
from benchlib import save, spread, table
from dlperf.config import Experiment
from dlperf.experiment.run import run_experiment
from dlperf.models import create_model
from dlperf.store import RunStore
from dlperf.system import pick_device
from dlperf.timing import round_robin, timed

ROOT = Path(__file__).resolve().parent.parent
# name: (image side, batch, timed steps)
MODELS = {"resnet18_cifar": (32, 256, 30), "resnet50": (224, 64, 20)}
QUICK_MODELS = {"resnet18_cifar": (16, 8, 2)}
# The variants: TF32 on or off, autocast precision, memory format, torch.compile.
VARIANTS: dict[str, dict[str, Any]] = {
    "fp32": {"tf32": False},
    "tf32": {"tf32": True},
    "bf16": {"tf32": True, "precision": "bf16"},
    "bf16+channels_last": {"tf32": True, "precision": "bf16", "channels_last": True},
    "bf16+compile": {"tf32": True, "precision": "bf16", "compile": True},
}
WARMUP = 5
# Host threads: the loader and the CPU-side work; never more than the cores this process has.
THREADS = min(4, len(os.sched_getaffinity(0)))


def set_tf32(on: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def train_flops_per_image(name: str, side: int, device: torch.device) -> float:
    model = create_model(name).to(device)
    x = torch.randn(2, 3, side, side, device=device)
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(model(x), torch.zeros(2, dtype=torch.long, device=device)).backward()
    return counter.get_total_flops() / 2


def plain_loop(
    name: str, side: int, batch: int, steps: int, variant: dict[str, Any], device: torch.device
) -> Callable[[], float]:
    """images/s of the textbook loop on one batch resident on the device; the model (and its
    compilation) is built once and timed afresh each round."""
    model = create_model(name).to(device)
    x = torch.randn(batch, 3, side, side, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    if variant.get("channels_last"):
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    forward = torch.compile(model) if variant.get("compile") else model
    bf16 = variant.get("precision") == "bf16"

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(forward(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def measure() -> float:
        set_tf32(variant["tf32"])
        return batch / median(timed(step, WARMUP, steps, device))

    return measure


def engine_run(
    store: RunStore, name: str, side: int, batch: int, steps: int, variant: dict[str, Any]
) -> Callable[[], float]:
    """images/s of `dlperf run` on the same model: synthetic uint8 images in memory, moved
    and normalised a batch at a time, one epoch of WARMUP + steps steps."""
    run = {k: v for k, v in variant.items() if k != "tf32"}
    exp = Experiment.model_validate(
        {
            "model": {"name": name},
            "data": {
                "name": "synthetic",
                "shape": [3, side, side],
                "size": (WARMUP + steps) * batch,
                "val_fraction": 0.0,
            },
            "train": {"epochs": 1, "batch_size": batch, "lr": 0.01},
            "run": {"warmup_steps": WARMUP, "checkpoint": False, "threads": THREADS, **run},
        }
    )

    def measure() -> float:
        set_tf32(variant["tf32"])
        return float(run_experiment(exp, store)["throughput"])

    return measure


def throughput(quick: bool, device: torch.device, store: RunStore) -> dict[str, Any]:
    entry = catalog_entry(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
    peaks = {
        v: (entry.peak_tflops.get(p) if entry else None)
        for v, p in [("fp32", "fp32"), ("tf32", "tf32"), ("bf16", "bf16")]
    }
    out: dict[str, Any] = {"peak_tflops": peaks, "catalog": entry.name if entry else None}
    rounds = 1 if quick else 2
    for name, (side, batch, steps) in (QUICK_MODELS if quick else MODELS).items():
        flops = train_flops_per_image(name, side, device)
        contenders: dict[tuple[str, str], Callable[[], float]] = {}
        for vname, variant in VARIANTS.items():
            if quick and variant.get("compile"):
                continue
            args = (name, side, batch, steps, variant)
            contenders[(vname, "plain")] = plain_loop(*args, device)
            contenders[(vname, "dlperf")] = engine_run(store, *args)
        started = time.perf_counter()
        results = round_robin(contenders, rounds)
        rows, records = [], {}
        for vname in VARIANTS:
            if (vname, "plain") not in results:
                continue
            plain, ours = spread(results[(vname, "plain")]), spread(results[(vname, "dlperf")])
            peak = peaks["fp32" if vname == "fp32" else "tf32" if vname == "tf32" else "bf16"]
            mfu = {
                k: s["median"] * flops / (peak * 1e12) if peak else None
                for k, s in (("plain", plain), ("dlperf", ours))
            }
            ratio = ours["median"] / plain["median"]
            rows.append(
                [vname, *plain.values(), *ours.values(), ratio, mfu["plain"], mfu["dlperf"]]
            )
            records[vname] = {
                "plain": plain,
                "dlperf": ours,
                "dlperf_over_plain": ratio,
                "mfu": mfu,
                "raw": {k: results[(vname, k)] for k in ("plain", "dlperf")},
            }
        print(
            table(
                f"{name} {side}x{side}, batch {batch}, {steps} steps x {rounds} rounds on "
                f"{describe(device)}: images/s (train {flops / 1e9:.2f} GFLOP/image; "
                f"{time.perf_counter() - started:.0f} s)",
                [
                    "variant",
                    "plain min",
                    "median",
                    "max",
                    "dlperf min",
                    "median",
                    "max",
                    "dlperf/plain",
                    "MFU plain",
                    "MFU dlperf",
                ],
                rows,
            ),
            flush=True,
        )
        out[name] = {
            "side": side,
            "batch": batch,
            "steps": steps,
            "rounds": rounds,
            "train_flops_per_image": flops,
            "variants": records,
        }
    set_tf32(False)
    return out


def describe(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else str(device)


def dlperf(db: str, *args: str) -> dict[str, Any]:
    """`dlperf ARGS --json` in a child process, as a user runs it."""
    cmd = [sys.executable, "-m", "dlperf", "--db", db, *args, "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=400, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {done.returncode}: {done.stderr[-2000:]}")
    return dict(json.loads(done.stdout))


def paleo(quick: bool, db: str, tmp: str) -> dict[str, Any]:
    """calibrate this device, then predict --measure both models; PALEO's error per operator
    kind (median and max |error| over the layers of that module type)."""
    os.environ["DLPERF_DEVICES"] = f"{tmp}/devices.toml"
    device = dlperf(db, "calibrate", "--name", "this-device")
    out: dict[str, Any] = {
        "device": {
            k: device.get(k)
            for k in ("description", "peak_tflops", "memory_bandwidth_gbs", "ppp_by_kind")
        }
    }
    for name, (side, batch, _) in (QUICK_MODELS if quick else MODELS).items():
        doc = dlperf(
            db,
            "predict",
            name,
            "--device",
            "this-device",
            "--input",
            f"3,{side},{side}",
            "--batch",
            str(batch),
            "--reps",
            "5",
            "--measure",
        )
        measured = doc["measured"]
        kinds: dict[str, list[float]] = defaultdict(list)
        for row in measured["layers"]:
            if row["error_pct"] is not None:  # None: a layer the profiler gave 0 s
                kinds[row["type"]].append(abs(row["error_pct"]))
        rows = [[k, len(v), median(v), max(v)] for k, v in sorted(kinds.items())]
        print(
            table(
                f"PALEO on {name} {side}x{side}, batch {batch}: whole-model error "
                f"{measured['error_pct']:.1f}%, |error| % per layer by kind",
                ["kind", "layers", "median", "max"],
                rows,
            ),
            flush=True,
        )
        out[name] = {
            "error_pct": measured["error_pct"],
            "measured_s": measured["measured_s"],
            "by_kind": {
                r[0]: {"layers": r[1], "median_abs_error_pct": r[2], "max_abs_error_pct": r[3]}
                for r in rows
            },
        }
    return out


def onnx_vs_eager(quick: bool, device: torch.device, tmp: str) -> dict[str, Any]:
    """ONNX Runtime (each local provider it has but TensorRT) against eager PyTorch on this device,
    ResNet-18 (32x32) in eval mode at batch 1 and 64: ms per call, min/median/max of 30."""
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")  # as dlperf.deploy loads it
    import onnxruntime as ort

    model = create_model("resnet18_cifar").eval()
    path = f"{tmp}/r18.onnx"
    torch.onnx.export(
        model,
        (torch.randn(1, 3, 32, 32),),
        path,
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": {0: "n"}, "y": {0: "n"}},
        dynamo=False,
    )
    skip = {"TensorrtExecutionProvider", "AzureExecutionProvider"}  # needs TensorRT; remote
    providers = [p for p in ort.get_available_providers() if p not in skip]
    gpu_model = model.to(device)
    reps = 3 if quick else 30
    out: dict[str, Any] = {"providers": ort.get_available_providers(), "rows": []}
    rows = []
    for batch in (1, 64):
        x = torch.randn(batch, 3, 32, 32)
        xd = x.to(device)
        with torch.inference_mode():
            eager = timed(lambda xd=xd: gpu_model(xd), 5, reps, device)
        rows.append([f"eager on {device}", batch, *(v * 1e3 for v in spread(eager).values())])
        for provider in providers:
            session = ort.InferenceSession(path, providers=[provider])
            feed = {"x": x.numpy()}
            times = timed(lambda s=session, f=feed: s.run(None, f), 5, reps)
            rows.append([provider, batch, *(v * 1e3 for v in spread(times).values())])
    print(
        table(
            "ResNet-18 (32x32) inference, ms per call (host arrays in and out for ONNX "
            "Runtime; eager: tensors already on the device)",
            ["path", "batch", "min", "median", "max"],
            rows,
        ),
        flush=True,
    )
    out["rows"] = [
        dict(zip(["path", "batch", "min_ms", "median_ms", "max_ms"], r, strict=True)) for r in rows
    ]
    return out


PROFILE_EXP = """
[model]
name = "resnet18_cifar"
[data]
name = "synthetic"
shape = [3, 32, 32]
size = {size}
val_fraction = 0.0
[train]
epochs = 1
batch_size = {batch}
[run]
checkpoint = false
out_dir = "{out}"
"""


def profiled_run(quick: bool, db: str, tmp: str) -> dict[str, Any]:
    """A profiled run and its trace's top operators, CPU and CUDA time side by side."""
    batch = 8 if quick else 256
    path = Path(tmp, "profile.toml")
    path.write_text(PROFILE_EXP.format(size=40 * batch, batch=batch, out=f"{tmp}/runs"))
    run = dlperf(db, "run", str(path), "--profile")
    trace = dlperf(db, "runs", "trace", str(run["run_id"]), "--top", "12")
    print(json.dumps(trace, indent=1)[:6000], flush=True)
    return {"run_id": run["run_id"], "device": run["device"], "trace": trace}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run on CPU")
    parser.add_argument("--parts", default="profile,onnx,paleo,throughput")
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    device = pick_device()
    if device.type != "cuda" and not args.quick:  # `make bench` runs every script
        print("bench_gpu: no CUDA device here: skipped (--quick: a smoke run on the CPU)")
        return
    info: dict[str, Any] = {
        "device": describe(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
    }
    if device.type == "cuda":
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=False,
        )
        info["nvidia_smi"] = smi.stdout.strip()
    print(json.dumps(info), flush=True)
    results: dict[str, Any] = {"info": info, "quick": args.quick}
    with tempfile.TemporaryDirectory() as tmp:
        db = f"{tmp}/bench.db"
        parts: dict[str, Callable[[], dict[str, Any]]] = {
            "throughput": lambda: throughput(args.quick, device, RunStore.open(db)),
            "paleo": lambda: paleo(args.quick, db, tmp),
            "onnx": lambda: onnx_vs_eager(args.quick, device, tmp),
            "profile": lambda: profiled_run(args.quick, db, tmp),
        }
        for part in args.parts.split(","):
            started = time.perf_counter()
            try:
                results[part] = parts[part]()
            except Exception as e:  # one part's failure costs its own figures, not the others'
                print(f"{part} failed: {type(e).__name__}: {e}", flush=True)
                results[part] = {"error": f"{type(e).__name__}: {e}"}
            print(f"-- {part}: {time.perf_counter() - started:.0f} s", flush=True)
            path = save("gpu" if not args.quick else "gpu_quick", results)
            if out := os.environ.get("OUT"):  # the device tool's folder: after every part
                Path(out, "gpu.json").write_text(path.read_text())


if __name__ == "__main__":
    main()
