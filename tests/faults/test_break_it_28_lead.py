"""Break-it round 28, what the lead fixed beside the testers' causes (round 27's Left list).

- L1: `runs repair SRC sqlite:x.db` wrote a new store file named `sqlite:x.db`, where `--db`
  refuses that name as a URL missing its `//`.
- L2 (a P3 tester's cause 10): a stopped `run`'s hint left out `--db`, so the command it gave
  opened ./dlperf.db and said "no run N"; and `run --resume N` of a store that is not there
  made an empty store file.
- L3 (a P2 tester's cause B, its VOC case): an annotation naming `Square` among `square`s
  trained two classes, the stray one an AP row of nan, without a word.
- L4 (the P2 tester's cause A, its npz and MNIST cases): an npz or idx file this user may not
  read was told to be written again, or replaced with a whole copy.
- L5 (the P1 tester's cause 4): with --json, what a model file wrote past sys.stdout (an
  atexit handler's print, os.write(1, ...)) went before or after the one JSON document.
- L6 (the P2 tester's cause N, in `converge regress`): a prediction on a fractional step axis
  was rounded up to a whole step (0.85 epochs read 1), as fit/predict's were.
- L7 (the P4 tester's cause 11): `calibrate` with a HOME that cannot be written named
  neither the device file nor DLPERF_DEVICES.
- L8 (the P1 tester's cause 10): distill's `--teacher` of another class count gave no fix.
- L9 (review): ONNX Runtime's "EP Error ... Falling back" block, kept off stdout since round
  28, hid a CUDA session that fell back to the CPU.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult, write_distill_exp
from tests.faults.test_break_it_21_data import TRAIN_IMAGES, write_mnist
from tests.faults.test_break_it_21_detect import shapes, sub
from tests.faults.test_break_it_24_detect import finetune, refused_before_training, xml
from tests.faults.test_break_it_28_data import mode_bits_bind
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


@pytest.mark.parametrize(
    ("target", "shown"),
    [("sqlite:x.db", "'sqlite:x.db'"), ("postgresql:/u:pw@h/db", "'postgresql:/u:***@h/db'")],
)
def test_repair_refuses_a_target_that_is_a_url_missing_its_slashes(
    cli: Cli, store: RunStore, tmp_path: Path, target: str, shown: str
) -> None:
    result = cli("runs", "repair", target)
    assert result.code == 2, (result.out, result.err)
    assert result.err.count("\n") == 1 and "Traceback" not in result.err, result.err
    assert f"not the URL {shown}" in result.err and "pw" not in result.err, result.err
    assert "runs repair repaired.db" in result.err
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("dlperf.db")) == []
    # The way the line gives to mean a file of that very name works.
    done = cli("runs", "repair", "./sqlite:x.db")
    assert done.code == 0, (done.out, done.err)
    assert (tmp_path / "sqlite:x.db").is_file()


# --- L2: the stop hint names the store -------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "shown"),
    [("other store.db", "'other store.db'"), ("sqlite:///s.db", "sqlite:///s.db")],
)
def test_a_stopped_runs_hint_names_the_store_it_was_given(
    cli: Cli, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str, shown: str
) -> None:
    from dlperf.engine import train

    path = write_distill_exp(tmp_path)
    evaluate, calls = train.evaluate, []

    def signalled(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:  # the test set's, after the epoch's checkpoint
            os.kill(os.getpid(), signal.SIGINT)
        return evaluate(*args, **kw)

    monkeypatch.setattr(train, "evaluate", signalled)
    r = cli("--db", given, "run", str(path))
    assert r.code == 130, (r.code, r.err)
    hint = r.err.strip().splitlines()[-1]
    assert hint == (
        f"run 1 stopped; continue it from its last checkpoint: dlperf --db {shown} run --resume 1"
    )
    monkeypatch.setattr(train, "evaluate", evaluate)  # the command the hint gives goes on
    again = cli("--db", given, "run", "--resume", "1")
    assert again.code == 0, (again.out, again.err)


def test_resume_of_a_store_that_is_not_there_makes_no_file(
    cli: Cli, db: str, tmp_path: Path
) -> None:
    r = cli("--db", "missing.db", "run", "--resume", "3")
    assert r.code == 2 and r.err.count("\n") == 1, (r.out, r.err)
    assert not (tmp_path / "missing.db").exists()


# --- L3: VOC object names equal but for case --------------------------------------------------


def test_object_names_differing_only_in_case_are_refused(cli: Cli, tmp_path: Path) -> None:
    root = shapes(tmp_path)  # make-shapes' 4 images: train 000000-000002, val 000003
    sub(xml(root, "000001"), "<name>disc</name>", "<name>Disc</name>")
    out = tmp_path / "w.pt"
    one_line(
        finetune(cli, root, out),
        2,
        "error: object names differ only in case, 'Disc' (Annotations/000001.xml) and 'disc' "
        "(Annotations/000001.xml): they would be classes of their own, each with its own "
        "output and AP row (write each class's <name> in one spelling)",
    )
    refused_before_training(cli, out)


# --- L4: an npz or idx file that cannot be read ---------------------------------------------


@pytest.mark.parametrize("name", ["npz", "mnist"])
def test_a_data_file_this_user_may_not_read_is_said_so(cli: Cli, tmp_path: Path, name: str) -> None:
    if name == "npz":
        root = locked = tmp_path / "s.npz"
        np.savez(locked, images=np.zeros((4, 1, 8, 8), np.uint8), labels=np.arange(4) % 2)
    else:
        root, locked = tmp_path, write_mnist(tmp_path) / TRAIN_IMAGES
    locked.chmod(0)
    try:
        with mode_bits_bind():
            r = cli("data", "describe", name, "--set", f"data.root={root}", "--json")
    finally:
        locked.chmod(0o644)
    one_line(
        r,
        2,
        f"error: {locked}: cannot read the file (Permission denied) (chmod a+r {locked}, or run "
        "as a user who can read it)",
    )


# --- L5: --json's stdout holds the document alone ----------------------------------------------

WRITES_PAST_STDOUT = """
import atexit, os
import torch.nn as nn
atexit.register(lambda: print("ATEXIT RAN"))
def net(num_classes=10, in_channels=1):
    os.write(1, b"RAW WRITE\\n")
    return nn.Sequential(nn.Flatten(), nn.Linear(64 * in_channels, num_classes))
"""


@pytest.mark.faults  # a fresh process importing torch: over 7 s on a busy machine
def test_json_stdout_holds_the_document_alone(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(WRITES_PAST_STDOUT)
    args = ["analyze", "m.py:net", "--input", "1,8,8", "--json"]
    r = subprocess.run(
        [sys.executable, "-m", "dlperf", *args], cwd=tmp_path, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["model"], r.stdout
    assert "RAW WRITE" in r.stderr and "ATEXIT RAN" in r.stderr, r.stderr


# --- L6: regress on a fractional step axis ---------------------------------------------------


STEPS = range(10, 410, 10)


def test_regress_predicts_a_fractional_axis_as_it_is(cli: Cli, db: str, tmp_path: Path) -> None:
    """The same curves on steps k and k/100: the crossing scales by 100, and only the whole
    axis rounds it up (86 and 0.8536, not 86 and 1)."""
    steps: dict[str, float] = {}
    for axis, scale in (("w", 1), ("f", 100)):
        for d in (20, 32):
            b0, b1, b2 = math.exp(-4 - 0.01 * d), math.exp(0.005 * d), math.exp(-2 - 0.02 * d)
            rows = "".join(f"{k / scale!r},{1 / (b0 * k + b1) + b2!r}\n" for k in STEPS)
            (tmp_path / f"{axis}{d}.csv").write_text("step,loss\n" + rows)
        sources = [f"{axis}{d}.csv:depth={d}" for d in (20, 32)]
        r = cli("converge", "regress", *sources, "--features", "depth", "--x", "step", "--y",
                "loss", "--predict", "depth=44", "--target", "0.5", "--json")  # fmt: skip
        assert r.code == 0, (r.out, r.err)
        steps[axis] = json.loads(r.out)["prediction"]["predicted_step"]
    whole, fractional = steps["w"], steps["f"]
    assert isinstance(whole, int) and whole == math.ceil(fractional * 100 - 1e-6)
    assert not float(fractional).is_integer() and 0 < fractional < 1


# --- L7 (the P4 tester's cause 11): calibrate with a HOME that cannot be written ---------------


def test_calibrate_with_a_home_that_cannot_be_written_names_the_file_and_the_fix(
    cli: Cli, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: "cannot use .../home: Not a directory", naming neither the device file nor the
    way round it, exit 2."""
    blocked = tmp_path / "home"
    blocked.write_text("")
    monkeypatch.setenv("HOME", str(blocked))
    for variable in ("XDG_CONFIG_HOME", "DLPERF_DEVICES"):
        monkeypatch.delenv(variable, raising=False)
    one_line(
        cli("calibrate", "--name", "x"),
        2,
        f"cannot write the device file {blocked}/.config/dlperf/devices.toml",
        "set DLPERF_DEVICES=FILE",
    )


# --- L8 (the P1 tester's cause 10): a teacher of another class count ---------------------------


def test_a_teacher_of_other_classes_is_told_what_to_give(cli: Cli, db: str, tmp_path: Path) -> None:
    """Before: "teacher run 1 has 5 classes; digits has 10", and no fix."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (64, 1, 8, 8), dtype=np.uint8)
    np.savez(tmp_path / "five.npz", images=images, labels=np.arange(64) % 5)
    path = write_distill_exp(tmp_path)
    five = ("--set", "data.name=npz", "--set", f"data.root={tmp_path / 'five.npz'}")
    assert cli("run", str(path), *five).code == 0
    r = cli("distill", str(path), "--unlabeled", "digits:holdout=0.5", "--teacher", "1")
    one_line(
        r,
        2,
        "error: teacher run 1 has 5 classes; digits has 10 (give --teacher a run trained on "
        "digits (dlperf runs list), or leave --teacher out to train one)",
    )


# --- L9 (review): ONNX Runtime's CUDA fallback is said, not swallowed with its stdout block ----


def test_a_session_that_fell_back_to_the_cpu_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Round 28 kept ORT's "EP Error ... Falling back" block off stdout; where the fallback
    then served, the CPU's timings would have passed for the GPU's without a word."""
    import onnxruntime as ort

    from dlperf.deploy import runtime

    class FellBack:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            print("*************** EP Error ***************\nFalling back to CPU")

        def get_providers(self) -> list[str]:
            return ["CPUExecutionProvider"]

    monkeypatch.setattr(ort, "InferenceSession", FellBack)
    with pytest.warns(UserWarning, match="runs it on CPUExecutionProvider: its timings are"):
        runtime.session(tmp_path / "m.onnx")
    assert capsys.readouterr().out == ""
