"""Break-it round 31, fixer B: what the Python API does to the caller's objects and keys.

C3 (P1). `dlperf.analyze(model)` ran the caller's own forward hooks (and global module hooks)
on its meta copy: an activation the caller captured was replaced by a meta tensor, a counter
moved, and a hook reading values was blamed on the model's forward or its input.
C2 (P3). A tracked run's `final` kept -0.0 where its stored metric is 0.0.
C4 (P3). Metric, phase and config keys holding a control or format character (tab, newline,
CR, U+200F, U+200B) were stored, then shown escaped and could not be named again.
R5 F2 (of be06f7d9). `dlperf.run` left the store it opened connected when the experiment was
refused (a bad --set, a missing file): only its run's end released it.
"""

from __future__ import annotations

import re
import tomllib
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.utils.prune
from torch import nn
from torch.nn.modules.module import register_module_forward_hook

import dlperf
from dlperf.errors import UserError
from tests.conftest import TINY, CliResult, fresh_store_url
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


# --- C2: -0.0 ---------------------------------------------------------------------------------


def test_c2_final_of_minus_zero_is_the_stored_zero(db: str) -> None:
    """Before: summary final {'m/d': -0.0} over metrics [(1, 0.0)]."""
    with dlperf.track("z", store=db) as run:
        run.log(1, **{"m/d": -0.0})
    store = dlperf.Store(db)
    final = store.run(run.id).summary["final"]["m/d"]
    ((_, stored),) = store.metrics(run.id, "m/d")
    assert str(final) == str(stored) == "0.0"


# --- C3: the caller's hooks on analyze's meta copy ------------------------------------------


def _net() -> torch.nn.Module:
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(256, 10))


def test_c3_analyze_runs_none_of_the_callers_hooks() -> None:
    """The report's script. Before: the captured activation became a meta tensor of the
    count's batch, every hook and the global one ran once per module, and a hook reading
    values failed the count as "the model's forward reads tensor values"."""
    model = _net().eval()
    features: dict[str, torch.Tensor] = {}
    calls: list[str] = []
    model[0].register_forward_hook(lambda m, i, o: features.__setitem__("conv", o.detach()))
    model[0].register_forward_pre_hook(lambda m, i: calls.append("pre"))
    model[3].register_forward_hook(lambda m, i, o: calls.append(str(o.mean().item())))
    model[3].register_full_backward_hook(lambda m, gi, go: calls.append("backward"))
    seen = register_module_forward_hook(lambda m, i, o: calls.append(type(m).__name__))
    try:
        model(torch.randn(4, 1, 8, 8))
        captured, calls[:] = features["conv"], []
        result = dlperf.analyze(model, (1, 8, 8), batch=2, train=True)
        assert result.totals["params"] == 4 * 9 + 4 + 256 * 10 + 10
        assert features["conv"] is captured and captured.device.type == "cpu"
        assert calls == []
        model[0](torch.randn(1, 1, 8, 8))  # the caller's hooks, the global one, are still there
        assert calls == ["pre", "Conv2d"]
    finally:
        seen.remove()


class _Scaled(nn.Module):
    """A model whose own forward pre-hook (a method of its own) gives forward its second
    argument, and whose weight torch's spectral_norm computes in a hook of torch's."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.utils.spectral_norm(nn.Linear(8, 4))
        self.register_forward_pre_hook(self._scale)

    def _scale(self, module: nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[Any, ...]:
        return (args[0], 2.0)

    def forward(self, x: torch.Tensor, scale: float) -> torch.Tensor:
        return self.fc(x) * scale


def test_c3_torchs_hooks_and_the_models_own_still_run() -> None:
    """spectral_norm's pre-hook makes the weight the count multiplies by (its power
    iteration counted with it), and a model's own method hook is part of its forward: both
    run on the copy."""
    model = _Scaled().eval()
    result = dlperf.analyze(model, (8,), batch=2)
    assert result.totals["params"] == 8 * 4 + 4  # weight_orig, bias
    assert result.totals["macs"] > 2 * 8 * 4
    assert model.fc.weight.device.type == "cpu"


@pytest.mark.parametrize("norm", ["weight_norm", "prune"])
def test_c3_modules_torchs_hooks_make_weights_of_are_counted(norm: str) -> None:
    """weight_norm's and pruning's hooks keep the weight they compute as a plain attribute,
    no graph leaf. Before: deepcopy refused it, a RuntimeError from analyze."""
    layer = nn.Linear(8, 4)
    if norm == "prune":
        torch.nn.utils.prune.l1_unstructured(layer, "weight", 0.5)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # weight_norm is deprecated
            layer = torch.nn.utils.weight_norm(layer)
    result = dlperf.analyze(layer, (8,), batch=2)
    assert result.totals["macs"] >= 2 * 8 * 4
    assert layer.weight.device.type == "cpu" and layer.weight.grad_fn is not None


# --- C4: keys holding control or format characters --------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store nobody opened: a SQLite file, or a PostgreSQL schema of this test's own."""
    yield from fresh_store_url(request.param, tmp_path, "fx31b")


# The report's keys, and the other category-C characters: DEL, ESC, U+202E, U+200F.
BAD = {
    "\t": "U+0009, a control",
    "\n": "U+000A, a control",
    "\r": "U+000D, a control",
    "\x7f": "U+007F, a control",
    "\x1b": "U+001B, a control",
    "\u200b": "U+200B, a format",
    "\u200f": "U+200F, a format",
    "\u202e": "U+202E, a format",
}


def test_c4_track_refuses_such_keys_before_storing_them(backend: str) -> None:
    """A metric key, a phase name and a config key (at any depth) holding one is refused in
    one line, naming the character, on either backend; nothing of it is stored. Before: kept,
    shown escaped, and `runs plot --key` and `--where` could not name it ("did you mean
    train/zw\\u200bk?", the text typed)."""
    for char, kind in BAD.items():
        named = re.escape(kind)
        with dlperf.track("k", store=backend) as run:
            with pytest.raises(UserError, match=f"metric key 'a.*b' holds {named} character"):
                run.log(1, **{f"a{char}b": 1.0})
            phase = f"phase name 'a.*b' holds {named} character"
            with pytest.raises(UserError, match=phase), run.phase(f"a{char}b"):
                pass
            run.log(1, ok=1.0)
        for config in ({f"k{char}y": 1}, {"s": {f"k{char}y": 1}}):
            refused = pytest.raises(UserError, match=f"config.*'k.*y'.* holds {named} character")
            with refused, dlperf.track("k", config=config, store=backend):
                pass
    store = dlperf.Store(backend)
    assert [r.config for r in store.runs()] == [{}] * len(BAD)
    assert {key for r in store.runs() for key in store.metric_keys(r.id)} == {"train/ok"}


def test_c4_the_store_refuses_such_metric_keys(backend: str) -> None:
    """RunStore.log_metrics, which every run's metrics go through, by the same rule."""
    from dlperf.store import RunStore

    store = RunStore.open(backend)
    refused = pytest.raises(UserError, match="metric key 'zw\\\\u200bk' holds U\\+200B, a format")
    with store.new_run("k", "run", {}) as record, refused:
        store.log_metrics(record.id, [("zw\u200bk", 1, 1.0)])
    assert store.metric_keys(record.id) == []


NET = """
from torch import nn


def make(num_classes=10, **kwargs):
    return nn.Sequential(nn.Flatten(), nn.LazyLinear(num_classes))
"""


@pytest.mark.parametrize(
    "where",
    [
        ("--set", 'model.kwargs."a\tb"=1'),
        ("--set", "model.kwargs.zw\u200bk=1"),
        ("file", '[model.kwargs]\n"a\\nb" = 1\n'),
    ],
)
def test_c4_run_refuses_such_config_keys(cli: Cli, tmp_path: Path, where: tuple[str, str]) -> None:
    """`dlperf run`'s config, from --set or the file, and `dlperf.run`'s dict, refused before
    anything runs."""
    how, text = where
    net = tmp_path / "net.py"  # a factory that takes any keyword, as smallcnn does not
    net.write_text(NET)
    exp = tmp_path / "tiny.toml"
    tiny = TINY.format(epochs=1).replace('"smallcnn"', f'"{net}:make"')
    exp.write_text(tiny + (text if how == "file" else ""))
    args = ["--set", text] if how == "--set" else []
    result = cli("run", str(exp), *args)
    one_line(result, 2, "key model.kwargs.", "holds U+")
    if how == "--set":
        key = text.removeprefix("model.kwargs.").removesuffix("=1").strip('"')
        model = {"name": f"{net}:make", "kwargs": {key: 1}}
        with pytest.raises(UserError, match=r"experiment\['model'\]\['kwargs'\]\[.* holds U\+"):
            dlperf.run({**tomllib.loads(tiny), "model": model})
    assert cli("runs", "list", "--json").out.strip() in ("", "[]")


def test_c4_a_sweep_axis_holding_one_is_refused(cli: Cli, tmp_path: Path) -> None:
    """A sweep's point, a new run, by the same rule, before any point runs."""
    (tmp_path / "net.py").write_text(NET)
    tiny = TINY.format(epochs=1).replace('"smallcnn"', f'"{tmp_path / "net.py"}:make"')
    (tmp_path / "exp.toml").write_text(tiny)
    sweep = tmp_path / "sweep.toml"
    sweep.write_text('base = "exp.toml"\n[grid]\n"model.kwargs.a\\u200bk" = [1, 3]\n')
    one_line(cli("sweep", str(sweep)), 2, "point 1", "key model.kwargs.", "holds U+200B")
    assert cli("runs", "list", "--json").out.strip() in ("", "[]")


# --- R5 F2: the store dlperf.run opened, on a refused experiment -----------------------------


@pytest.mark.parametrize(
    ("experiment", "overrides", "said"),
    [
        ({"model": {"name": "mlp"}}, ["nokey"], "expected KEY=VALUE"),
        ("nonexistent.toml", [], "nonexistent.toml"),
    ],
)
def test_r5_run_releases_the_store_it_opened_when_refused(
    experiment: Any, overrides: list[str], said: str, tmp_path: Path, monkeypatch: Any
) -> None:
    """The review's repro: a refused experiment left the store's connection checked in to its
    pool (PostgreSQL: one more in pg_stat_activity until a garbage collection)."""
    from tests.faults.test_break_it_31_lead import stores_opened

    opened = stores_opened(monkeypatch)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=said):
        dlperf.run(experiment, overrides, store=str(tmp_path / "r.db"))
    assert opened[0].engine.pool.checkedin() == 0  # type: ignore[attr-defined]
