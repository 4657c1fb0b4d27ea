"""Break-it round 32, P1 (the user's own models), cause C6.

Layers kept in a plain Python list, tuple or dict (`self.blocks = [nn.Linear(64, 32)]`) are not
registered by PyTorch: not in model.parameters(), so never in the optimizer, not moved by
.to(device), not in the checkpoint. analyze counted their MACs with 0 params and run trained
without them, with no word. run now refuses such a model in one line naming the attribute
and the container to use; analyze and predict count it and say so in one warning line.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from dlperf.models.registry import unregistered
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

PLIST = """
import torch.nn as nn
class M(nn.Module):
    def __init__(s, n=10):
        super().__init__(); s.blocks = [nn.Linear(64, 32), nn.ReLU()]; s.head = nn.Linear(32, n)
    def forward(s, x):
        x = x.flatten(1)
        for b in s.blocks: x = b(x)
        return s.head(x)
def build(num_classes=10): return M(num_classes)
"""

LEFT_OUT = "PyTorch does not register them: their 2,080 parameters are not trained, moved or saved"


@pytest.fixture
def plist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plist.py").write_text(PLIST)
    return tmp_path


def test_run_refuses_layers_in_a_plain_list(cli: Cli, plist: Path) -> None:
    # before: trained and finished (test accuracy 0.61) without the list's Linear(64, 32)
    (plist / "pl.toml").write_text(
        '[model]\nname = "plist.py:build"\n[data]\nname = "digits"\nnum_workers = 0\n'
        "[train]\nepochs = 1\n[run]\nthreads = 1\n"
    )
    result = cli("run", "pl.toml")
    assert (result.code, result.out) == (2, ""), (result.code, result.out, result.err)
    assert result.err.strip() == (
        f"error: model '{plist / 'plist.py'}:build' keeps layers in a plain Python list "
        f"(blocks): {LEFT_OUT} (hold them in nn.ModuleList)"
    ), result.err


def test_analyze_counts_layers_in_a_plain_list_with_a_warning(cli: Cli, plist: Path) -> None:
    # before: total params 330, MACs of the list's Linear in row (model), no warning
    result = cli("analyze", "plist.py:build", "--input", "1,8,8", "--json")
    assert result.code == 0, result.err
    assert " ".join(result.err.split()) == (  # the console wraps it at its width
        f"warning: the model keeps layers in a plain Python list (blocks): {LEFT_OUT} by a "
        "run, nor counted in params here (hold them in nn.ModuleList)"
    ), result.err
    predicted = cli("predict", "plist.py:build", "--input", "1,8,8", "--device", "K80")
    assert predicted.code == 0, predicted.err
    assert "warning: the model keeps layers in a plain Python list (blocks)" in predicted.err


class _Nested(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(2, 2), nn.Linear(2, 2)
        self.stages = [self.a, self.b]  # registered too: a convenience list
        self.sizes, self.names = [1, 2, 3], ("x", "y")
        self.register_buffer("table", torch.zeros(3))
        self.tables = [self.table, torch.ones(2)]  # tensors, not layers
        self.by_name = {"a": self.a}
        self.back = [self]  # the parent, kept outside the tree on purpose


class _Left(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = _Nested()
        self.inner.heads = {"cls": nn.Linear(3, 4)}  # 16 parameters
        self.groups = [[nn.Linear(1, 1)], [nn.ReLU()]]  # one level down: 2 parameters
        self.scales = (nn.Parameter(torch.ones(5)),)
        self.norms = [nn.BatchNorm1d(2)]  # 4 parameters, 5 buffer elements


def test_harmless_lists_and_torchs_own_modules_are_not_flagged() -> None:
    assert unregistered(_Nested()) == []
    lstm_and_attention = nn.Sequential(nn.LSTM(4, 4, 2), nn.MultiheadAttention(4, 2))
    assert unregistered(lstm_and_attention) == []
    assert unregistered(nn.Transformer(8, 2, 1, 1, 16, batch_first=True)) == []


def test_each_unregistered_attribute_is_named_with_what_it_leaves_out() -> None:
    found = {f.where: (f.kind, f.params, f.buffers, f.fix) for f in unregistered(_Left())}
    assert found == {
        "inner.heads": ("dict", 16, 0, "nn.ModuleDict"),
        "groups": ("list", 2, 0, "nn.ModuleList"),
        "scales": ("tuple", 5, 0, "nn.ParameterList"),
        "norms": ("list", 4, 5, "nn.ModuleList"),
    }


def test_export_by_name_refuses_layers_in_a_plain_list(cli: Cli, plist: Path) -> None:
    """export of a model file (random weights) built it with create_model, not the run's
    build, and exported the list's layers as constants no checkpoint holds: refused as a run
    refuses it."""
    result = cli("export", "plist.py:build", "--input", "1,8,8", "--out", "m.onnx")
    assert (result.code, result.out) == (2, ""), (result.code, result.out, result.err)
    assert result.err.strip() == (  # named as given, as export's other lines name it
        "error: model 'plist.py:build' keeps layers in a plain Python list "
        f"(blocks): {LEFT_OUT} (hold them in nn.ModuleList)"
    ), result.err
    assert list(plist.glob("*m.onnx*")) == []
