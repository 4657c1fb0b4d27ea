"""Break-it round 47, fixer F1: an nn.LSTM counted on real CPU tensors.

T1 C1. A model counted on real CPU tensors (a packed sequence unpacked by `pad_packed_sequence`,
a tensor its forward makes without `device=`, a forward under its own CPU autocast) keeps the
meta count's MACs and FLOPs, docs/analyze.md says. An nn.LSTM's there ran as torch's oneDNN
kernel, `aten.mkldnn_rnn_layer` (its backward `aten.mkldnn_rnn_layer_backward`), which no
handler counts: the LSTM's row was 0 MACs and 0 FLOPs, beside an "unsupported" warning (packed
at batch 1, analyze's default: 160 MACs, the head's, for 12,448; bidirectional 320 for 24,896;
a `torch.zeros(10)` forward at batch 4 with --train 640 and 1,280 for 49,792 and the LSTM's
backward). GRU and RNN never take that kernel, nor a packed LSTM whose sequences differ in
length, which is why round 12's test (batch 3) passed. The count on real tensors now runs with
oneDNN off, so the LSTM runs as torch's own composite of matrix products and gates, the one the
meta device runs: its MACs and FLOPs, forward and backward, are the meta count's.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

import dlperf
from dlperf.analytic.counting import Analysis, analyze_module
from tests.conftest import CliResult

# The tester's model (/tmp/bk47/T1/c1/packed.py): 8 rows of 8 pixels, packed unsorted.
PACKED = """
import torch, torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.rnn = nn.LSTM(8 * in_channels, 16, batch_first=True)
        self.fc = nn.Linear(16, num_classes)
    def forward(self, x):
        b, c, h, w = x.shape
        s = x.permute(0, 2, 1, 3).reshape(b, h, c * w)
        lengths = [h - (i % 3) for i in range(b)]
        p = pack_padded_sequence(s, lengths, batch_first=True, enforce_sorted=False)
        o, _ = pad_packed_sequence(self.rnn(p)[0], batch_first=True, total_length=h)
        return self.fc(o.mean(1))
def make(num_classes=10, in_channels=1): return Net(num_classes, in_channels)
"""

# One step of one direction: 4 gates x 16 hidden x (8 inputs + 16 hidden) products.
STEP = 4 * 16 * (8 + 16)
# Its other FLOPs, per sequence element: both biases (2 x 4 x 16 adds), the gates' sum (4 x 16),
# and per hidden unit 3 sigmoids, 2 tanh, 3 multiplies and the cell's add (9 x 16).
STEP_OTHER = 2 * 4 * 16 + 4 * 16 + 9 * 16


class Rows(nn.Module):
    """An LSTM over an image's rows and a linear head on its last step; `made_on_cpu` adds a
    tensor made without device= (counted on real tensors), `autocast` runs the forward under
    its own autocast of the input's device type (the same)."""

    def __init__(self, bidirectional: bool = False, how: str = "meta") -> None:
        super().__init__()
        self.rnn = nn.LSTM(8, 16, batch_first=True, bidirectional=bidirectional)
        self.fc = nn.Linear(32 if bidirectional else 16, 10)
        self.how = how

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        rows = x.permute(0, 2, 1, 3).reshape(b, h, c * w)
        if self.how == "autocast":
            with torch.autocast(x.device.type, dtype=torch.bfloat16):
                scores: torch.Tensor = self.fc(self.rnn(rows)[0][:, -1])
            return scores.float()
        out: torch.Tensor = self.fc(self.rnn(rows)[0][:, -1])
        return out + torch.zeros(10) if self.how == "made_on_cpu" else out


def _count(model: nn.Module, batch: int, train: bool = False) -> Analysis:
    return analyze_module(model, [1, 8, 8], batch=batch, train=train)


def _lstm_row(counted: Analysis) -> dict[str, int]:
    (row,) = [layer for layer in counted.layers if layer.name == "rnn"]
    return {"macs": row.macs, "flops": row.flops}


def test_a_packed_lstm_at_batch_1_is_counted_as_the_cli_first_counts_it(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    """Before: 160 MACs (the head's), the LSTM's row 0, 'not counted (no handler for these
    operators): aten.mkldnn_rnn_layer x1'."""
    (tmp_path / "packed.py").write_text(PACKED)
    result = cli("analyze", f"{tmp_path / 'packed.py'}:make", "--input", "1,8,8", "--json")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert doc["unsupported_ops"] == {}, result.err
    assert "mkldnn" not in result.err and "not counted" not in result.err, result.err
    assert "real CPU tensors" in doc["conventions"]["tensors"]  # still counted on real tensors
    (rnn,) = [row for row in doc["layers"] if row["name"] == "rnn"]
    # one sequence of 8 steps
    assert (rnn["macs"], rnn["flops"]) == (8 * STEP, 2 * 8 * STEP + 8 * STEP_OTHER)
    assert doc["totals"]["macs"] == 8 * STEP + 16 * 10 == 12_448


def test_the_python_api_counts_a_packed_lstm_at_batch_1() -> None:
    """The same through dlperf.analyze (before: 160)."""
    namespace: dict[str, object] = {}
    exec(PACKED, namespace)
    model = namespace["Net"]()  # type: ignore[operator]
    with warnings.catch_warnings(record=True) as told:
        warnings.simplefilter("always")
        counted = dlperf.analyze(model, (1, 8, 8), batch=1)
    assert counted.totals["macs"] == 12_448
    assert not [w for w in told if "not counted" in str(w.message)], [str(w.message) for w in told]


@pytest.mark.parametrize("how", ["made_on_cpu", "autocast"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_an_lstm_on_real_tensors_counts_as_on_meta(how: str, bidirectional: bool) -> None:
    """A forward making a tensor without device= (before: 640 MACs at batch 4 for 49,792) or
    under its own CPU autocast (the same), one direction or two (before: the head's 320 at
    batch 1, for 24,896): the LSTM's row is the meta count's, worked out by hand."""
    real = _count(Rows(bidirectional, how), batch=4)
    assert real.real_tensors is not None and real.unsupported_ops == {}
    meta = _count(Rows(bidirectional), batch=4)
    assert meta.real_tensors is None
    directions = 2 if bidirectional else 1
    steps = 4 * 8 * directions  # batch 4, 8 rows, each direction
    by_hand = {"macs": steps * STEP, "flops": 2 * steps * STEP + steps * STEP_OTHER}
    assert _lstm_row(real) == _lstm_row(meta) == by_hand
    head = 4 * 16 * directions * 10
    assert real.totals()["macs"] == meta.totals()["macs"] == steps * STEP + head


def test_an_lstm_trained_on_real_tensors_counts_its_backward_as_on_meta() -> None:
    """--train (before: 640 MACs forward, 1,280 backward, the head's; 'aten.mkldnn_rnn_layer'
    and 'aten.mkldnn_rnn_layer_backward' not counted): the backward's products are the meta
    count's: per step the gradients of both weights (the input's needs none: the image needs
    no gradient), and of the hidden state for all steps but the first (its zeros need none).
    Not its other FLOPs: torch's CPU composite projects the input for all steps in one product,
    whose weight gradient is not summed step by step as the meta device's (docs/analyze.md)."""
    real = _count(Rows(how="made_on_cpu"), batch=4, train=True)
    meta = _count(Rows(), batch=4, train=True)
    assert real.real_tensors is not None and real.unsupported_ops == {}
    keys = ("macs", "backward_macs")
    assert {k: real.totals()[k] for k in keys} == {k: meta.totals()[k] for k in keys}
    (row,) = [layer for layer in real.layers if layer.name == "rnn"]
    (on_meta,) = [layer for layer in meta.layers if layer.name == "rnn"]
    assert (row.macs, row.flops) == (on_meta.macs, on_meta.flops)
    weights = 8 * 4 * 16 * 4 * (8 + 16)  # d-W_ih and d-W_hh, 8 steps of batch 4
    hidden = 7 * 4 * 16 * 4 * 16  # d-h through W_hh, steps 2 to 8
    assert row.backward_macs == on_meta.backward_macs == weights + hidden
    assert real.totals()["macs"] == 49_792
    assert torch.backends.mkldnn.enabled  # oneDNN, off for the count, is on again after it
