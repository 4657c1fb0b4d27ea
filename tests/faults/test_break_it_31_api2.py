"""Break-it round 31, fixer I: review R1's findings on fixer B's commits.

F4. `RunStore.create_run` stored a config key holding a tab, and `RunStore.set_tags` a tag
key holding U+200B: only `log_metrics` checked keys at the store (the API's store object,
docs/export.md's `RunStore.open`, went around dlperf.track's check).
F5. `dlperf.analyze(model)` left out the model's own hooks that are plain functions or
lambdas (a pre-hook flattening the layer's input: the model was refused as rejecting its
input), where it meant to leave out only the caller's.
R4 F1, F2 (of F5's fix): a caller's capturing hook written in the model's package was kept
again; a model's hook that is a callable object was left out, and the count's error blamed
the input, not the hook left out.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import dlperf
from dlperf.errors import UserError
from tests.conftest import fresh_store_url

# --- F4: the store's own check of config and tag keys -----------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store nobody opened: a SQLite file, or a PostgreSQL schema of this test's own."""
    yield from fresh_store_url(request.param, tmp_path, "fx31i")


def test_f4_the_store_refuses_such_config_and_tag_keys(backend: str) -> None:
    """The review's repro. Before: `{'train': {'lr\\t': 0.1}}` and the tag `t\\u200bag`
    were stored; now refused in the words dlperf.track uses, nothing written."""
    from dlperf.store import RunStore

    store = RunStore.open(backend)
    config = r"key config\['train'\]\['lr\\t'\] holds U\+0009, a control character"
    with pytest.raises(UserError, match=config):
        store.create_run("r", "run", {"train": {"lr\t": 0.1}})
    assert store.list_runs() == []
    with store.new_run("r", "run", {"train": {"lr": 0.1}}) as record:
        tag = r"tag key 't\\u200bag' holds U\+200B, a format character"
        with pytest.raises(UserError, match=tag):
            store.set_tags(record.id, {"ok": "x", "t\u200bag": "x"})
    assert store.get_run(record.id).tags == {}


def test_r4_f6_the_store_keeps_a_config_key_that_is_not_text(backend: str) -> None:
    """R4 F6: a key that is not a str (the store's JSON writes 1 as '1'). Before 71e1fcfa
    stored; then an AttributeError ('int' object has no attribute 'isprintable'); now stored
    again, its tables' keys still checked."""
    from dlperf.store import RunStore

    store = RunStore.open(backend)
    run_id = store.create_run("r", "run", {1: {"a": 1}, "b": {2: 3}})  # type: ignore[dict-item]
    assert store.get_run(run_id).config == {"1": {"a": 1}, "b": {"2": 3}}
    with pytest.raises(UserError, match=r"key config\[1\]\['a\\t'\] holds U\+0009"):
        store.create_run("r", "run", {1: {"a\t": 1}})  # type: ignore[dict-item]


# --- F5: the model's own hooks on analyze's copy ----------------------------------------------


def _flatten_in(module: nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor]:
    """The model's own input adapter: a plain function of the file that defines the model."""
    return (args[0].flatten(1),)


def _scaled(module: nn.Module, args: tuple[Any, ...], output: torch.Tensor, k: float) -> Any:
    return output * k


class _Adapted(nn.Module):
    """The review's model: its layer's pre-hook, a plain function, flattens the input; a
    partial of a function of this file and a lambda of its own __init__ scale the output."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 10)
        self.fc.register_forward_pre_hook(_flatten_in)
        self.fc.register_forward_hook(functools.partial(_scaled, k=2.0))
        self.register_forward_hook(lambda m, args, out: out.relu())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def test_f5_the_models_own_function_hooks_still_run() -> None:
    """Before: "the model rejects input [1, 1, 8, 8]: RuntimeError: a and b must have same
    reduction dim" (the pre-hook left out); at 2c905abb~1 and now: 640 MACs. The caller's
    own hook, written in the same file as the model's class, is still left out."""
    model = _Adapted().eval()
    calls: list[str] = []
    model.fc.register_forward_hook(lambda m, i, o: calls.append(str(o.sum().item())))
    assert model(torch.randn(2, 1, 8, 8)).shape == (2, 10)
    calls.clear()
    result = dlperf.analyze(model, (1, 8, 8))
    assert result.totals["macs"] == 64 * 10
    assert calls == []
    assert len(model.fc._forward_pre_hooks) == 1 and len(model.fc._forward_hooks) == 2


class _FlattenIn:
    """The model's own input adapter as a callable object (R4 F2)."""

    def __call__(self, module: nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor]:
        return (args[0].flatten(1),)


class _Called(nn.Module):
    """A model of the caller's own file (a script, a notebook) whose class names its hook."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 10)
        self.fc.register_forward_pre_hook(_FlattenIn())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


HOOKED = """
import torch
from torch import nn


def flatten_in(module, args):
    return (args[0].flatten(1),)


class FlattenIn:
    def __call__(self, module, args):
        return (args[0].flatten(1),)


def hook_up(model):  # a helper of the model's file: the class never names flatten_in
    model.fc.register_forward_pre_hook(flatten_in)
    return model


class Named(nn.Module):  # its code names its hook: a function, a callable object
    def __init__(self, obj=False):
        super().__init__()
        self.fc = nn.Linear(64, 10)
        self.fc.register_forward_pre_hook(FlattenIn() if obj else flatten_in)

    def forward(self, x):
        return self.fc(x)


class Helped(nn.Module):  # its hook attached by a helper: its code never names it
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 10)
        hook_up(self)

    def forward(self, x):
        return self.fc(x)
"""

# The review's layout: model, hook helpers and the script calling analyze in one package.
CAPTURE = """
def capture(store, name):
    def hook(module, args, out):
        store[name] = out
    return hook
"""


@pytest.fixture
def hooked(tmp_path: Path, monkeypatch: Any) -> Any:
    """A package of the model's file and a hook helper's, as a project keeps them."""
    package = tmp_path / "hooked31"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text(HOOKED)
    (package / "hooks.py").write_text(CAPTURE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import hooked31.hooks  # type: ignore[import-not-found]
    import hooked31.models  # type: ignore[import-not-found]

    yield hooked31
    for name in ("hooked31", "hooked31.models", "hooked31.hooks"):
        sys.modules.pop(name, None)


def test_f5_a_hook_the_models_class_names_runs(hooked: Any) -> None:
    """R1 F5, R4 F2: a hook the model's class names in its code (a function, a callable
    object of its file: before, the object was left out) runs on the copy: 640 MACs."""
    for obj in (False, True):
        assert dlperf.analyze(hooked.models.Named(obj), (1, 8, 8)).totals["macs"] == 640
    assert dlperf.analyze(_Called(), (1, 8, 8)).totals["macs"] == 640


def test_r4_a_capture_hook_of_the_models_package_is_left_out(hooked: Any) -> None:
    """R4 F1: the caller's capturing hook, written in the model's own package. Before:
    kept, the caller's captured activation replaced by the copy's meta tensor."""
    net = hooked.models.Named()
    acts: dict[str, torch.Tensor] = {}
    net.fc.register_forward_hook(hooked.hooks.capture(acts, "fc"))
    net(torch.zeros(1, 8, 8))
    captured = acts["fc"]
    assert dlperf.analyze(net, (1, 8, 8)).totals["macs"] == 640
    assert acts["fc"] is captured and captured.device.type == "cpu"


def test_r4_a_failed_count_names_the_hooks_left_out(hooked: Any) -> None:
    """R4 F2: a hook the model needs but its class does not name (attached by a helper; on
    torch's layer by the caller) is left out, and the count's error says so. Before: "the
    model rejects input ... check input_size", whose fix did not work."""
    left = r"left out as the caller's: fc's forward pre-hook flatten_in"
    with pytest.raises(UserError, match=left):
        dlperf.analyze(hooked.models.Helped(), (1, 8, 8))
    seq = nn.Sequential(nn.Linear(64, 10))
    seq[0].register_forward_pre_hook(_flatten_in)
    with pytest.raises(UserError, match=r"left out as the caller's: 0's forward pre-hook _flat"):
        dlperf.analyze(seq, (1, 8, 8))
