"""Break-it round 28, P1 (the user's own models), fixer fxI:

C12. An exception raised while a model file was imported (by the file or a module beside it)
was told without its file and line ("failed to import: KeyError: 'missing'"); the innermost
frame of the model's own code is now named: "failed to import (helper_rt.py, line 6): ...".
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

# The tester's m/base.py
BASE = """
import torch, torch.nn as nn


class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, 4, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4, num_classes)

    def forward(self, x):
        return self.fc(self.pool(torch.relu(self.conv(x))).flatten(1))


def net(num_classes=10, in_channels=1):
    return Net(num_classes, in_channels)
"""


@pytest.mark.parametrize(
    ("files", "said"),
    [
        (  # a neighbour raises at its line 6
            {
                "helper_rt.py": 'import torch\n\ndef f():\n    pass\n\nraise ValueError("boom")\n',
                "rt.py": "from base3 import Net\nimport helper_rt\n"
                "def net(num_classes=10, in_channels=1): return Net(num_classes, in_channels)\n",
            },
            "failed to import (helper_rt.py, line 6): ValueError: boom",
        ),
        (  # the file itself, at its line 4
            {"rt.py": 'import torch\n\nd = {}\nv = d["missing"]\n'},
            "failed to import (rt.py, line 4): KeyError: 'missing'",
        ),
        (  # the model's code called a library that raised: the model's line, not json's
            {"rt.py": "import json\n\njson.loads('{')\n"},
            "(rt.py, line 3)",
        ),
    ],
)
def test_an_import_error_names_the_models_file_and_line(
    cli: Cli, tmp_path: Path, files: dict[str, str], said: str
) -> None:
    (tmp_path / "base3.py").write_text(BASE)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    result = cli("analyze", f"{tmp_path / 'rt.py'}:net", "--input", "1,8,8")
    one_line(result, 2, said)
