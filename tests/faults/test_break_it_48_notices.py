"""Break-it round 48, T1 C1: torch's "LSTM with projections is not supported with oneDNN"
UserWarning (two raw lines naming torch's rnn.py) came out of `run`, `export` and `predict
--measure` of a model with an nn.LSTM(..., proj_size=k) on a CPU: about torch's internals,
nothing the model's code asked for. torch says it once a process; `create_model` spends it
unheard, as it has spent the nested-tensor notice since round 47. In a process of its own: a
notice spent by an earlier test would hide the defect.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

MODEL = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.rnn = nn.LSTM(8 * in_channels, 16, proj_size=4, batch_first=True)
        self.fc = nn.Linear(4, num_classes)

    def forward(self, x):
        b, c, h, w = x.shape
        o, _ = self.rnn(x.permute(0, 2, 1, 3).reshape(b, h, c * w))
        return self.fc(o[:, -1])
"""

BUILT_AND_RUN = """
import torch

from dlperf.models import create_model

model = create_model("proj.py:Net", 10, 1)
model(torch.zeros(2, 1, 8, 8)).sum().backward()  # as run's training step on a CPU
print("ran")
"""


def test_a_projected_lstms_onednn_notice_is_not_heard(tmp_path: Path) -> None:
    (tmp_path / "proj.py").write_text(MODEL)
    done = subprocess.run(
        [sys.executable, "-W", "default", "-c", BUILT_AND_RUN],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ran\n"
    assert "oneDNN" not in done.stderr, done.stderr  # before: torch's two-line UserWarning
