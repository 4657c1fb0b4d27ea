"""Start-up: each command that needs no tensors, as a whole `dlperf` process, against
`python -c pass` as the floor, interleaved. Goals: every one answers in under 1 s here;
`dlperf runs list` takes at most 1.3x `dlperf models`, both at most 0.25 s on an idle
machine (issue 42: 0.47 s against 0.23 s, SQLAlchemy's import). The listing reads a store
of its own holding more runs than it lists; beside it, the same listing forced the long way
(a `?mode=ro` URL opens the store through SQLAlchemy) shows what reading it with sqlite3
saves. The ratios are taken round by round (the two commands ran next to each other), so
they hold on a busy machine better than the seconds do, and the CPU seconds each process
used (user + system) are shown beside its wall time: other work slows the wall clock
far more than it adds to a process's own CPU time. A busy machine is said."""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import save, spread, table
from dlperf.contention import free_cores, judge, usable_cpus
from dlperf.timing import Timer, round_robin

REPEATS = 15
GOAL_S = 1.0
LISTING_GOAL_S = 0.25
RATIO_GOAL = 1.3
STORED_RUNS = 60  # more than the 50 a listing shows by default
LISTING, MODELS, LONG_WAY = "dlperf runs list", "dlperf models", "dlperf runs list (SQLAlchemy)"
COMMANDS = {
    "python -c pass (floor)": [sys.executable, "-c", "pass"],
    "dlperf --help": ["--help"],
    MODELS: ["models"],
    "dlperf datasets": ["datasets"],
    "dlperf devices": ["devices"],
    "dlperf config keys": ["config", "keys"],
    LISTING: ["runs", "list"],
    LONG_WAY: ["--db", "{db}?mode=ro", "runs", "list"],
}


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def wall_and_cpu(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """The wall time of one run of `command` and the CPU time its process used."""
    before = children_cpu_s()
    wall = Timer().time(
        lambda: subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    )
    return wall, children_cpu_s() - before


def fill(db: str) -> None:
    """STORED_RUNS finished runs, every third one tagged, as a user's store holds them."""
    from dlperf.store import RunStore

    store = RunStore.open(db)
    for i in range(STORED_RUNS):
        config = {"model": {"name": "smallcnn"}, "data": {"name": "digits"}, "train": {"lr": i}}
        run = store.create_run(f"run{i}", "run", config, None, {"host": "bench"})
        store.finish_run(run, "finished", {"test_accuracy": 0.9, "throughput": 1000.0 + i})
        if i % 3 == 0:
            store.set_tags(run, {"note": f"n{i}"})
    store.engine.dispose()


def ratios(results: dict[str, list[float]], of: str, to: str) -> list[float]:
    """`of` over `to`, round by round."""
    return [a / b for a, b in zip(results[of], results[to], strict=True)]


def main() -> None:
    idle = free_cores(0.5)
    with tempfile.TemporaryDirectory() as scratch:
        db = f"sqlite:///{Path(scratch) / 'dlperf.db'}"
        fill(db)
        env = {**os.environ, "DLPERF_DB": db}
        full = {
            name: argv
            if argv[0] == sys.executable
            else [sys.executable, "-m", "dlperf", *(a.format(db=db) for a in argv)]
            for name, argv in COMMANDS.items()
        }
        for argv in full.values():  # warm the file cache once
            wall_and_cpu(argv, env)
        measured = round_robin(
            {name: (lambda argv=argv: wall_and_cpu(argv, env)) for name, argv in full.items()},
            REPEATS,
        )
    results = {name: [wall for wall, _ in runs] for name, runs in measured.items()}
    cpu = {name: [used for _, used in runs] for name, runs in measured.items()}
    rows = [[name, *spread(v).values(), spread(cpu[name])["median"]] for name, v in results.items()]
    columns = ["command", "min", "median", "max", "CPU s (median)"]
    print(table("whole-process wall time (s)", columns, rows))
    slow = [n for n, v in results.items() if spread(v)["median"] >= GOAL_S]
    print(f"over {GOAL_S:g} s (median): {', '.join(slow) or 'none'}")
    paired = {
        f"{LISTING} / {MODELS}": ratios(results, LISTING, MODELS),
        f"{LONG_WAY} / {MODELS}": ratios(results, LONG_WAY, MODELS),
        f"{LISTING} / {LONG_WAY}": ratios(results, LISTING, LONG_WAY),
        f"{LISTING} / {MODELS}, CPU time": ratios(cpu, LISTING, MODELS),
    }
    rows = [[name, *spread(v).values()] for name, v in paired.items()]
    print(table("ratios, round by round", ["ratio", "min", "median", "max"], rows))
    ratio = statistics.median(paired[f"{LISTING} / {MODELS}"])
    seconds = max(spread(results[n])["median"] for n in (LISTING, MODELS))
    print(
        f"{LISTING}: {ratio:.2f}x {MODELS} (goal {RATIO_GOAL:g}x: "
        f"{'met' if ratio <= RATIO_GOAL else 'NOT met'}); the slower of the two "
        f"{seconds:.3f} s median (goal {LISTING_GOAL_S:g} s on an idle machine: "
        f"{'met' if seconds <= LISTING_GOAL_S else 'NOT met'})"
    )
    cores = len(usable_cpus())
    notes = [judge(None, results[n]).note for n in (LISTING, MODELS)]
    if idle < cores - 0.5:
        notes.append(f"busy machine: {idle:.1f} of {cores} cores were free before the run")
    warnings = [note for note in notes if note]
    for note in warnings:
        print(f"warning: {note}; re-measure the seconds on an idle machine")
    save(
        "startup",
        {
            "seconds": results,
            "cpu_seconds": cpu,
            "ratios": paired,
            "free_cores_before": idle,
            "warnings": warnings,
            "stored_runs": STORED_RUNS,
            "goal_s": GOAL_S,
            "listing_goal_s": LISTING_GOAL_S,
            "ratio_goal": RATIO_GOAL,
        },
    )


if __name__ == "__main__":
    main()
