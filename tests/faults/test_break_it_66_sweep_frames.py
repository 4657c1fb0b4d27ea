"""A sweep point whose model raises mid-training (round 65's Left list).

Before: `point 1/1 failed: KeyError: 'scael'`, the error's line alone, where `dlperf run`
says "the model raised KeyError: 'scael'" and shows the model file's frames: the user of a
sweep had no line of their file to look at. Now the sweep's log says the model raised it,
with the same frames (from a `--jobs N` worker too); the run stores the error's line as
`dlperf run` stores it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

# Raises in the second epoch's training: the checks (up front, then the point's own) run one
# forward with gradients each, an epoch of 64 images two
MODEL = """\
import torch
from torch import nn
class M(nn.Module):
    def __init__(self, num_classes=10, in_channels=1, **kw):
        super().__init__()
        self.f, self.l, self.n, self.cfg = nn.Flatten(), nn.LazyLinear(num_classes), 0, {}
    def forward(self, x):
        self.n += torch.is_grad_enabled()
        if self.n > 2:
            return self.cfg["scael"] * x
        return self.l(self.f(x))
"""
BASE = """\
[model]
name = "m.py:M"
[data]
name = "digits"
limit = 64
[train]
epochs = 2
batch_size = 32
[run]
threads = 1
warmup_steps = 1
checkpoint = false
"""


def _files(root: Path, seeds: int) -> None:
    (root / "m.py").write_text(MODEL)
    (root / "base.toml").write_text(BASE)
    sweep = f'name = "sw"\nbase = "base.toml"\n[grid]\n"run.seed" = {list(range(seeds))}\n'
    (root / "sw.toml").write_text(sweep)


def _told(result: CliResult, point: str, root: Path) -> None:
    assert result.code == 1, result.err
    lines = result.err.splitlines()
    head = f"{point} failed: the model raised KeyError: 'scael'"
    at = next(i for i, line in enumerate(lines) if line.endswith(head))
    assert lines[at + 1] == f'  File "{root / "m.py"}", line 10, in forward'
    assert lines[at + 2] == '    return self.cfg["scael"] * x'


def test_a_sweep_point_tells_the_models_error_with_its_frames(
    cli: Cli, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _files(tmp_path, 1)
    result = cli("sweep", "sw.toml")
    _told(result, "point 1/1", tmp_path)
    [run] = RunStore.open(db).list_runs()
    assert (run.status, run.error) == ("failed", "KeyError: 'scael'")  # as `dlperf run` stores


@pytest.mark.faults  # two real worker processes: several seconds under load
def test_a_sweep_worker_tells_the_models_error_with_its_frames(
    cli: Cli, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _files(tmp_path, 2)
    result = cli("sweep", "sw.toml", "--jobs", "2")
    _told(result, "point 1/2", tmp_path)
    _told(result, "point 2/2", tmp_path)
    runs = RunStore.open(db).list_runs()
    assert [(r.status, r.error) for r in runs] == [("failed", "KeyError: 'scael'")] * 2
