"""The twelfth break-it round (issue 41, part C), counting: a packed-sequence RNN that torch's
own code cannot run on the meta device.

C1. A 2-layer bidirectional LSTM, GRU or RNN over an image's rows, packed with
`pack_padded_sequence(..., enforce_sorted=False)` and unpacked with `pad_packed_sequence`,
trains under run, sweep and distill, but `analyze` and `predict` refused it: "the model's
forward reads tensor values (NotImplementedError: Cannot copy out of meta tensor; no data!)
... branch on shapes or settings, not on values", exit 2. The model reads no values: torch's
pad_packed_sequence does (`lengths[unsorted_indices.cpu()]`), which the meta device cannot.
predict said "analyze runs it on the meta device" too. A forward that fails on meta inside
torch's own code is now counted on real CPU tensors of random values (a small model's, with
a warning saying so); a larger one is one line naming torch's function, not the user's code,
and predict's lines name predict.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from dlperf.analytic import counting
from dlperf.analytic.counting import analyze_module
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

# The tester's model (/tmp/bk12/C/m/packed.py), with the same net packed sorted beside it: its
# lengths (8, 7, 6 at batch 3) are already in decreasing order, so enforce_sorted=True packs
# them as they are, and torch runs that on the meta device.
PACKED = """
import torch, torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=1, kind="LSTM", unsorted=True):
        super().__init__()
        self.r = getattr(nn, kind)(8 * in_channels, 16, batch_first=True, num_layers=2,
                                   bidirectional=True)
        self.fc = nn.Linear(32, num_classes)
        self.unsorted = unsorted

    def forward(self, x):
        B = x.shape[0]
        seq = x.permute(0, 2, 1, 3).reshape(B, x.shape[2], -1)
        lengths = torch.tensor([max(1, seq.shape[1] - (i % 3)) for i in range(B)])
        p = pack_padded_sequence(seq, lengths, batch_first=True, enforce_sorted=not self.unsorted)
        o, _ = self.r(p)
        o, _ = pad_packed_sequence(o, batch_first=True)
        return self.fc(o.mean(1))


def lstm(num_classes=10, in_channels=1): return Net(num_classes, in_channels, "LSTM")
def gru(num_classes=10, in_channels=1): return Net(num_classes, in_channels, "GRU")
def rnn(num_classes=10, in_channels=1): return Net(num_classes, in_channels, "RNN")
def sorted_lstm(num_classes=10, in_channels=1): return Net(num_classes, in_channels, "LSTM", False)
def sorted_gru(num_classes=10, in_channels=1): return Net(num_classes, in_channels, "GRU", False)
def sorted_rnn(num_classes=10, in_channels=1): return Net(num_classes, in_channels, "RNN", False)


class Branches(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.fc = nn.Linear(64 * in_channels, num_classes)

    def forward(self, x):
        if x.mean() > 0.0:
            return self.fc(x.flatten(1))
        return -self.fc(x.flatten(1))


def branches(num_classes=10, in_channels=1): return Branches(num_classes, in_channels)
"""

# 4 rows of 8 pixels (the tester's 8 rows, halved for time): sequences of 4, 3 and 2 steps
SHAPE = ["--input", "1,4,8", "--batch", "3"]
# Gates per cell: the weights of one direction of one layer are gates x 16 x (in + 16).
GATES = {"lstm": 4, "gru": 3, "rnn": 1}
# The arithmetic of both agrees. Not their activations, bytes and calls (the unsorted model
# gathers its batch into order and back, real work), nor the backward's FLOPs: torch's CPU
# kernel projects a packed LSTM's input for all steps in one matrix product where the meta
# device's path makes one per step, with a bias gradient each.
COUNTS = ("params", "trainable_params", "macs", "flops", "backward_macs")
# The LSTM's weight products: 4 + 3 + 2 = 9 steps in each direction of each layer, each step
# 4 gates x 16 x (input + 16); the head's 3 x 32 x 10.
LSTM_MACS = 9 * 2 * 4 * 16 * (8 + 16) + 9 * 2 * 4 * 16 * (32 + 16) + 3 * 32 * 10


@pytest.fixture
def packed(tmp_path: Path) -> Path:
    path = tmp_path / "packed.py"
    path.write_text(PACKED)
    return path


def _params(kind: str) -> int:
    g = GATES[kind]
    rnn = 2 * (g * 16 * (8 + 16) + 2 * g * 16) + 2 * (g * 16 * (32 + 16) + 2 * g * 16)
    return rnn + 32 * 10 + 10


def test_analyze_counts_an_lstm_packed_unsorted(cli: Cli, packed: Path) -> None:
    """Before: 'the model's forward reads tensor values (NotImplementedError: Cannot copy out
    of meta tensor; no data!) ... branch on shapes or settings, not on values', exit 2."""
    result = cli("analyze", f"{packed}:lstm", *SHAPE, "--train", "--json")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert doc["totals"]["params"] == _params("lstm")
    # torch's function, and the count on real tensors, are told in one warning
    (warning,) = [line for line in result.err.splitlines() if line.startswith("warning: ")]
    assert "real CPU tensors" in warning, result.err
    assert "torch's own pad_packed_sequence (torch.nn.utils.rnn)" in result.err
    assert "real CPU tensors" in doc["conventions"]["tensors"]
    # The same work packed sorted runs on the meta device: the counts agree.
    meta = cli("analyze", f"{packed}:sorted_lstm", *SHAPE, "--train", "--json")
    assert meta.code == 0, meta.err
    on_meta = json.loads(meta.out)
    assert "tensors" not in on_meta["conventions"] and "warning" not in meta.err
    assert {k: doc["totals"][k] for k in COUNTS} == {k: on_meta["totals"][k] for k in COUNTS}
    assert doc["totals"]["macs"] == LSTM_MACS


@pytest.mark.parametrize("kind", ["gru", "rnn"])
def test_analyze_counts_a_gru_and_an_rnn_packed_unsorted(cli: Cli, packed: Path, kind: str) -> None:
    result = cli("analyze", f"{packed}:{kind}", *SHAPE)
    assert result.code == 0, result.err
    assert f"{_params(kind):,}" in result.out  # the totals table
    assert "warning: counted on real CPU tensors" in result.err
    assert "Traceback" not in result.err


def test_predict_counts_an_rnn_packed_unsorted(cli: Cli, packed: Path) -> None:
    """Before: the same refusal as analyze's, saying 'analyze runs it on the meta device'."""
    result = cli("predict", f"{packed}:lstm", "--device", "K80", *SHAPE, "--json")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert doc["totals"]["time_s"] > 0
    assert doc["flops_over_peak"]["counted_macs_per_image"] == LSTM_MACS / 3
    assert "warning: counted on real CPU tensors" in result.err
    assert "pad_packed_sequence" in result.err


def test_a_model_too_large_for_real_tensors_is_one_line_naming_torchs_function(
    cli: Cli, packed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over the bytes counted on real tensors, the refusal names torch's function, blames
    no value the user's forward reads, and says which command counts on the meta device."""
    monkeypatch.setattr(counting, "REAL_TENSORS_MAX_BYTES", 1000)
    for command, device in (("analyze", []), ("predict", ["--device", "K80"])):
        result = cli(command, f"{packed}:lstm", *SHAPE, *device)
        one_line(result, 2, "torch's own pad_packed_sequence (torch.nn.utils.rnn)", command)
        assert "the model's forward reads" not in result.err
        assert "branch on shapes" not in result.err


def test_a_forward_that_reads_values_itself_is_still_told_so(cli: Cli, packed: Path) -> None:
    """The user's own `if x.mean() > 0` is not counted on real tensors: the count would hold
    for one input's values only. predict's line names predict (before: 'analyze runs it')."""
    counted = cli("analyze", f"{packed}:branches", "--input", "1,8,8")
    one_line(counted, 2, "the model's forward reads tensor values", "analyze runs it on the meta")
    predicted = cli("predict", f"{packed}:branches", "--input", "1,8,8", "--device", "K80")
    one_line(predicted, 2, "the model's forward reads tensor values", "predict runs it on the meta")
    assert "analyze" not in predicted.err


class _TiedLazyPacked(nn.Module):
    """Packed unsorted, a lazy layer (materialised by a forward that fails on meta too) and
    a head tied to the embedding: counted on real tensors, each parameter once."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 6, bias=False)
        self.rnn = nn.GRU(6, 4)
        self.lazy = nn.LazyLinear(4)
        self.head = nn.Linear(6, 4, bias=False)
        self.head.weight = nn.Parameter(self.embed.weight.t().contiguous())
        self.out = nn.Linear(4, 6, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lengths = torch.tensor([x.shape[0] - i for i in range(x.shape[1])])
        lengths = lengths.flip(0)  # increasing: torch sorts them, and unsorts after
        packed = nn.utils.rnn.pack_padded_sequence(self.embed(x), lengths, enforce_sorted=False)
        y, _ = nn.utils.rnn.pad_packed_sequence(self.rnn(packed)[0])
        return self.out(self.lazy(y))


def test_counting_on_real_tensors_keeps_tied_weights_and_lazy_layers_and_the_rng() -> None:
    with counting._weights_on_meta():
        model = _TiedLazyPacked()
    state = torch.random.get_rng_state()
    a = analyze_module(model, [3, 4], batch=3, train=True)
    assert torch.equal(torch.random.get_rng_state(), state)
    embed, gru, lazy, head = 6 * 4, 3 * 4 * (6 + 4) + 2 * 3 * 4, 4 * 4 + 4, 6 * 4
    # out's weight is embed's, counted once; head (its own, a transposed copy) never runs
    assert a.totals()["params"] == embed + gru + lazy
    assert [m.name for m in a.not_run] == ["head"]
    assert a.real_tensors is not None and "pad_packed_sequence" in a.real_tensors
    assert a.training_memory is not None
    assert a.training_memory["weights_bytes"] == 4 * (embed + gru + lazy + head)
