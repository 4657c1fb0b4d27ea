"""`dlperf report` over 50 runs of 1,000 steps each: the library call (`build_report`) and the
command (`python -m dlperf report`, start-up included), in interleaved repetitions.
Goal: under 10 s on a 2-core machine.

The store is written through `RunStore.log_metrics` with the keys a real run stores: per step
train/loss and train/lr; per epoch (10 epochs of 100 steps) epoch/*, val/* and phase/*,
one batch per epoch as the engine writes them; a summary with phases and steps_per_epoch."""

from __future__ import annotations

import math
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import save, spread, table
from dlperf.config import Experiment
from dlperf.report.site import build_report
from dlperf.store import RunStore
from dlperf.timing import Timer, round_robin

RUNS, STEPS, EPOCHS, REPEATS = 50, 1000, 10, 3
PHASES = {"data": 0.002, "copy": 0.0005, "forward": 0.006, "backward": 0.011, "optimizer": 0.002}


def fill(store: RunStore) -> None:
    rng = random.Random(0)
    per_epoch = STEPS // EPOCHS
    system = {"host": "bench", "cores": 2, "device": "cpu", "gpus": [], "torch": "2.x"}
    for r in range(RUNS):
        exp = Experiment.model_validate({"train": {"epochs": EPOCHS, "lr": 0.01 * (1 + r % 5)}})
        run = store.create_run(f"smallcnn lr {exp.train.lr:g}", "run", exp.to_dict(),
                               exp.config_hash(), system)  # fmt: skip
        for epoch in range(1, EPOCHS + 1):
            rows = []
            for step in range((epoch - 1) * per_epoch + 1, epoch * per_epoch + 1):
                lr = exp.train.lr * 0.5 * (1 + math.cos(math.pi * step / STEPS))
                rows += [("train/loss", step, 2.3 * math.exp(-step / 300) + rng.random() * 0.1),
                         ("train/lr", step, lr)]  # fmt: skip
            acc = 1 - 0.9 * math.exp(-epoch / 3)
            rows += [
                ("epoch/train_loss", epoch, 2.3 * math.exp(-epoch / 3)),
                ("epoch/train_acc1", epoch, acc),
                ("epoch/lr", epoch, lr),
                ("epoch/throughput", epoch, 5000 + rng.random() * 100),
                ("epoch/time_s", epoch, 0.7),
                ("val/loss", epoch, 2.3 * math.exp(-epoch / 3)),
                ("val/acc1", epoch, acc - 0.02),
                ("val/acc5", epoch, min(1.0, acc + 0.05)),
            ]
            rows += [(f"phase/{p}_s", epoch, s * (1 + 0.05 * rng.random()))
                     for p, s in PHASES.items()]  # fmt: skip
            store.log_metrics(run, rows)
        summary = {"test_accuracy": acc - 0.02, "throughput": 5000.0, "train_time_s": 7.0,
                   "steps": STEPS, "steps_per_epoch": per_epoch, "epochs": EPOCHS,
                   "phases": PHASES}  # fmt: skip
        store.finish_run(run, "finished", summary=summary)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        url = f"sqlite:///{root / 'bench.db'}"
        store = RunStore.open(url)
        fill(store)
        command = [sys.executable, "-m", "dlperf", "--db", url, "report", "--last", str(RUNS)]

        def library() -> float:
            return Timer().time(lambda: build_report(store, root / "lib", last=RUNS))

        def cli() -> float:
            argv = [*command, "--out", str(root / "cli")]
            return Timer().time(lambda: subprocess.run(argv, check=True, capture_output=True))

        library()  # warm-up: imports, matplotlib's font cache
        times = round_robin({"library": library, "command": cli}, REPEATS)
        size = sum(p.stat().st_size for p in (root / "cli").glob("*.html"))
    rows = [[name, *spread(values).values()] for name, values in times.items()]
    print(
        table(
            f"dlperf report, {RUNS} runs of {STEPS} steps (s), {REPEATS} interleaved repetitions",
            ["contender", "min", "median", "max"],
            rows,
        )
    )
    print(f"site: {RUNS + 1} pages, {size / 2**20:.1f} MiB")
    save(
        "report",
        {"runs": RUNS, "steps": STEPS, "goal_s": 10.0, "site_mib": size / 2**20,
         "seconds": {name: spread(values) for name, values in times.items()}},
    )  # fmt: skip


if __name__ == "__main__":
    main()
