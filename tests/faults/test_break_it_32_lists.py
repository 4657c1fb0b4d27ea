"""Break-it round 32, P1 (the user's own models), cause C6.

Layers kept in a plain Python list, tuple or dict (`self.blocks = [nn.Linear(64, 32)]`) are not
registered by PyTorch: not in model.parameters(), so never in the optimizer, not moved by
.to(device), not in the checkpoint. analyze counted their MACs with 0 params and run trained
without them, with no word. run now refuses such a model in one line naming the attribute
and the container to use; analyze and predict count it and say so in one warning line.
"""

from __future__ import annotations

import types
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


@pytest.mark.faults  # analyze and predict through the CLI: 9-12 s
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


# Round 32, reviewer 3 F6: an averaged copy kept out of the state dict and optimizer on
# purpose, never called by the forward
EMA = """
import copy, torch.nn as nn
class M(nn.Module):
    def __init__(s, n=10):
        super().__init__()
        s.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, n))
        s._ema = [copy.deepcopy(s.net).requires_grad_(False)]
    def forward(s, x): return s.net(x)
def build(num_classes=10): return M(num_classes)
"""


class _Ema(nn.Module):
    def __init__(self, call: bool = False, fail: bool = False) -> None:
        super().__init__()
        self.net = nn.Linear(4, 2)
        self._ema = [nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))]
        self.call, self.fail = call, fail

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.call:  # a part of the list's layer alone is a call of it too
            x = self._ema[0][0](x)
        if self.fail:  # as on a GPU, where .to(device) left the list's layers on the CPU
            raise RuntimeError("Expected all tensors to be on the same device")
        return self.net(x)


def test_layers_kept_out_that_the_forward_never_calls_are_warned_of_not_refused() -> None:
    from dlperf.errors import UserError
    from dlperf.models.registry import refusing_unregistered

    model = _Ema()
    with refusing_unregistered(model, "model 'ema'") as kept_out:
        model(torch.ones(1, 4))
    assert kept_out == [
        "model 'ema' keeps layers in a plain Python list (_ema): PyTorch does not register "
        "them: their 30 parameters are not trained, moved or saved: its forward does not call "
        "them, so they are taken as kept out on purpose (if they are part of the model, hold "
        "them in nn.ModuleList)"
    ]
    assert [h for m in model._ema[0].modules() for h in m._forward_pre_hooks.values()] == []
    for called in (_Ema(call=True), _Ema(call=True, fail=True)):
        refused = pytest.raises(UserError, match=r"keeps layers in a plain Python list \(_ema\)")
        with refused, refusing_unregistered(called, "model 'ema'"):
            called(torch.ones(1, 4))
    failing = _Ema(fail=True)  # not called: its own error
    with pytest.raises(RuntimeError, match="same device"), refusing_unregistered(failing, "m"):
        failing(torch.ones(1, 4))


def test_run_trains_a_model_whose_ema_copy_is_in_a_plain_list(cli: Cli, tmp_path: Path) -> None:
    # before: refused (exit 2), the fix offered putting the copy into the optimizer
    (tmp_path / "ema.py").write_text(EMA)
    (tmp_path / "r.toml").write_text(
        f'[model]\nname = "{tmp_path / "ema.py"}:build"\n[data]\nname = "digits"\n'
        "num_workers = 0\n[train]\nepochs = 1\n[run]\nthreads = 1\n"
    )
    result = cli("run", str(tmp_path / "r.toml"))
    assert result.code == 0, result.err
    assert "keeps layers in a plain Python list (_ema)" in " ".join(result.err.split())
    assert "its forward does not call them" in " ".join(result.err.split())


class _Deeper(nn.Module):
    """Round 32, reviewer 3 F7: the same mistake two dict levels down, in a plain object and
    set past nn.Module's registration, each missed (one level down was the limit)."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = {"a": {"b": [nn.Linear(3, 2)]}}  # 8 parameters
        self.cfg = types.SimpleNamespace(proj=nn.Linear(2, 2), size=3)  # 6
        object.__setattr__(self, "proj", nn.Linear(1, 1))  # 2
        object.__setattr__(self, "owner", self)  # a back-link so, as docs/run.md advises
        self.vocab = {"x": [1, 2, (3, "y")]}


def test_layers_held_deeper_or_past_registration_are_found() -> None:
    found = {f.where: (f.kind, f.params, f.fix) for f in unregistered(_Deeper())}
    assert found == {
        "blocks": ("dict", 8, "nn.ModuleDict"),
        "cfg": ("object", 6, "nn.ModuleDict"),
        "proj": ("attribute", 2, "an attribute set by self.proj = ..., not object.__setattr__"),
    }


class _Mixed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(2, 2)
        self.stages = [self.a, nn.Linear(2, 2)]  # the second never called

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x)


def test_a_registered_layer_called_from_such_a_list_is_no_call_of_the_left_out_one() -> None:
    from dlperf.models.registry import refusing_unregistered

    model = _Mixed()
    with refusing_unregistered(model, "m") as kept_out:
        model(torch.ones(1, 2))
    assert len(kept_out) == 1
