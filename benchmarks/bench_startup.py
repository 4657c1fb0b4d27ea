"""Start-up: each command that needs no tensors, as a whole `dlperf` process, against
`python -c pass` as the floor, interleaved. Goal: every one answers in under 1 s here."""

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
    save("startup", {"seconds": results, "goal_s": GOAL_S})


if __name__ == "__main__":
    main()
