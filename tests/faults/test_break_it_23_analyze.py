"""The twenty-third break-it round, P1 (the user's own models), causes of `dlperf analyze`.

- C5: a forward under torch.profiler.record_function (and every nn.DataParallel, which marks
  its forward so) was warned "not counted (no handler for these operators):
  profiler._record_function_enter_new x1, profiler._record_function_exit x1": the profiler's
  markers do no arithmetic, and count as nothing (no FLOPs, no call).
- C6: `analyze --train` of a model using torch.inference_mode() in its forward was told "the
  model rejects input [1, 1, 8, 8]: ... Inference tensors cannot be saved for backward (check
  analyze.input ...)", an input fix that cannot work: the inference_mode block is named.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import dlperf
from dlperf.errors import UserError
from tests.conftest import CliResult
from tests.faults.test_break_it_22_models import _unwrapped, _write

# --- C5: the profiler's markers --------------------------------------------------------------


class Marked(nn.Module):
    """A head whose forward is marked for the profiler, twice (the old and the new spelling)."""

    def __init__(self) -> None:
        super().__init__()
        self.c = nn.Conv2d(1, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.profiler.record_function("body"):
            y = self.c(x).relu()
        with torch.autograd.profiler.record_function("head"):
            return self.fc(y.flatten(1))


class Plain(Marked):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.c(x).relu().flatten(1))


def _fcm_flops(model: nn.Module, train: bool) -> int:
    counter = FlopCounterMode(display=False)
    with counter:
        out = model(torch.zeros(2, 1, 8, 8))
        if train:
            out.sum().backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("train", [False, True], ids=["forward", "train"])
@pytest.mark.parametrize(
    "make",
    [Marked, lambda: nn.DataParallel(Plain())],
    ids=["record_function", "DataParallel"],
)
def test_profiler_markers_count_as_nothing_and_are_not_warned_of(
    make: Callable[[], nn.Module], train: bool
) -> None:
    model = make()
    counted = dlperf.analyze(model, (1, 8, 8), batch=2, train=train)
    # before: {"profiler._record_function_enter_new": 1, "profiler._record_function_exit": 1}
    assert counted.unsupported_ops == {}, counted.unsupported_ops
    plain = dlperf.analyze(Plain(), (1, 8, 8), batch=2, train=train)
    # FlopCounterMode's FLOPs are 2 x the products, and no call for a marker
    macs = counted.totals["macs"] + counted.totals.get("backward_macs", 0)
    assert 2 * macs == _fcm_flops(model, train)
    for key in ("macs", "flops", "calls", "bytes", "backward_flops", "backward_calls"):
        assert counted.totals.get(key) == plain.totals.get(key), key


RECORD_FUNCTION = """
import torch, torch.nn as nn
class N(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__(); self.fc = nn.Linear(in_channels*64, num_classes)
    def forward(self, x):
        with torch.profiler.record_function("head"):
            return self.fc(x.flatten(1))
def build(num_classes=10, in_channels=1): return N(num_classes, in_channels)
"""


def test_analyze_of_a_marked_forward_warns_of_nothing(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    path = _write(tmp_path, RECORD_FUNCTION)
    done = cli("analyze", f"{path}:build", "--input", "1,8,8", "--train", "--json")
    assert done.code == 0, done.err
    assert "not counted" not in done.err and "profiler" not in done.err, done.err


# --- C6: torch.inference_mode() in forward, counted for training ------------------------------

INFERENCE_MODE = """
import torch, torch.nn as nn
class N(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__(); self.c = nn.Conv2d(in_channels, 4, 3, padding=1)
        self.fc = nn.Linear(4*64, num_classes)
    def forward(self, x):
        with torch.inference_mode():
            y = self.c(x)
        return self.fc(y.flatten(1))
def build(num_classes=10, in_channels=1): return N(num_classes, in_channels)
"""


def _says_inference_mode(said: str, leave_out: str = "--train") -> None:
    """The line, with the fix `leave_out` (the command's flag; the API's own argument)."""
    flat = _unwrapped(said)
    assert "analyze.input" not in said and "rejects input" not in said, said  # before: both
    assert _unwrapped("torch.inference_mode()") in flat, said
    assert _unwrapped("torch.no_grad()") in flat and leave_out in said, said


def test_analyze_train_of_a_forward_in_inference_mode_names_it(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    path = _write(tmp_path, INFERENCE_MODE)
    done = cli("analyze", f"{path}:build", "--input", "1,8,8", "--train")
    assert done.code == 2, done.err
    assert "Traceback" not in done.err, done.err
    _says_inference_mode(done.err)


def test_the_api_train_of_a_forward_in_inference_mode_names_it(tmp_path: Path) -> None:
    path = _write(tmp_path, INFERENCE_MODE)
    with pytest.raises(UserError) as refused:
        dlperf.analyze(f"{path}:build", (1, 8, 8), train=True)
    _says_inference_mode(str(refused.value), "train=False")


IN_PLACE_PARAMETER = """
import torch, torch.nn as nn
class N(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__(); self.fc = nn.Linear(in_channels*64, num_classes)
    def forward(self, x):
        self.fc.weight.mul_(0.999)  # a decay of its own, with gradients on
        return self.fc(x.flatten(1))
def build(num_classes=10, in_channels=1): return N(num_classes, in_channels)
"""


def test_analyze_train_of_a_forward_changing_a_parameter_in_place_names_it(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    """The like of C6: another error of autograd's, not the input's."""
    path = _write(tmp_path, IN_PLACE_PARAMETER)
    done = cli("analyze", f"{path}:build", "--input", "1,8,8", "--train")
    assert done.code == 2, done.err
    assert "analyze.input" not in done.err and "rejects input" not in done.err, done.err
    assert _unwrapped("changes a trained parameter in place") in _unwrapped(done.err), done.err
    assert cli("analyze", f"{path}:build", "--input", "1,8,8").code == 0  # the forward alone


class InferenceBody(nn.Module):
    """Every kind of layer, the body run under torch.inference_mode()."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2)
        )
        self.head = nn.Sequential(nn.Linear(64, 10), nn.LayerNorm(10), nn.Softmax(-1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            y = self.body(x)
        return self.head(y.flatten(1))


class PlainBody(InferenceBody):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x).flatten(1))


def test_analyze_of_a_forward_in_inference_mode_counts_its_layers() -> None:
    """Found beside C6: in inference mode torch dispatches its composite operators whole
    (aten.conv2d, aten.linear), which no handler counts: 'not counted: aten.conv2d x1' and
    the convolution's MACs left out. They are counted as what they are made of."""
    counted = dlperf.analyze(InferenceBody(), (1, 8, 8), batch=2)
    assert counted.unsupported_ops == {}, counted.unsupported_ops
    plain = dlperf.analyze(PlainBody(), (1, 8, 8), batch=2)
    for key in ("macs", "flops"):
        assert counted.totals[key] == plain.totals[key], key
    assert [r["flops"] for r in counted.layers] == [r["flops"] for r in plain.layers]
