"""Break-it round 35, P1 (the user's own models), fixer F1b.

- C8: nn.FractionalMaxPool2d/3d, which subclass nn.Module rather than one of torch's pooling
  bases, were "other" rows: `--activations conv-pool-fc` left their outputs out (266 for the
  330 of the same network with MaxPool2d), and F.fractional_max_pool2d in a forward was not
  said uncounted as F.max_pool2d is. They are pooling rows now.
- C9: `scale --comm powersgd` of a model training a complex parameter hung (or a rank died in
  gloo's "collective mismatch" abort, the point's error only "Signal 6 (SIGABRT)"): PowerSGD
  sizes its low-rank all-reduces from a complex bucket as if real. fp16 and bf16 compression
  cast the bucket to a real dtype, dropping the gradients' imaginary parts without a word.
  The three are refused before anything is launched, naming the parameters; and a rank that
  aborts has the line it printed as it died (C++'s "what():") in its point's error.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dlperf.api import analyze
from dlperf.distributed.launch import error_lines
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_blank_augment_leftovers import POINT
from tests.faults.test_break_it_10_models import _exp as experiment
from tests.faults.test_store_faults import one_line


@pytest.mark.parametrize(
    "pool",
    [
        nn.MaxPool2d(2),
        nn.FractionalMaxPool2d(2, output_size=4),
        nn.FractionalMaxPool2d(2, output_ratio=0.5),
    ],
    ids=["max", "fractional-size", "fractional-ratio"],
)
def test_c8_fractional_max_pooling_is_a_pool_row(pool: nn.Module) -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), pool, nn.Flatten(), nn.Linear(64, 10))
    report = analyze(model, (3, 8, 8), activations="conv-pool-fc")
    row = report.to_dict()["layers"][1]
    assert (row["role"], row["activations"]) == ("pool", 64)
    assert report.totals["activations"] == 256 + 64 + 10


def test_c8_fractional_max_pool3d_is_a_pool_row() -> None:
    model = nn.Sequential(
        nn.Conv3d(1, 2, 3, padding=1),
        nn.FractionalMaxPool3d(2, output_size=2),
        nn.Flatten(),
        nn.Linear(16, 10),
    )
    report = analyze(model, (1, 4, 4, 4), activations="conv-pool-fc")
    assert report.to_dict()["layers"][1]["role"] == "pool"
    assert report.totals["activations"] == 128 + 16 + 10


class _Functional(nn.Module):
    """A user's block pooling with F.fractional_max_pool2d in its forward."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.fractional_max_pool2d(self.conv(x), 2, output_size=4)


def test_c8_a_functional_fractional_max_pool_is_said_uncounted() -> None:
    """As F.max_pool2d in a forward is: a layer call whose output no row counts, said."""
    model = nn.Sequential(_Functional(), nn.Flatten(), nn.Linear(64, 10))
    with pytest.warns(UserWarning, match=r"F\.fractional_max_pool2d x1"):
        analyze(model, (3, 8, 8), activations="conv-pool-fc")


# --- C9: compressing DDP hooks and complex gradients ----------------------------------------------

# The tester's cpx_only.py, with digits' one channel.
COMPLEX = """
import torch, torch.nn as nn
class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.c = nn.Conv2d(in_channels, 8, 3, padding=1)
        self.w = nn.Parameter(torch.randn(8, 8, dtype=torch.cfloat) * 0.1)
        self.fc = nn.Linear(8, num_classes)
    def forward(self, x):
        x = torch.relu(self.c(x)).mean((2, 3))
        return self.fc((x.to(torch.cfloat) @ self.w).abs())
"""


@pytest.mark.parametrize("comm", ["powersgd", "fp16", "allreduce,bf16"])
def test_c9_scale_refuses_compressing_complex_gradients_up_front(
    cli: Callable[..., CliResult], tmp_path: Path, store: RunStore, comm: str
) -> None:
    # before: powersgd hung (or failed "Signal 6 (SIGABRT)"); fp16 and bf16 trained on the
    # real parts of w's gradients
    (tmp_path / "cpx.py").write_text(COMPLEX)
    exp = experiment(tmp_path, f"{tmp_path / 'cpx.py'}:Net")
    result = cli("scale", "run", str(exp), *POINT, "--comm", comm)
    hook = comm.split(",")[-1]
    one_line(result, 2, f"--comm {hook}", "w (complex64)", "--comm allreduce")
    assert store.list_runs() == []


ABORT_LOG = """terminate called after throwing an instance of 'gloo::EnforceNotMet'
  what():  [enforce fail at pair.cc:464] 36 vs 8. Is there a distributed collective mismatch?
Failures:
  <NO_OTHER_FAILURES>
-----
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : -6 (pid: 29887)
  traceback : Signal 6 (SIGABRT) received by PID 29887
"""


def test_c9_a_rank_that_aborted_is_failed_with_its_reason(tmp_path: Path) -> None:
    # before: "worker rank 1 failed (exit code -6 (pid: 29887)): Signal 6 (SIGABRT) received
    # by PID 29887", gloo's reason left in torchrun.log
    log = tmp_path / "torchrun.log"
    log.write_text(ABORT_LOG)
    assert error_lines(tmp_path, log, 1) == (
        "worker rank 1 failed (exit code -6 (pid: 29887)): Signal 6 (SIGABRT) received by PID "
        "29887: [enforce fail at pair.cc:464] 36 vs 8. Is there a distributed collective "
        "mismatch?"
    )
    log.write_text(ABORT_LOG.replace("what():", "said:"))  # nothing said: the signal alone
    assert error_lines(tmp_path, log, 1).endswith("received by PID 29887")
