"""A model file's factory gets only the keywords it accepts, whatever it is: a function, a
class with its own __init__, one that inherits a user's __init__, or an nn.Module subclass
with no __init__ at all (which takes none). Every command builds models through
`create_model`; `dlperf analyze` is checked through the real entry point too."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from dlperf.errors import UserError
from dlperf.models import create_model
from tests.conftest import CliResult

torch.set_num_threads(1)

NETS = '''
import torch
from torch import nn


class Gram(nn.Module):
    """No __init__ of its own: nn.Module's takes no keywords."""

    def forward(self, x):
        flat = x.flatten(2)
        return flat @ flat.transpose(1, 2)


class Head(nn.Module):
    def __init__(self, num_classes=10, width=4):
        super().__init__()
        self.fc = nn.Linear(width, num_classes)

    def forward(self, x):
        return self.fc(x.flatten(1)[:, : self.fc.in_features])


class WideHead(Head):
    """Inherits Head's __init__: takes what Head takes."""


class Lazy(nn.LazyLinear):
    """Inherits LazyLinear's __init__, whose out_features has no default."""
'''


@pytest.fixture
def nets(tmp_path: Path) -> Path:
    path = tmp_path / "nets.py"
    path.write_text(NETS)
    return path


def test_a_module_class_without_init_takes_no_keywords(nets: Path) -> None:
    model = create_model(f"{nets}:Gram", num_classes=10, in_channels=3)
    assert type(model).__name__ == "Gram"
    assert model(torch.ones(2, 3, 4, 4)).shape == (2, 3, 3)


def test_an_inherited_user_init_gets_its_keywords(nets: Path) -> None:
    model = create_model(f"{nets}:WideHead", num_classes=7, in_channels=3, width=6)
    assert (model.fc.in_features, model.fc.out_features) == (6, 7)


def test_an_inherited_torch_init_says_what_is_missing(nets: Path) -> None:
    with pytest.raises(UserError, match=r"factory .*:Lazy failed: TypeError: .*out_features"):
        create_model(f"{nets}:Lazy", num_classes=10, in_channels=3)


def test_analyze_counts_a_module_class_without_init(
    cli: Callable[..., CliResult], nets: Path
) -> None:
    result = cli("analyze", f"{nets}:Gram", "--input", "3,4,4", "--json")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    # one batched product [3, 16] x [16, 3]: 3 * 3 * 16 MACs, nothing else counted
    assert doc["totals"]["macs"] == 144 and doc["totals"]["params"] == 0


def test_classes_for_a_module_class_without_init_is_one_line(
    cli: Callable[..., CliResult], nets: Path
) -> None:
    result = cli("analyze", f"{nets}:Gram", "--input", "3,4,4", "--classes", "5")
    assert result.code == 2
    assert result.err == (
        "error: analyze.classes 5: the factory Gram takes no num_classes (leave analyze.classes "
        "unset: the factory sizes its own head)\n"
    )
