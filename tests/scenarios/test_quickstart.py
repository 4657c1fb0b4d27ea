"""The README's quick start runs as it is written.

The quick start is the README's fenced ```bash blocks between `<!-- quickstart -->` and
`<!-- /quickstart -->`. Each line runs for real as `dlperf ...` in `tmp_path`, with
the repository's `examples/` copied there and `DLPERF_DB` pointing at a file in `tmp_path`.
Two rewrites, documented here; nothing else is changed:

- `dlperf run EXP.toml ...` gets `--set train.epochs=1 --set data.limit=256 --set
  run.threads=1` appended (the quick start's runs train 10 epochs on digits' 1,294 training
  images; one epoch of 8 steps is enough to prove the command line works, and one thread does
  not wait on a busy machine's other core; every run gets the same three, so `runs compare 1
  2` still shows the keys the quick start changes);
- `export NAME=VALUE` sets NAME for the following commands, except that `DLPERF_DB` becomes a
  file of the same name in `tmp_path`, so no store outside `tmp_path` is ever touched.

The first command runs as `python -m dlperf` in a process of its own, kept so on purpose: the
scenarios' one plain command in a real process (a fresh interpreter's start-up and imports,
its exit code; tests/scenarios/test_course.py starts processes only for its lines with shell
syntax, which a change to the page could remove). The others run in this process through
the same entry point's `dlperf.cli.main()`, as tests/conftest.py's `cli` fixture does: each
process would import torch and torch._dynamo first, 6-8 CPU-s, and prove nothing the first
does not.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import run_cli

pytestmark = pytest.mark.scenario

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
TIMEOUT_S = 300  # per command: generous, the machine may be shared and busy (pytest's: 900 s)
QUICKSTART = re.compile(r"<!-- quickstart -->(.*?)<!-- /quickstart -->", re.S)
BASH_FENCE = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)
SMALL = ("--set", "train.epochs=1", "--set", "data.limit=256", "--set", "run.threads=1")


def quickstart_commands() -> list[str]:
    """Every command line of the README's quick-start blocks, continuation lines joined."""
    sections = QUICKSTART.findall(README.read_text(encoding="utf-8"))
    assert sections, "README.md has no <!-- quickstart --> ... <!-- /quickstart --> section"
    lines = []
    for section in sections:
        blocks = BASH_FENCE.findall(section)
        assert blocks, "the quick-start section has no ```bash block"
        for block in blocks:
            for line in block.replace("\\\n", " ").splitlines():
                if line.strip() and not line.strip().startswith("#"):
                    lines.append(line.strip())
    return lines


def test_quickstart_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DLPERF_DB", str(tmp_path / "dlperf.db"))
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("DLPERF_DEVICES", raising=False)
    commands = quickstart_commands()
    assert any(shlex.split(c, comments=True)[:2] == ["dlperf", "run"] for c in commands)
    first = True
    for line in commands:
        argv = shlex.split(line, comments=True)
        if argv[0] == "export":
            name, _, value = argv[1].partition("=")
            if name == "DLPERF_DB":
                value = str(tmp_path / Path(value).name)
            monkeypatch.setenv(name, value)
            continue
        assert argv[0] == "dlperf", f"the quick start should only run dlperf: {line}"
        args = argv[1:]
        if args[0] == "run" and "--resume" not in args:
            args += [*SMALL]
        if first:  # a real `python -m dlperf` (the module docstring says why this one)
            result = subprocess.run(
                [sys.executable, "-m", "dlperf", *args],
                cwd=tmp_path,
                env=os.environ.copy(),
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
            )
            code, out, err = result.returncode, result.stdout, result.stderr
            first = False
        else:
            torch.set_num_threads(1)  # as each test starts (tests/conftest.py's _one_torch_thread)
            ran = run_cli(args, capsys, monkeypatch)
            code, out, err = ran.code, ran.out, ran.err
        assert code == 0, f"{line}\nexit {code}\n{err}"
        if "--json" in args:
            doc = json.loads(out)
            assert doc["status"] == "finished", line
        if args[:2] == ["runs", "compare"]:
            # The runs the quick start names by ID are the ones it made.
            assert "train.lr" in out, out
