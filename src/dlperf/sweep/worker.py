"""`python -m dlperf.sweep.worker POINT.json RESULT.json STUDY_ID SINCE`: one point of a
parallel sweep (see dlperf.sweep.runner), started by dlperf's supervisor (dlperf.procs).

POINT.json is the point's resolved config; the run store is $DLPERF_DB. The point's result
(a `SweepPointResult`: its summary's figures, or how it failed) is written to RESULT.json,
atomically, for dlperf to read. SIGTERM (dlperf's supervisor stopping the sweep) stops the
run as Ctrl-C does, as dlperf.stopping describes: it ends "killed" in the store, and the
worker exits 143.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from dlperf import stopping
from dlperf.config import build_experiment
from dlperf.paths import atomic_write
from dlperf.progress import NullReporter
from dlperf.store import RunStore
from dlperf.sweep.runner import run_point


def main(argv: list[str]) -> int:
    config, result, study_id, since = argv
    exp = build_experiment(json.loads(Path(config).read_text()), config)
    store = RunStore.open(os.environ.get("DLPERF_DB"))
    point = run_point(exp, store, int(study_id), int(since), NullReporter())
    atomic_write(Path(result), json.dumps(point.to_dict()))
    return 0


if __name__ == "__main__":
    stopping.run(lambda: main(sys.argv[1:]), process=True)
