"""The README's quick start runs as it is written.

The quick start is the README's fenced ```bash blocks between `<!-- quickstart -->` and
`<!-- /quickstart -->`. Each line is run for real as `python -m dlperf ...` in `tmp_path`, with
the repository's `examples/` copied there and `DLPERF_DB` pointing at a file in `tmp_path`.
Two rewrites, documented here; nothing else is changed:

- `dlperf run EXP.toml ...` gets `--set train.epochs=1 --set data.limit=256 --set
  run.threads=1` appended (the quick start's runs train 10 epochs on digits' 1,294 training
  images; one epoch of 8 steps is enough to prove the command line works, and one thread does
  not wait on a busy machine's other core; every run gets the same three, so `runs compare 1
  2` still shows the keys the quick start changes);
- `export NAME=VALUE` sets NAME for the following commands, except that `DLPERF_DB` becomes a
  file of the same name in `tmp_path`, so no store outside `tmp_path` is ever touched.
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


def test_quickstart_runs(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    env = {**os.environ, "DLPERF_DB": str(tmp_path / "dlperf.db"), "COLUMNS": "200"}
    env.pop("DLPERF_DEVICES", None)
    commands = quickstart_commands()
    assert any(shlex.split(c, comments=True)[:2] == ["dlperf", "run"] for c in commands)
    for line in commands:
        argv = shlex.split(line, comments=True)
        if argv[0] == "export":
            name, _, value = argv[1].partition("=")
            if name == "DLPERF_DB":
                value = str(tmp_path / Path(value).name)
            env[name] = value
            continue
        assert argv[0] == "dlperf", f"the quick start should only run dlperf: {line}"
        args = argv[1:]
        if args[0] == "run" and "--resume" not in args:
            args += [*SMALL]
        result = subprocess.run(
            [sys.executable, "-m", "dlperf", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        assert result.returncode == 0, f"{line}\nexit {result.returncode}\n{result.stderr}"
        if "--json" in args:
            doc = json.loads(result.stdout)
            assert doc["status"] == "finished", line
        if args[:2] == ["runs", "compare"]:
            # The runs the quick start names by ID are the ones it made.
            assert "train.lr" in result.stdout, result.stdout
