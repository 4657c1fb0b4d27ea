"""Break-it round 47, fixer F2: export of a batch-fixed forward through the TorchScript
fallback, torch's C++ warnings during an export, torch's nested-tensor notice.

T1's C2: `export --dynamic-batch` of a forward that fixes the batch at the example's (a
pack_padded_sequence given a Python list of x.shape[0] lengths), where the dynamo exporter
fails and the TorchScript fallback writes the file, ended in "check failed: output shapes
differ at batch 8 (random input): PyTorch (8, 10), ONNX (2, 10)", exit 1, no cause or fix: that
exporter marks the input's batch symbolic and keeps the example's inside the graph, which
`check_batch_dynamic` (the input's dimension alone) could not see. An output that keeps the
example's batch at another batch is now the documented refusal of a batch made constant, exit 2.
T1's C3: the same export wrote three raw `[W1130 ... shape_type_inference.cpp:1994] Warning:
...` lines from torch's C++ logger on stderr (fd 2, past Python's warnings filter); they are
dropped now, as Kineto's lines are, and stderr holds dlperf's lines only.
T1's C4: an nn.TransformerEncoder (enable_nested_tensor, its default) called with a padding
mask in eval mode printed torch's raw two-line "The PyTorch API of nested tensors is in
prototype stage" UserWarning in run's evaluation, export's parity and infer bench's torch
eager. torch says it once a process; `create_model`, which every one of them builds through,
now has it said unheard before any model runs.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from dlperf.deploy import export
from dlperf.errors import UserError
from dlperf.models import create_model

PACKED = """
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.rnn = nn.LSTM(8 * in_channels, 4, batch_first=True)
        self.fc = nn.Linear(4, num_classes)

    def forward(self, x):
        b, c, h, w = x.shape
        s = x.permute(0, 2, 1, 3).reshape(b, h, c * w)
        lengths = [h - (i % 3) for i in range(b)]  # the batch, as a Python list's length
        p = pack_padded_sequence(s, lengths, batch_first=True, enforce_sorted=False)
        o, _ = pad_packed_sequence(self.rnn(p)[0], batch_first=True, total_length=h)
        return self.fc(o.mean(1))


def make(num_classes=10, in_channels=1):
    return Net(num_classes, in_channels)
"""

MASKED_ENCODER = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.proj = nn.Linear(8 * in_channels, 8)
        layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 1)  # enable_nested_tensor: True, the default
        self.fc = nn.Linear(8, num_classes)

    def forward(self, x):
        b, c, h, w = x.shape
        s = self.proj(x.permute(0, 2, 1, 3).reshape(b, h, c * w))
        mask = torch.zeros(b, h, dtype=torch.bool, device=x.device)
        mask[:, h // 2 :] = True  # padding at the end: torch's nested fast path in eval mode
        return self.fc(self.enc(s, src_key_padding_mask=mask)[:, 0])


def make(num_classes=10, in_channels=1):
    return Net(num_classes, in_channels)
"""


def _model_file(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return f"{path}:make"


def test_c2_c3_a_batch_kept_in_a_torchscript_graph_is_refused_and_cpp_lines_dropped(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    spec = _model_file(tmp_path, "packed.py", PACKED)
    source = export.from_registry(spec, (1, 8, 8), 10)
    out = tmp_path / "p.onnx"
    with pytest.raises(UserError) as refused:  # exit 2; was CheckFailed, exit 1
        export.export(source, out, dynamic_batch=True, threads=1)
    assert refused.value.message == (
        f"model '{spec}' cannot be exported with --dynamic-batch: its forward makes the batch "
        "a constant, so the exported graph answers a batch of 8 with 2 rows of scores (the "
        f"example input's batch): {export.BATCH_MADE_CONSTANT}"
    )
    assert refused.value.hint is not None and "export without --dynamic-batch" in refused.value.hint
    assert not out.exists()  # refused: nothing published
    # The fallback wrote the file (C3's lines come from it), and torch's C++ said nothing.
    err = capfd.readouterr().err
    assert "falling back to the TorchScript exporter" not in err  # said only once it stands
    assert "shape_type_inference" not in err and "[W" not in err, err


def test_c4_torchs_nested_tensor_notice_is_not_heard_from_a_built_model(tmp_path: Path) -> None:
    spec = _model_file(tmp_path, "masked.py", MASKED_ENCODER)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = create_model(spec, num_classes=10, in_channels=1).eval()
        with torch.no_grad():  # eval mode, no grad, a padding mask: torch's nested fast path
            scores = model(torch.zeros(4, 1, 8, 8))
    assert scores.shape == (4, 10)
    said = [str(w.message) for w in caught if "nested tensors" in str(w.message)]
    assert said == []
