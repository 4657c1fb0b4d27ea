"""Break-it round 71, S1 cause 3: a model file doing `sys.stdout.close()` at import closed
dlperf's stderr, which dlperf lends it as its standard output while it imports: `run` stored the
run failed ("I/O operation on closed file."), exit 1, with only CPython's "lost sys.stderr" dump
said, `--json` and `--debug` alike. The file's close now closes only what it was lent."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.conftest import CliResult

SOURCE = """
import sys
print("imported")
sys.stdout.close()
import torch.nn as nn

def net(num_classes=10, in_channels=1):
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, num_classes))
"""


def test_a_model_file_closing_stdout_leaves_dlperfs_streams(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    (tmp_path / "m.py").write_text(SOURCE)
    shown = cli("analyze", f"{tmp_path / 'm.py'}:net", "--input", "1,8,8", "--json")
    assert shown.code == 0, shown.err
    assert json.loads(shown.out)["totals"]["params"] == 650
    assert "imported" in shown.err and "lost sys.stderr" not in shown.err
