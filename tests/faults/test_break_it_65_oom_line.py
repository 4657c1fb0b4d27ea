"""Break-it round 65, Y1 cause 2: an allocation refused inside the model's forward.

Before: `analyze` of a model whose forward makes a CPU tensor (so the count runs on real
tensors) and whose activations need more memory than there is ended in "the model raised
RuntimeError: [enforce fail at alloc_cpu.cpp:127] ... can't allocate memory" with frames of
dlperf's counting: the machine's memory blamed on the model. Now it is "the model ran out of
memory: ...", with the limit's hint, then the model's line alone, exit 1.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

MODEL = """\
import torch
from torch import nn


class Big(nn.Module):
    def __init__(self, num_classes=10, in_channels=3):
        super().__init__()
        self.c = nn.Conv2d(in_channels, 4096, 3, padding=1)
        self.h = nn.Linear(4096, num_classes)

    def forward(self, x):  # a CPU-made tensor: the count runs on real tensors
        return self.h(self.c(x).mean((2, 3))) + torch.zeros(1)


def big(num_classes=10, in_channels=3):
    return Big(num_classes, in_channels)
"""
LIMIT_KIB = 6_000_000  # torch loads (3.2 GB of address space); 49 GB of activations do not


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_KIB * 1024,) * 2)


def test_a_forward_out_of_memory_is_told_as_memory(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(MODEL)
    done = subprocess.run(
        [sys.executable, "-m", "dlperf", "analyze", "a.py:big", "--input", "3,224,224",
         "--batch", "64"],
        capture_output=True, text=True, timeout=300, preexec_fn=_capped, cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith("error: the model ran out of memory: RuntimeError: "), lines
    assert lines[0].endswith(f"(a memory limit, ulimit -v {LIMIT_KIB} may be too low)"), lines
    assert lines[1:] == [  # the model's line, none of dlperf's counting below it
        '  File "a.py", line 12, in forward',
        "    return self.h(self.c(x).mean((2, 3))) + torch.zeros(1)",
        "(the whole traceback: dlperf --debug ...)",
    ], lines
