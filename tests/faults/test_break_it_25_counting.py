"""The twenty-fifth break-it round (P1: the user's own models), the faults of analyze's builds,
counts and lines (fixer F):

- D. A factory that failed was called twice by analyze (built on the meta device, then again on
  real tensors whatever the error): its prints, and a download of pretrained weights, twice.
  Only an error the meta device explains is retried on real tensors now.
- A2. A forward using `torch.autocast(x.device.type, ...)` was refused on meta ("unsupported
  autocast device_type 'meta'") and the input blamed: it is counted on real CPU tensors, as
  other forwards the meta device cannot run.
- C. A forward that fails to read a file (np.load of a missing file) was blamed on the input,
  with the float32-tensor hint: an OSError is the model's, told naming the file.
- A1. A model's own `torch.autocast('cpu', bfloat16)` was ignored (counted on meta, where CPU
  autocast does not apply): activation bytes twice too high, silently. Its autocast regions
  are counted at their dtype now, on real CPU tensors, as a real CPU forward runs them.
- G. `analyze --classes 100` of a model whose output is [1, 8] said "100 classes": the output's
  width is said instead.
- I. A zero-width layer (model.kwargs.width=0) was counted silently (0 MACs, exit 0), torch's
  UserWarnings printed raw: it is refused in one line naming the layer.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

import dlperf
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

MODELS = """
import sys
import torch, torch.nn as nn


def boom(num_classes=10):
    print("FACTORY CALLED", file=sys.stderr)
    raise ValueError("bad thing")


class Reads(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.l = nn.Linear(in_channels * 64, num_classes)

    def forward(self, x):
        import numpy as np
        self.stats = np.load("stats.npy")
        return self.l(x.flatten(1))


def reads(num_classes=10, in_channels=1):
    return Reads(num_classes, in_channels)


class AC(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.c = nn.Conv2d(in_channels, 8, 3, padding=1)
        self.l = nn.Linear(8, num_classes)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.l(self.c(x).relu().mean((2, 3)))


class ACDev(AC):
    def forward(self, x):
        with torch.autocast(x.device.type, dtype=torch.bfloat16):
            return self.l(self.c(x).relu().mean((2, 3))).float()


def autocast(num_classes=10, in_channels=1):
    return AC(num_classes, in_channels)


def autocastdev(num_classes=10, in_channels=1):
    return ACDev(num_classes, in_channels)


def ident(num_classes=10, in_channels=1):
    return nn.Sequential(nn.Conv2d(in_channels, 8, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten())


def wide(num_classes=10, in_channels=1, width=8):
    return nn.Sequential(
        nn.Conv2d(in_channels, width, 3, padding=1), nn.ReLU(),
        nn.Conv2d(width, width, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(width, num_classes),
    )
"""


def _models(tmp_path: Path) -> str:
    (tmp_path / "m.py").write_text(MODELS)
    return "m.py"


def test_d_a_failing_factory_is_called_once(tmp_path: Path, cli: Cli) -> None:
    _models(tmp_path)
    result = cli("analyze", "m.py:boom", "--input", "1,8,8")
    assert result.code == 1, (result.out, result.err)
    assert "ValueError: bad thing" in result.err, result.err
    assert (result.out + result.err).count("FACTORY CALLED") == 1, result.err


def test_a2_autocast_on_the_inputs_device_is_counted_on_real_tensors(
    tmp_path: Path, cli: Cli
) -> None:
    _models(tmp_path)
    result = cli("analyze", "m.py:autocastdev", "--input", "1,8,8", "--json")
    assert result.code == 0, (result.out, result.err)
    assert "rejects input" not in result.err, result.err
    counted = json.loads(result.out)
    assert "real CPU tensors" in counted["conventions"]["tensors"], counted["conventions"]
    assert "autocast" in counted["conventions"]["tensors"], counted["conventions"]
    conv = next(row for row in counted["layers"] if row["name"] == "c")
    assert conv["activation_bytes"] == 8 * 8 * 8 * 2  # bf16, as the real forward makes it


def test_c_a_forward_that_cannot_read_a_file_is_not_the_inputs_fault(
    tmp_path: Path, cli: Cli
) -> None:
    _models(tmp_path)
    result = cli("analyze", "m.py:reads", "--input", "1,8,8")
    one_line(result, 2, "FileNotFoundError", "stats.npy", "relative path")
    assert "rejects input" not in result.err and "float32" not in result.err, result.err


class _Autocast(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c = nn.Conv2d(1, 8, 3, padding=1)
        self.l = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out: torch.Tensor = self.l(self.c(x).relu().mean((2, 3)))
            return out


def test_a1_a_models_cpu_autocast_is_counted_at_its_dtype(tmp_path: Path, cli: Cli) -> None:
    model = _Autocast()
    with torch.no_grad():
        real = model.c(torch.zeros(1, 1, 8, 8)).nbytes  # fp32 outside the region
        with torch.autocast("cpu", dtype=torch.bfloat16):
            real_in_region = model.c(torch.zeros(1, 1, 8, 8))
    assert real_in_region.dtype == torch.bfloat16 and real_in_region.nbytes == real // 2
    counted = dlperf.analyze(model, (1, 8, 8)).to_dict()
    conv = next(row for row in counted["layers"] if row["name"] == "c")
    assert conv["activation_bytes"] == real_in_region.nbytes, counted["layers"]
    assert "autocast" in counted["conventions"]["tensors"], counted["conventions"]
    # the CLI says so in one warning line, with the same count
    _models(tmp_path)
    result = cli("analyze", "m.py:autocast", "--input", "1,8,8", "--json")
    assert result.code == 0, result.err
    assert "autocast" in result.err and "warning" in result.err, result.err
    rows = json.loads(result.out)["layers"]
    assert next(r for r in rows if r["name"] == "c")["activation_bytes"] == real // 2


def test_g_classes_a_model_does_not_use_are_not_said(tmp_path: Path, cli: Cli) -> None:
    _models(tmp_path)
    result = cli("analyze", "m.py:ident", "--input", "1,8,8", "--classes", "100", "--json")
    assert result.code == 0, result.err
    counted = json.loads(result.out)
    assert counted["classes"] == 8, counted["classes_source"]
    assert "100" in counted["classes_source"], counted["classes_source"]
    assert "[batch, 8]" in result.err and "100 classes" in result.err, result.err
    title = cli("analyze", "m.py:ident", "--input", "1,8,8", "--classes", "100")
    assert "100 classes" not in title.out and "8 classes" in title.out, title.out


def test_i_a_zero_width_layer_is_refused_in_one_line(tmp_path: Path, cli: Cli) -> None:
    _models(tmp_path)
    result = cli("analyze", "m.py:wide", "--input", "1,8,8", "--set", "model.kwargs.width=0")
    one_line(result, 2, "layer 0 (Conv2d)", "[0, 1, 3, 3]", "model.kwargs")
    assert "UserWarning" not in result.err, result.err
