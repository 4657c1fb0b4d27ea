"""Exporting a run that never finished says so: on stderr, in the JSON report and in the
exported model's metadata (how the run stands, the epoch its checkpoint holds). Before, a
SIGKILLed run's epoch-1 checkpoint shipped with exit 0 and no word."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.deploy import meta as meta_io
from dlperf.store import RunStore
from tests.conftest import TINY, CliResult
from tests.faults.test_store_faults import forked_dlperf
from tests.hooks import hook_env

# One real run and two exports.
pytestmark = pytest.mark.faults
DEADLINE_S = 300.0  # a guard against a run that never pauses, far past its minute here
PAUSE_STEP = 6  # epoch 2 of 4 steps: the epoch-1 checkpoint is written


def stopped_run(root: Path, sig: signal.Signals, model: str = "smallcnn") -> None:
    """A real `dlperf run` of `model` (3 epochs of 4 steps) paused in epoch 2, then sent
    `sig`: forked from this process (tests.faults.test_store_faults.forked_dlperf: torch
    comes imported, and a `python -m dlperf run` start was most of the test's time), its
    stderr to root/stderr.txt."""
    exp = root / "tiny.toml"
    text = TINY.format(epochs=3).replace('name = "smallcnn"', f'name = "{model}"')
    text = text.replace('name = "digits"', 'name = "digits"\nlimit = 128')
    exp.write_text(text + f'out_dir = "{root / "runs"}"\n')
    marker = root / "paused"
    pause = hook_env("pause_at_step", f"{PAUSE_STEP}:{marker}")
    proc = forked_dlperf(root, ["run", str(exp)], root / "stderr.txt", pause)
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not marker.exists():
            assert proc.is_alive(), (root / "stderr.txt").read_text()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert proc.pid is not None
        os.kill(proc.pid, sig)
        proc.join(timeout=DEADLINE_S)
    finally:
        proc.kill()
        proc.join()


def _exported(status: str, tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    """Run 1 exported says, on stderr, in its JSON report, its metadata and sidecar, that it
    is `status`, holding epoch 1 of 3."""
    out = tmp_path / f"{status}.onnx"
    result = cli("export", "1", "--out", str(out), "--json")
    assert result.code == 0, result.err
    said = f"run 1 did not finish (it is {status}): the model holds the weights of its last "
    said += "checkpoint, epoch 1 of 3"
    assert f"warning: {said}\n" in result.err
    report = json.loads(result.out)
    assert (report["run_status"], report["epoch"], report["warning"]) == (status, 1, said)
    meta = meta_io.load(out)
    assert (meta.run_id, meta.run_status, meta.epoch, meta.epochs) == (1, status, 1, 3)
    sidecar = json.loads(meta_io.sidecar(out).read_text())
    assert (sidecar["run_status"], sidecar["epoch"]) == (status, 1)


def test_exporting_a_run_that_did_not_finish_says_so(
    tmp_path: Path, db: str, cli: Callable[..., CliResult]
) -> None:
    """One real run, SIGKILLed in epoch 2: exported as `lost` (running, its process gone).
    Then marked `killed` as a SIGTERMed run's stop handler marks it, and exported again.
    (Before, a second real run was SIGTERMed for the `killed` export; that SIGTERM marks a
    run killed is proven by a real process in
    tests/faults/test_store_faults.py::test_sigterm_marks_every_run_killed.)"""
    stopped_run(tmp_path, signal.SIGKILL)
    _exported("lost", tmp_path, cli)
    store = RunStore.open(db)
    try:
        store.finish_run(1, "killed")
    finally:
        store.engine.dispose()
    _exported("killed", tmp_path, cli)
