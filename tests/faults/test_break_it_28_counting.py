"""Break-it round 28, counting on paper (P1 causes 1, 2, 7, 9, 11).

C1. The receptive field took every same-shape op it did not know for point-wise: a softmax,
    cumsum or sort along W, a flip, roll or reversed index of W left c2's field at 5x5, start
    2.5, as with no op. Ops that reorder or mix positions along H or W now end the field.
C2. An input or an intermediate past what a tensor can hold (2^63 bytes) was a 55-line
    traceback (the input), or blamed on the model (an intermediate); now one line, exit 2.
C7. A checkpoint's recompute in the backward added its outputs to the forward activations
    again (reentrant; non-reentrant with early stop off); its work is the backward's alone.
C9. `dlperf.analyze(..., dtype=torch.float16)` was refused naming analyze.precision.
C11. A torch warning raised during the count was attributed to dlperf's counting.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop
from torch.utils.flop_counter import FlopCounterMode

import dlperf
from dlperf.analytic.counting import ROOT, analyze_module
from dlperf.errors import UserError

# --- C1: ops that move or mix positions along H/W end the field --------------------------------

MOVES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "_softmax": lambda x: x.softmax(-1),
    "cumsum": lambda x: x.cumsum(3),
    "sort": lambda x: x.sort(3).values,
    "index": lambda x: x[..., torch.arange(x.shape[-1] - 1, -1, -1)],
    "flip": lambda x: torch.flip(x, (3,)),
    "roll": lambda x: torch.roll(x, 3, 3),
    "avg_pool3d": lambda x: nn.functional.avg_pool3d(x, 3, 1, 1),  # (C, H, W) a volume,
}
KEEPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "softmax over channels": lambda x: x.softmax(1),
    "flip of channels": lambda x: torch.flip(x, (1,)),
    "channel index": lambda x: x[:, torch.arange(x.shape[1] - 1, -1, -1)],
    "channel mean": lambda x: x * x.mean(1, keepdim=True),
    "batch norm and hardswish": lambda x: nn.functional.hardswish(
        nn.functional.batch_norm(x, torch.zeros(4, dtype=x.dtype), torch.ones(4, dtype=x.dtype))
    ),
}


class Between(nn.Module):
    """Two 3x3 convolutions (a 5x5 field at start 2.5) with `op` between them."""

    def __init__(self, op: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.c, self.c2, self.fc, self.op = (
            nn.Conv2d(1, 4, 3),
            nn.Conv2d(4, 4, 3),
            nn.Linear(4, 2),
            op,
        )

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.c2(self.op(self.c(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x).amax((2, 3)))


def reached(model: Between) -> tuple[list[int], list[int]]:
    """The input rows and columns whose gradient reaches c2's unit (0, 3), by autograd: the
    field of 5x5 at start 2.5 has it at rows 0-4, columns 3-7."""
    torch.manual_seed(0)
    x = torch.randn(1, 1, 16, 16, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(model.double().features(x)[0, :, 0, 3].sum(), x)
    rows, cols = (g[0, 0].abs() > 0).nonzero().T
    return sorted(set(rows.tolist())), sorted(set(cols.tolist()))


@pytest.mark.parametrize("name", MOVES)
def test_an_op_that_moves_positions_ends_the_field(name: str) -> None:
    model = Between(MOVES[name])
    assert reached(model) != (list(range(5)), list(range(3, 8)))  # not the 5x5 window
    rf = analyze_module(Between(MOVES[name]), [1, 16, 16]).receptive_field
    reason = f"not followed (it reorders or mixes positions along H or W): aten.{name} in {ROOT}"
    assert (rf["defined"], rf["reason"], rf["last_spatial_layer"]) == (False, reason, "c")
    assert (rf["size"], rf["start"]) == ([3, 3], [1.5, 1.5])  # c's map, where it ended


@pytest.mark.parametrize("name", KEEPS)
def test_an_op_along_channels_keeps_the_field(name: str) -> None:
    assert reached(Between(KEEPS[name])) == (list(range(5)), list(range(3, 8)))
    rf = analyze_module(Between(KEEPS[name]), [1, 16, 16]).receptive_field
    assert (rf["last_spatial_layer"], rf["size"], rf["start"]) == ("c2", [5, 5], [2.5, 2.5])
    assert rf["reason"].startswith("positions are mixed (global pooling")  # the amax, as before


def test_an_op_not_known_to_keep_positions_ends_the_field() -> None:
    rf = analyze_module(Between(lambda x: x.as_strided(x.shape, x.stride())), [1, 16, 16])
    assert rf.receptive_field["reason"].startswith("not followed (not known to keep each position")


# --- C2: a tensor past 2^63 bytes ---------------------------------------------------------------

BASE = """
import torch, torch.nn as nn
class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, 4, 3, padding=1)
        self.fc = nn.Linear(4, num_classes)
    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean((2, 3)))
def net(num_classes=10, in_channels=1):
    return Net(num_classes, in_channels)
"""


@pytest.mark.parametrize(
    ("command", "batch", "told"),
    [
        ("analyze", 10**9, "1000000000 x 1 x 65536 x 65536 = 4,294,967,296,000,000,000 elements"),
        ("predict", 10**9, "1000000000 x 1 x 65536 x 65536 = 4,294,967,296,000,000,000 elements"),
        # the input fits (2^62 bytes); the convolution's 4 channels do not
        ("analyze", 2**28, "an intermediate of 4,611,686,018,427,387,904 elements"),
    ],
)
def test_a_tensor_past_what_torch_holds_is_one_line(
    cli: Callable[..., Any], tmp_path: Path, command: str, batch: int, told: str
) -> None:
    (tmp_path / "base.py").write_text(BASE)
    extra = ["--device", "V100"] if command == "predict" else []
    got = cli(command, f"{tmp_path / 'base.py'}:net", "--input", "1,65536,65536",
              "--batch", str(batch), *extra)  # fmt: skip
    assert got.code == 2, got.err
    assert "Traceback" not in got.err and "rejects" not in got.err
    assert len(got.err.strip().splitlines()) == 1, got.err
    assert told in got.err and "more than a tensor can hold (2^63 bytes)" in got.err


# --- C7: gradient checkpointing -----------------------------------------------------------------


class Checkpointed(nn.Module):
    """c1, then a block of two convolutions (checkpointed or not), then a linear head."""

    def __init__(self, reentrant: bool | None) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(1, 8, 3, padding=1)
        self.block = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 1))
        self.fc = nn.Linear(8, 2)
        self.reentrant = reentrant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.c1(x)
        if self.reentrant is None:
            x = self.block(x)
        else:
            x = checkpoint(self.block, x, use_reentrant=self.reentrant)
        return self.fc(x.mean((2, 3)))


def counted(reentrant: bool | None) -> dict[str, Any]:
    analysis = analyze_module(Checkpointed(reentrant), [1, 8, 8], train=True)
    totals: dict[str, Any] = analysis.to_dict()["totals"]
    assert analysis.training_memory is not None
    return {**totals, "saved": analysis.training_memory["saved_activations_bytes"]}


def torch_flops(reentrant: bool | None) -> int:
    """FLOPs of a training step as torch's FlopCounterMode counts them on the CPU (products
    alone)."""
    model = Checkpointed(reentrant)
    with FlopCounterMode(display=False) as flops:
        model(torch.randn(1, 1, 8, 8)).sum().backward()
    return int(flops.get_total_flops())


@pytest.mark.parametrize("early_stop", [True, False])
@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpointing_counts_the_recompute_in_the_backward_alone(
    reentrant: bool, early_stop: bool
) -> None:
    """The recompute torch runs: a reentrant checkpoint reruns the whole block, a non-reentrant
    one stops once the tensors the backward needs are back (torch's early stop: before the
    1x1 convolution, whose output nothing saves), unless early stop is off."""
    plain = counted(None)
    with set_checkpoint_early_stop(early_stop):
        ckpt = counted(reentrant)
        recompute = torch_flops(reentrant) - torch_flops(None)
    assert recompute > 0
    for key in ("macs", "flops", "activations", "activation_bytes"):
        assert ckpt[key] == plain[key], key  # the forward is the plain network's
    assert 2 * (ckpt["backward_macs"] - plain["backward_macs"]) == recompute  # 2 FLOPs a MAC
    assert ckpt["saved"] < plain["saved"]  # the block's inner activations are not kept


def test_both_checkpoint_flavours_count_the_same_recompute() -> None:
    with set_checkpoint_early_stop(False):
        assert counted(False) == counted(True)


# --- C9: the API's dtype ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "precision"),
    [(torch.float16, "fp16"), (torch.bfloat16, "bf16"), (torch.float32, "fp32"), ("fp16", "fp16")],
)
def test_api_analyze_takes_a_torch_dtype(dtype: Any, precision: str) -> None:
    got = dlperf.analyze(nn.Conv2d(1, 2, 3), (1, 8, 8), dtype=dtype)
    assert got.to_dict()["precision"] == precision


@pytest.mark.parametrize("dtype", [torch.float64, "float16"])
def test_api_analyze_refuses_another_dtype_naming_dtype(dtype: Any) -> None:
    with pytest.raises(UserError, match=r"^dtype .*: use 'fp32', 'bf16' or 'fp16'") as e:
        dlperf.analyze(nn.Conv2d(1, 2, 3), (1, 8, 8), dtype=dtype)
    assert "analyze.precision" not in str(e.value)


# --- C11: torch's warnings, from the model's line -----------------------------------------------


@pytest.mark.faults  # a fresh dlperf process: 11 s when busy
def test_a_torch_warning_is_told_where_torch_was_called(tmp_path: Path, db: str) -> None:
    """torch warns of padding='same' once a process: a fresh one, as run shows it."""
    (tmp_path / "se.py").write_text(
        "import torch.nn as nn\n"
        "def net(num_classes=10, in_channels=1):\n"
        "    return nn.Sequential(nn.Conv2d(in_channels, 4, 4, padding='same'), nn.Flatten())\n"
    )
    got = subprocess.run(
        [sys.executable, "-m", "dlperf", "analyze", f"{tmp_path}/se.py:net", "--input", "1,8,8"],
        capture_output=True, text=True, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    (told,) = [line for line in got.stderr.splitlines() if "padding='same'" in line]
    assert "dlperf" not in told and "torch/nn/modules/conv.py:" in told, got.stderr
