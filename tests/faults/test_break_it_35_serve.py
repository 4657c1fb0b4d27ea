"""Break-it round 35 (P4): what dlperf's workers import, ...

C1: a user's file named like a module (`random.py`, `typing.py`) in the working directory broke
every `sweep --jobs N` worker and every `scale` worker (`ImportError: cannot import name
'Random' from 'random' (.../proj/random.py)`), where `run` and `sweep --jobs 1` worked: the
workers start as `python -m ...` and `python -c ...`, which put the working directory first
on sys.path, and dlperf's own process (a console script) never has it there.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dlperf.procs import Supervisor


def test_a_child_imports_what_dlperf_imports_not_the_working_directorys_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every worker starts through the Supervisor (sweep's, torchrun and its workers,
    horovodrun's, TensorFlow's): `-c` and `-m` there read no module from the user's folder."""
    (tmp_path / "random.py").write_text("raise SystemExit('the user random.py was imported')\n")
    (tmp_path / "typing.py").write_text("raise SystemExit('the user typing.py was imported')\n")
    monkeypatch.chdir(tmp_path)
    log = tmp_path / "log"
    with Supervisor() as supervisor:
        supervisor.start([sys.executable, "-c", "import random; print(random.Random)"], log)
        assert supervisor.wait(timeout_s=120) == [0], log.read_text()
    assert log.read_text().strip() == "<class 'random.Random'>"
