"""`python -m dlperf.sweep.worker POINT.json RESULT.json STUDY_ID SINCE`: one point of a
parallel sweep (see dlperf.sweep.runner), started by dlperf's supervisor (dlperf.procs).

POINT.json is the point's resolved config; the run store is $DLPERF_DB. The point's result
(a `SweepPointResult`: its summary's figures, or how it failed) is written to RESULT.json,
atomically, for dlperf to read. A `UserError` met outside the point's run (the store refusing
the worker, too many connections; the store gone as its failure was being recorded) cannot
be stored here: RESULT.json then holds only that error's line (`{"error": ...}`), which
dlperf records as the point's failure, and the worker exits with the error's code. SIGTERM
(dlperf's supervisor stopping the sweep) stops the run as Ctrl-C does, as dlperf.stopping
describes: it ends "killed" in the store, and the worker exits 143.

The handlers are installed before the worker's heavy imports (the config, the store, the
runner: seconds), which `main` makes: a SIGTERM in them is raised once they are, as under
`dlperf run`, where it ended the worker by its default action and the point was stored
`failed`. One that lands before (the interpreter's own start-up) ends it by the signal, which
the sweep stores `killed` as well (dlperf.sweep.runner.stopped).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

from dlperf import stopping
from dlperf.errors import UserError, interrupted


def main(argv: list[str]) -> int:
    from dlperf.procs import restore_safepath

    restore_safepath()
    from dlperf.config import build_experiment
    from dlperf.paths import atomic_write
    from dlperf.progress import NullReporter
    from dlperf.store import RunStore
    from dlperf.sweep.runner import being_deleted, failure, run_point

    config, result, study_id, since = argv
    try:
        exp = build_experiment(json.loads(Path(config).read_text()), config)
        store = RunStore.open(os.environ.get("DLPERF_DB"))
        try:
            point = run_point(exp, store, int(study_id), int(since), NullReporter())
        except KeyboardInterrupt:
            # Stopped by `runs delete --force`: said to dlperf, which would otherwise record
            # the point killed in a run made anew for it. The study's directory may be gone
            # with the run (the study's last): then the stop is recorded as any other.
            with stopping.spared(), contextlib.suppress(OSError):
                if (deleting := being_deleted(store, exp, int(study_id), int(since))) is not None:
                    said = {"deleted": deleting[0], "deleter": deleting[1]}
                    atomic_write(Path(result), json.dumps(said))
            raise
    except UserError as e:
        if interrupted(e):  # a stop that surfaced as another error: the stop it is
            raise KeyboardInterrupt from e
        # Its one line, as `--jobs 1` stores and says it (the parent prints and stores it): it
        # was a 12-line traceback of this module, which dlperf stored as the point's error.
        line = failure(e)
        atomic_write(Path(result), json.dumps({"error": line}))
        return e.exit_code
    atomic_write(Path(result), json.dumps(point.to_dict()))
    return 0


if __name__ == "__main__":
    stopping.run(lambda: main(sys.argv[1:]), process=True)
