"""Break-it round 51, fixer H4: a sweep worker stopped before it takes the stop signals.

T3 C5 (stored status): `kill <worker pid>` (SIGTERM) to one worker of `sweep --jobs 2` within
its first seconds stored the point `failed` ("point 1/3 failed: sweep worker killed by
SIGTERM", `run 1 failed` at the end), while the same signal a few seconds later stored it
`killed` ("stopped by SIGTERM (exit code 143)"), as docs/sweep.md says: the worker's module
imports (`dlperf.sweep`'s package, the store, the config: seconds) ran before
`stopping.run` installed its handlers, so the signal's default action ended it. Now the worker
takes the stop signals before its heavy imports (a signal in them is raised once they are, as
under `dlperf run`: exit 143), and the sweep stores a worker a stop signal ended before that
(in the interpreter's own start-up: SIGTERM, SIGINT, SIGHUP, SIGXCPU at their default action)
as `killed`, "sweep worker killed by SIGTERM", as one that caught it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from dlperf.config import Experiment
from dlperf.store import RunStore
from dlperf.sweep.runner import SweepRun, _Child, finished_runs


def _tiny(root: Path) -> Experiment:
    return Experiment.model_validate(
        {
            "model": {"name": "smallcnn"},
            "data": {"name": "digits", "limit": 64},
            "train": {"epochs": 1},
            "run": {"out_dir": str(root / "runs")},
        }
    )


# A worker a stop signal ends before any handler of dlperf's is installed: the signal's default
# action (Python's own SIGINT handler raises KeyboardInterrupt, which then ends it by SIGINT).
# SIGINT's default put back first: a shell's background job (a CI script's `make test &`)
# starts with SIGINT ignored, and the child went on and exited 0.
EARLY = (
    "import os, signal, sys; print('starting', file=sys.stderr, flush=True); "
    "signal.signal(int(sys.argv[1]), signal.default_int_handler if int(sys.argv[1]) == "
    "signal.SIGINT else signal.SIG_DFL); os.kill(os.getpid(), int(sys.argv[1]))"
)


@pytest.mark.parametrize("made", [True, False], ids=["run-left-running", "no-run-yet"])
@pytest.mark.parametrize(
    ("sig", "said"),
    [
        (signal.SIGTERM, "killed by SIGTERM"),
        (signal.SIGINT, "killed by SIGINT"),
        (signal.SIGHUP, "killed by SIGHUP"),
    ],
)
def test_a_worker_a_stop_signal_ended_in_its_start_up_is_stored_killed(
    tmp_path: Path, sig: signal.Signals, said: str, made: bool
) -> None:
    store = RunStore.open(str(tmp_path / "s.db"))
    study = store.create_study("sw", "sweep")
    exp = _tiny(tmp_path)
    if made:
        store.create_run("p", "run", exp.to_dict(), exp.config_hash(), None, study)
    directory = tmp_path / "p1"
    directory.mkdir()
    with (directory / "worker.log").open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-c", EARLY, str(int(sig))], stderr=log)
        proc.wait(timeout=120)
    assert proc.returncode == -sig
    sweep = cast(SweepRun, SimpleNamespace(store=store, study_id=study, since=0))
    result = SweepRun._collect(sweep, _Child(cast(Any, None), exp, proc, directory))
    # before: ("failed", "sweep worker killed by SIGTERM\nstarting"), a second later "killed"
    # (Python's own SIGINT handler adds the KeyboardInterrupt's traceback to the log's tail)
    assert result.status == "killed" and result.error is not None
    assert result.error.startswith(f"sweep worker {said}\nstarting")
    run = store.get_run(result.run_id)
    assert (run.status, run.error) == ("killed", result.error)
    # a killed point is not finished: the sweep run again (--resume) trains it again
    assert not finished_runs(store, study, True)


def test_a_worker_signalled_in_its_imports_stops_as_a_stopped_worker(tmp_path: Path) -> None:
    """The real worker (`python -m dlperf.sweep.worker`), SIGTERMed as soon as its import of
    dlperf.config has finished (`-X importtime` says so on stderr): its other imports follow,
    seconds of them before. Before: it died of the signal (-15); now it has the handlers by
    then, and exits 143 as a worker stopped later does, no result written."""
    point, result = tmp_path / "point.json", tmp_path / "result.json"
    point.write_text(json.dumps(_tiny(tmp_path).to_dict()))
    env = {**os.environ, "DLPERF_DB": str(tmp_path / "s.db"), "PYTHONSAFEPATH": "1"}
    command = [sys.executable, "-X", "importtime", "-m", "dlperf.sweep.worker"]
    proc = subprocess.Popen(
        [*command, str(point), str(result), "1", "0"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        env=env,
        cwd=tmp_path,
    )
    assert proc.stderr is not None
    sent = False
    for line in proc.stderr:  # drained to the end: the child never blocks on its stderr
        if not sent and line.rpartition(b"|")[2].strip() == b"dlperf.config":
            proc.send_signal(signal.SIGTERM)
            sent = True
    assert proc.wait(timeout=120) == 128 + signal.SIGTERM and sent
    assert not result.exists()


def test_the_worker_module_imports_nothing_heavy_before_its_handlers() -> None:
    """What `python -m dlperf.sweep.worker` imports before `stopping.run` (the package and the
    module): none of the seconds of imports that left SIGTERM at its default action."""
    code = (
        "import sys, dlperf.sweep.worker; "
        "print(sorted(m for m in ('pydantic', 'sqlalchemy', 'torch', 'dlperf.config', "
        "'dlperf.store', 'dlperf.sweep.runner') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]"
