"""Start-up: each command that needs no tensors, as a whole `dlperf` process, against
`python -c pass` as the floor, interleaved. Goal: every one answers in under 1 s here, and
`dlperf runs list` in at most 0.25 s (issue 31: it took 0.37 s where `dlperf models` took
0.15 s); the table shows what the listing pays over `dlperf models` (SQLAlchemy, the store)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import save, spread, table
from dlperf.timing import Timer, round_robin

REPEATS = 7
GOAL_S = 1.0
LISTING_GOAL_S = 0.25
COMMANDS = {
    "python -c pass (floor)": [sys.executable, "-c", "pass"],
    "dlperf --help": ["--help"],
    "dlperf models": ["models"],
    "dlperf datasets": ["datasets"],
    "dlperf devices": ["devices"],
    "dlperf config keys": ["config", "keys"],
    "dlperf runs list": ["runs", "list"],
}


def wall_time(command: list[str], env: dict[str, str]) -> float:
    return Timer().time(
        lambda: subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    )


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        # An empty store of its own, so `runs list` reads a real (small) database.
        env = {**os.environ, "DLPERF_DB": str(Path(scratch) / "dlperf.db")}
        full = {
            name: argv if argv[0] == sys.executable else [sys.executable, "-m", "dlperf", *argv]
            for name, argv in COMMANDS.items()
        }
        for argv in full.values():  # warm the file cache once
            wall_time(argv, env)
        results = round_robin(
            {name: (lambda argv=argv: wall_time(argv, env)) for name, argv in full.items()},
            REPEATS,
        )
    rows = [[name, *spread(v).values()] for name, v in results.items()]
    print(table("whole-process wall time (s)", ["command", "min", "median", "max"], rows))
    slow = [n for n, v in results.items() if spread(v)["median"] >= GOAL_S]
    print(f"over {GOAL_S:g} s (median): {', '.join(slow) or 'none'}")
    listing = spread(results["dlperf runs list"])["median"]
    extra = listing - spread(results["dlperf models"])["median"]
    verdict = "met" if listing <= LISTING_GOAL_S else "NOT met"
    print(
        f"dlperf runs list: {listing:.3f} s median, {extra:+.3f} s over dlperf models; "
        f"goal {LISTING_GOAL_S:g} s {verdict}"
    )
    save(
        "startup",
        {"seconds": results, "goal_s": GOAL_S, "listing_goal_s": LISTING_GOAL_S},
    )


if __name__ == "__main__":
    main()
