"""Round 46's Left list: memory that ran out, said as such.

- Under `ulimit -v 3350000` (torch loads, resnet50's weights do not fit), `dlperf analyze
  resnet50` ended in a 30-line MemoryError traceback, exit 1: the CLI's out-of-memory line
  asked `dlperf.engine.checks` whether torch's RuntimeError was an allocation that failed, and
  importing that module (and the data modules under it) needed the memory that had run out.
  The question is now answered in `dlperf.errors`, importing nothing: one line, exit 1.
- A forward that ran out of memory in analyze's counting was blamed on the input: "the model
  rejects input [1, 1, 8, 8]: MemoryError:" with a hint to check analyze.input, exit 2. It now
  goes on as an out-of-memory error, here the model's own line that asked for 8 TiB, exit 1.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.conftest import CliResult

PROBE = """
import sys

import torch  # loaded, as by any command that ran out of memory inside torch

import dlperf.cli


class Full:
    def find_spec(self, name, path=None, target=None):
        raise MemoryError  # every import from here on, as when the address space is full


def app(standalone_mode):
    sys.meta_path.insert(0, Full())
    raise RuntimeError(
        "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
        "memory: you tried to allocate 589824 bytes. Error code 12 (Cannot allocate memory)"
    )


dlperf.cli.app = app
sys.argv = ["dlperf", "analyze"]
sys.exit(dlperf.cli.outcome())
"""

MODEL = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.fc = nn.Linear(64 * in_channels, num_classes)

    def forward(self, x):
        return torch.cat([x] * 2**40)  # a list of 8 TiB: MemoryError
"""


def test_the_out_of_memory_line_imports_nothing_where_memory_ran_out(tmp_path: Path) -> None:
    (tmp_path / "probe.py").write_text(PROBE)
    done = subprocess.run(
        [sys.executable, "probe.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("error: out of memory: [enforce fail"), done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr


def test_a_forward_out_of_memory_in_analyze_is_not_blamed_on_the_input(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    (tmp_path / "mem.py").write_text(MODEL)
    result = cli("analyze", "mem.py:Net", "--input", "1,8,8")
    assert result.code == 1, result.err
    assert "rejects input" not in result.err, result.err
    # round 65: the memory is named, at the model's line
    assert result.err.startswith("error: the model ran out of memory: MemoryError"), result.err
    assert "torch.cat([x] * 2**40)" in result.err  # the line that asked for it
