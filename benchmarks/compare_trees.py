"""No regression: this tree against an earlier commit on what a refactor must not slow down.

    python benchmarks/compare_trees.py --before 3918150 [--rounds 5]

The earlier commit is checked out in a temporary git worktree and both trees run as whole
`python -m dlperf` processes (their own `src` first on PYTHONPATH, one virtual environment),
alternately in each round, so drifts in a shared machine's load hit both alike. Measured:
  - engine: `dlperf run` images/s (resnet20, synthetic 32x32, batch 128, timing coarse);
  - ddp: `dlperf scale` 2 workers, weak, synthetic: the study's images/s at 2 workers;
  - startup: wall seconds of `dlperf --help` and `dlperf models`.
Each figure is printed as before / after (min / median / max) and as per-round ratios
after / before (above 1 = faster for images/s, slower for seconds). Not run by run_all.py:
it needs a commit to compare with."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from benchlib import save, spread, table
from dlperf.timing import Timer, round_robin

ROOT = Path(__file__).resolve().parent.parent
RUN = """
[model]
name = "resnet20"
[data]
name = "synthetic"
shape = [3, 32, 32]
size = 2048
val_fraction = 0.0
[train]
epochs = 2
batch_size = 128
lr = 0.05
[run]
timing = "coarse"
warmup_steps = 5
checkpoint = false
threads = 2
"""
SCALE = """
[scale]
workers = [2]
mode = "weak"
per_worker_batch = [32]
steps = 30
warmup_steps = 5
synthetic = true
comm_split = false
plots = false
"""


def dlperf(tree: Path, scratch: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "DLPERF_DB": str(scratch / "b.db")}
    return subprocess.run(
        [sys.executable, "-m", "dlperf", *argv], env=env, capture_output=True, text=True, check=True
    )


def contenders(tree: Path, scratch: Path) -> dict[str, Callable[[], float]]:
    run_toml, scale_toml = scratch / "run.toml", scratch / "scale.toml"
    run_toml.write_text(RUN)
    scale_toml.write_text(RUN + SCALE)

    def engine() -> float:
        return float(
            json.loads(dlperf(tree, scratch, "run", str(run_toml), "--json").stdout)["throughput"]
        )

    def ddp() -> float:
        study = json.loads(dlperf(tree, scratch, "scale", str(scale_toml), "--json").stdout)
        return float(study["rows"][-1]["throughput"])

    def wall(*argv: str) -> Callable[[], float]:
        return lambda: Timer().time(lambda: dlperf(tree, scratch, *argv))

    return {"engine images/s": engine, "ddp images/s": ddp,
            "--help s": wall("--help"), "models s": wall("models")}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, help="the earlier commit, e.g. HEAD~5")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        before = Path(tmp) / "before"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(before),
                        args.before], check=True, capture_output=True)  # fmt: skip
        try:
            trees = {"before": before, "after": ROOT}
            scratch = {name: Path(tmp) / name / "scratch" for name in trees}
            for path in scratch.values():
                path.mkdir(parents=True)
            both = {name: contenders(trees[name], scratch[name]) for name in trees}
            for measure in [*both["before"].values(), *both["after"].values()]:
                measure()  # warm the file cache and the stores
            results = round_robin(
                {f"{tree}: {name}": fn for tree, fns in both.items() for name, fn in fns.items()},
                args.rounds,
            )
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(before)], check=False)  # fmt: skip
    rows, ratios = [], {}
    for name in both["after"]:
        b, a = results[f"before: {name}"], results[f"after: {name}"]
        ratios[name] = [x / y for x, y in zip(a, b, strict=True)]
        rows.append(
            [name, *spread(b).values(), *spread(a).values(), *spread(ratios[name]).values()]
        )
    print(table(f"before {args.before} / after (this tree), {args.rounds} interleaved rounds",
                ["figure", "before min", "median", "max", "after min", "median", "max",
                 "after/before min", "median", "max"], rows))  # fmt: skip
    save("compare_trees", {"before": args.before, "results": results, "ratios": ratios})


if __name__ == "__main__":
    main()
