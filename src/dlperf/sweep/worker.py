"""`python -m dlperf.sweep.worker POINT.json RESULT.json STUDY_ID SINCE`: one point of a
parallel sweep (see dlperf.sweep.runner), started by dlperf's supervisor (dlperf.procs).

POINT.json is the point's resolved config; the run store is $DLPERF_DB. The point's result
(a `SweepPointResult`: its summary's figures, or how it failed) is written to RESULT.json,
atomically, for dlperf to read. SIGTERM stops the run as Ctrl-C does, so it ends "killed"
in the store.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from dlperf.config import build_experiment
from dlperf.paths import atomic_write
from dlperf.progress import NullReporter
from dlperf.store import RunStore
from dlperf.sweep.runner import run_point


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _terminate)
    config, result, study_id, since = argv
    exp = build_experiment(json.loads(Path(config).read_text()), config)
    store = RunStore.open(os.environ.get("DLPERF_DB"))
    try:
        point = run_point(exp, store, int(study_id), int(since), NullReporter())
    except KeyboardInterrupt:  # the run is marked killed by now
        return 130
    atomic_write(Path(result), json.dumps(point.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
