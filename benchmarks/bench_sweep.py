"""Sweep overhead per point: `dlperf sweep` against a shell loop of `dlperf run --set` over the
same configs (smallcnn on the bundled digits, 10 epochs, four learning rates), after a warm-up
round, in interleaved repetitions; and the same in-process: `run_sweep` against
`run_experiment` per config.
Goal: a sweep point costs at most 5% more than a run of its config. Seconds per point =
wall time of the whole contender / points (a sweep's includes its ranking and figures).

Then what feature extraction saves per step against fine-tuning the same pretrained model
(resnet20 on 3x32x32, batch 64, the one training step of every run): forward, backward and
optimizer time of whole steps, interleaved, and their ratios."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from benchlib import save, spread, table
from dlperf.config import TrainConfig, load_experiment
from dlperf.engine.step import build_step
from dlperf.experiment.run import run_experiment
from dlperf.models import create_model
from dlperf.models.transfer import freeze_backbone, load_weights, set_train_mode
from dlperf.store import RunStore
from dlperf.sweep import load_sweep, run_sweep
from dlperf.timing import Timer, round_robin

REPEATS = 3
LRS = [0.1, 0.05, 0.02, 0.01]
BASE = """
[model]
name = "smallcnn"
[data]
name = "digits"
[train]
epochs = 10
batch_size = 32
[target]
accuracy = 0.9
[run]
warmup_steps = 5
checkpoint = false
"""
SWEEP = f'base = "base.toml"\n[grid]\n"train.lr" = {LRS}\n'
DLPERF = [sys.executable, "-m", "dlperf"]
STEPS, BATCH = 20, 64


def _dlperf(root: Path, *args: str) -> None:
    db = str(root / "bench.db")
    subprocess.run([*DLPERF, "--db", db, *args], cwd=root, check=True, capture_output=True)


def command_runs(root: Path) -> float:
    runs = [["run", "base.toml", "--set", f"train.lr={lr}"] for lr in LRS]
    return Timer().time(lambda: [_dlperf(root, *args) for args in runs]) / len(LRS)


def command_sweep(root: Path, jobs: int) -> float:
    args = ["sweep", "sweep.toml", "--new", "--jobs", str(jobs)]
    return Timer().time(lambda: _dlperf(root, *args)) / len(LRS)


def library_runs(root: Path, store: RunStore) -> float:
    exps = [load_experiment(root / "base.toml", [f"train.lr={lr}"]) for lr in LRS]
    return Timer().time(lambda: [run_experiment(exp, store) for exp in exps]) / len(LRS)


def library_sweep(root: Path, store: RunStore) -> float:
    sweep = load_sweep(root / "sweep.toml")
    return Timer().time(lambda: run_sweep(sweep, store, new=True)) / len(LRS)


def transfer_step(mode: str) -> float:
    """Seconds per training step of resnet20 started from another resnet20's weights."""
    torch.manual_seed(0)
    model = create_model("resnet20", num_classes=10)
    load_weights(model, create_model("resnet20", num_classes=100).state_dict(), "a resnet20")
    if mode == "feature-extract":
        freeze_backbone(model)
    set_train_mode(model)
    step = build_step(model, TrainConfig(lr=0.01), "fp32", torch.device("cpu"), STEPS)
    x, y = torch.randn(BATCH, 3, 32, 32), torch.randint(10, (BATCH,))
    step(x, y)  # warm-up: allocator and kernels
    return Timer().time(lambda: [step(x, y) for _ in range(STEPS)]) / STEPS


def overhead() -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "base.toml").write_text(BASE + f'out_dir = "{root / "runs"}"\n')
        (root / "sweep.toml").write_text(SWEEP)
        store = RunStore.open(str(root / "library.db"))
        contenders = {
            "dlperf run x4 (shell loop)": lambda: command_runs(root),
            "dlperf sweep": lambda: command_sweep(root, 1),
            "dlperf sweep --jobs 2": lambda: command_sweep(root, 2),
            "run_experiment x4 (in-process)": lambda: library_runs(root, store),
            "run_sweep (in-process)": lambda: library_sweep(root, store),
        }
        round_robin(contenders, 1)  # warm-up: caches, imports, the store's first writes
        results = round_robin(contenders, REPEATS)
    names = list(results)
    pairs = {
        "sweep / run loop (commands)": (names[1], names[0]),
        "sweep --jobs 2 / run loop (commands)": (names[2], names[0]),
        "run_sweep / run_experiment (in-process)": (names[4], names[3]),
    }
    ratios = {
        label: [a / b for a, b in zip(results[x], results[y], strict=True)]
        for label, (x, y) in pairs.items()
    }
    rows = [[name, *spread(v).values()] for name, v in results.items()]
    rows += [[label, *spread(v).values()] for label, v in ratios.items()]
    print(
        table(
            f"smallcnn on digits, 10 epochs, {len(LRS)} learning rates: seconds per point "
            "(min / median / max), then ratios",
            ["contender", "min", "median", "max"],
            rows,
        )
    )
    extra = spread(ratios["run_sweep / run_experiment (in-process)"])["median"] - 1
    print(f"median in-process overhead per point: {extra:+.1%} (goal: at most +5%)")
    return {
        "seconds_per_point": results,
        "ratios": ratios,
        "median_in_process_overhead": extra,
        "base": BASE,
        "learning_rates": LRS,
    }


def transfer() -> dict[str, object]:
    torch.set_num_threads(2)
    modes = ("finetune", "feature-extract")
    results = round_robin({m: lambda m=m: transfer_step(m) for m in modes}, 2 * REPEATS)
    ratio = [f / e for f, e in zip(results[modes[0]], results[modes[1]], strict=True)]
    rows = [[m, *(v * 1e3 for v in spread(results[m]).values())] for m in modes]
    rows.append(["finetune / feature-extract", *spread(ratio).values()])
    print(
        table(
            f"resnet20, 3x32x32, batch {BATCH}, {STEPS} steps: ms per step "
            "(min / median / max), then the ratio",
            ["mode", "min", "median", "max"],
            rows,
        )
    )
    return {"seconds_per_step": results, "finetune_over_feature_extract": ratio}


def main() -> None:
    save("sweep", {**overhead(), "transfer": transfer()})


if __name__ == "__main__":
    main()
