"""Break-it round of issue 41 on user model files: each test reproduces a case whose one line
did not say how to mend it."""

from __future__ import annotations

from pathlib import Path

import pytest
from torch import nn

from dlperf.errors import UserError
from dlperf.models import create_model

FACTORY = """
import torch.nn as nn

def deep(depth, num_classes=10):
    return nn.Sequential(*[nn.Identity() for _ in range(depth)], nn.Flatten(),
                         nn.Linear(64, num_classes))
"""


def test_a_factory_argument_without_a_default_says_where_to_give_it(tmp_path: Path) -> None:
    (tmp_path / "user.py").write_text(FACTORY)
    spec = f"{tmp_path / 'user.py'}:deep"
    with pytest.raises(UserError) as caught:
        create_model(spec, num_classes=10, in_channels=1)
    assert str(caught.value) == (
        f"factory {spec} failed: TypeError: deep() missing 1 required positional argument: "
        "'depth' (give the argument a default, or its value in [model] kwargs)"
    )
    model = create_model(spec, num_classes=10, in_channels=1, depth=2)  # [model] kwargs
    assert isinstance(model, nn.Sequential) and len(model) == 4
