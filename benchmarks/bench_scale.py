"""Two questions about `dlperf scale`, 2 workers under torchrun with gloo on this host:

1. Does dlperf's DDP worker cost anything? Against a plain hand-written torchrun DDP script
   (ddp_plain.py) on the same model, batch and threads, in interleaved repetitions: the ratio
   of wall time per step after warm-up (goal: dlperf within 3%).
2. How well do the communication models, fitted by the all-reduce microbenchmark, predict
   a step's exposed communication (step time minus the no-op-hook step time)? Over several
   model sizes, at DDP's default 25 MB buckets and with a 1 GB cap (one bucket: in torch 2.14
   an explicit cap applies to the first bucket too, so nothing overlaps): the ring model (the
   whole gradient's all-reduce, bucket by bucket, nothing overlapped) and the bucket/overlap
   model (each bucket's all-reduce as long as the benchmark's median at its size, placed
   after its gradients are ready in the backward pass, measured on the compute-only replica,
   the backward paying the benchmark's measured overlap cost while a bucket is in flight;
   dlperf.distributed.overlap), and DDP's own backward communication time beside them. The
   benchmark's all-reduce times after a compute burst are printed beside its medians.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import save, spread, table
from dlperf.config import Experiment
from dlperf.distributed.allreduce_study import run_allreduce_study
from dlperf.distributed.launch import free_port
from dlperf.distributed.study import run_study
from dlperf.store import RunStore
from dlperf.timing import round_robin

HERE = Path(__file__).resolve().parent
REPEATS, STEPS, WARMUP, BATCH = 5, 30, 5, 32
COMM_STEPS = 40  # per point and phase: the exposed time is a difference of two medians
ONE_BUCKET_MB, DEFAULT_BUCKET_MB = 1024.0, 25.0
MODELS = [("resnet20", 16), ("resnet56", 16), ("smallcnn", 16), ("resnet18_cifar", 8)]


def _experiment(model: str, **scale: object) -> Experiment:
    """A weak-scaling point of 2 workers on synthetic data, with `scale` on top."""
    return Experiment.model_validate(
        {
            "model": {"name": model},
            "data": {"name": "synthetic", "shape": [3, 32, 32], "size": 512},
            "train": {"lr": 0.05},
            "run": {"name": f"bench-{model}"},
            "scale": {"workers": [2], "mode": "weak", "synthetic": True, "plots": False, **scale},
        }
    )


def plain(tmp: Path) -> float:
    out = tmp / "plain.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            f"127.0.0.1:{free_port()}",
            str(HERE / "ddp_plain.py"),
            *("--batch", str(BATCH), "--steps", str(STEPS), "--warmup", str(WARMUP)),
            *("--out", str(out)),
        ],
        check=True,
        capture_output=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    result = json.loads(out.read_text())
    return result["wall_s"] / result["steps"]


def dlperf(store: RunStore, tmp: Path) -> float:
    exp = _experiment(
        "resnet20", per_worker_batch=BATCH, steps=STEPS, warmup_steps=WARMUP, comm_split=False
    )
    (row,) = run_study(exp, store, tmp).rows
    return row["wall_time_s"] / row["timed_steps"]


def comm_check(store: RunStore, tmp: Path) -> list[dict[str, float | str | None]]:
    rows = []
    for model, batch in MODELS:
        exp = _experiment(model, per_worker_batch=batch, steps=COMM_STEPS, warmup_steps=5,
                          bucket_mb=[DEFAULT_BUCKET_MB, ONE_BUCKET_MB])  # fmt: skip
        for r in run_study(exp, store, tmp).rows:
            exposed = r["comm_exposed_s"]
            rows.append(
                {
                    "model": model,
                    "bucket_mb": r["bucket_mb"],
                    "grad_mb": r["grad_bytes"] / 2**20,
                    "step_s": r["step_time_s"],
                    "exposed_s": exposed,
                    "exposed_ci95_s": r["comm_exposed_ci95_s"],
                    "ddp_comm_s": r["ddp_logging_s"].get("backward_comm_time"),
                    "ring_s": r["ring_predicted_s"],
                    "overlap_s": r["overlap_predicted_s"],
                    "ring_error": r["ring_error"],
                    "overlap_error": r["overlap_error"],
                    "ring_basis": r["ring_basis"],
                    "overlap_basis": r["overlap_basis"],
                }
            )
    return rows


def main() -> None:
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        store = RunStore.open(f"{tmp}/bench.db")
        per_step = round_robin(
            {"plain torchrun DDP": lambda: plain(tmp), "dlperf scale": lambda: dlperf(store, tmp)},
            REPEATS,
        )
        bench = run_allreduce_study(store, [2], "4KB..64MB", "gloo", tmp, iters=20, warmup=3)
        comm = comm_check(store, tmp)
    ratios = [
        d / p for d, p in zip(per_step["dlperf scale"], per_step["plain torchrun DDP"], strict=True)
    ]
    rows = [
        [name, *(1e3 * v for v in spread(values).values())] for name, values in per_step.items()
    ]
    print(
        table(
            f"resnet20, 2 workers x batch {BATCH}, gloo, ms per step (min / median / max)",
            ["contender", "min", "median", "max"],
            rows,
        )
    )
    overhead = spread(ratios)["median"] - 1
    print(f"dlperf / plain, median: {overhead:+.1%} (goal: within 3%)\n")
    ring = bench["ring_model"]
    print(
        f"ring model (2 workers, 4KB..64MB): alpha {ring['alpha_s'] * 1e6:.0f} us, "
        f"B {ring['bandwidth_bytes_per_s'] / 1e9:.2f} GB/s, fit rms error {ring['rmse_pct']:.0f}%"
    )
    print(
        f"overlap cost (2 workers): {bench['overlap_cost'][2]:.2f} s of compute lost per s of "
        "all-reduce in flight; "
        + ", ".join(
            f"{r['bytes'] / 2**20:g} MiB: {r['compute_lost_s'] * 1e3:.2f} ms lost "
            f"beside {r['allreduce_s'] * 1e3:.2f} ms"
            for r in bench["overlap"]
        )
    )
    print(
        "all-reduce after a barrier / after a compute burst, slowest rank / last rank in "
        "(medians, ms): "
        + ", ".join(
            f"{r['bytes'] / 2**20:g} MiB: {r['median_s'] * 1e3:.2f} / "
            f"{r['after_compute_s'] * 1e3:.2f} / {r['after_compute_last_s'] * 1e3:.2f}"
            for r in bench["rows"]
            if r["bytes"] >= 2**20
        )
    )

    def pct(error: float | None) -> str:
        return f"{error:+.0%}" if error is not None else "-"

    print(
        table(
            "exposed communication vs the ring and bucket/overlap models (error = predicted / "
            "measured - 1), 2 workers, ms per step",
            ["model", "bucket MB", "grad MB", "step", "exposed", "± 95%", "DDP comm", "ring",
             "overlap", "ring err", "overlap err"],
            [
                [r["model"], r["bucket_mb"], r["grad_mb"],
                 *(1e3 * (r[k] or 0) for k in ("step_s", "exposed_s", "exposed_ci95_s",
                                              "ddp_comm_s", "ring_s", "overlap_s")),
                 pct(r["ring_error"]), pct(r["overlap_error"])]
                for r in comm
            ],
        )
    )  # fmt: skip
    save(
        "scale",
        {
            "seconds_per_step": per_step,
            "ratio_dlperf_over_plain": ratios,
            "median_overhead": overhead,
            "allreduce": bench,
            "models_vs_measured": comm,
            "settings": {
                "repeats": REPEATS,
                "steps": STEPS,
                "warmup": WARMUP,
                "batch": BATCH,
                "comm_steps": COMM_STEPS,
            },
        },
    )


if __name__ == "__main__":
    main()
