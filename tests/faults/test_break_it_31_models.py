"""Break-it round 31, P1 (the user's own models), causes C1 and C2.

- C1: a model file's own versions of torch's functions (`F.relu = ...`, `torch.relu = ...`)
  and its torch.backends settings (`torch.backends.mkldnn.enabled = False`,
  `torch.set_float32_matmul_precision("medium")`) stayed for every model built after it in
  the process: a sweep's registry point then diverged, and a point trained before the file's
  (a sweep checks every point's factory first) already ran them. They are now put back after
  the file's import and its factory, with a line each, as its anomaly mode is.
- C2: a layer placed twice in a model (the same nn.Linear twice in a Sequential, or under two
  attribute names) was split into a row of its params and output with 0 MACs and a row of its
  MACs with no params or output. Now one row, under its first name, holds all of it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from dlperf.analytic.counting import analyze_module
from dlperf.models.registry import create_model, noting

# --- C1: a model file's monkey-patches and torch.backends settings -------------------------

PATCHES = """
import torch
import torch.nn.functional as F
F.relu = lambda x, inplace=False: x * 2
torch.relu = lambda x: x * 2
torch.Tensor.relu = lambda self: self * 2  # shadows torch's own, from its C base
torch.nn.init.kaiming_uniform_ = torch.nn.init.kaiming_normal_  # torch's, chosen by the model
torch.Tensor.doubled = lambda self: self * 2  # a new method, which replaces nothing
"""

BACKENDS = """
import torch
torch.backends.mkldnn.enabled = False
torch.backends.cudnn.benchmark = True
torch.set_float32_matmul_precision("medium")
torch.backends.cuda.enable_flash_sdp(False)
"""


def _file(tmp_path: Path, code: str, where: str) -> str:
    """A model file running `code` as it is imported or in its factory; its spec."""
    path = tmp_path / f"m_{where}.py"
    if where == "import":
        body, top = "", code
    else:
        body, top = "".join(f"    {line}\n" for line in code.strip().splitlines()), ""
    path.write_text(
        f"{top}\nimport torch.nn as nn\n"
        "def build(num_classes=10, in_channels=1):\n"
        f"{body}"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 16, num_classes))\n"
    )
    return f"{path}:build"


def _backends() -> tuple[object, ...]:
    return (
        torch.backends.mkldnn.enabled,
        torch.backends.cudnn.benchmark,
        torch.get_float32_matmul_precision(),
        torch.backends.cuda.flash_sdp_enabled(),
    )


@pytest.mark.parametrize("where", ["import", "factory"])
def test_a_model_files_own_torch_functions_are_put_back_with_a_line(
    tmp_path: Path, where: str
) -> None:
    own = (F.relu, torch.relu, torch.nn.init.kaiming_uniform_)
    try:
        with noting() as notes:
            create_model(_file(tmp_path, PATCHES, where), num_classes=10, in_channels=1)
        # the next model (a sweep's next point) runs torch's own
        x = torch.tensor([-1.0, 3.0])
        after = (F.relu(x).tolist(), torch.relu(x).tolist(), x.relu().tolist())
        kept = (F.relu, torch.relu, torch.nn.init.kaiming_uniform_)
        added = hasattr(torch.Tensor, "doubled")
    finally:  # never left for the rest of the test session
        F.relu, torch.relu, torch.nn.init.kaiming_uniform_ = own
        for name in ("relu", "doubled"):
            if name in vars(torch.Tensor):
                delattr(torch.Tensor, name)
    # before: [-2, 6] three times, F.relu the file's lambda, unsaid
    assert after == ([0.0, 3.0],) * 3
    assert kept == own
    assert added  # a method of its own replaces nothing of torch's: kept, for its forward
    assert len(notes) == 1, notes
    when = "as it was imported" if where == "import" else "in its factory"
    said = notes[0]
    assert when in said and "put back" in said, said
    for name in ("torch.nn.functional.relu", "torch.relu", "torch.Tensor.relu"):
        assert name in said, said
    assert "doubled" not in said, said


@pytest.mark.parametrize("where", ["import", "factory"])
def test_a_model_files_backend_settings_are_put_back_with_a_line(
    tmp_path: Path, where: str
) -> None:
    before = _backends()
    try:
        with noting() as notes:
            create_model(_file(tmp_path, BACKENDS, where), num_classes=10, in_channels=1)
        after = _backends()
    finally:
        torch.backends.mkldnn.enabled, torch.backends.cudnn.benchmark = before[:2]
        torch.set_float32_matmul_precision(str(before[2]))
        torch.backends.cuda.enable_flash_sdp(bool(before[3]))
    # before: (False, True, 'medium', False) for every later model, unsaid
    assert after == before
    assert len(notes) == 1, notes
    said = notes[0]
    assert "put back" in said and "mkldnn.enabled=False (was True)" in said, said


# torch's own run-time wraps (kept) and a file's own wrap (put back): test_break_it_31_models3.py


def test_a_point_built_after_a_patching_one_gets_torchs_own(tmp_path: Path) -> None:
    """A sweep checks every point's factory before the first trains: the points after it
    (and the first, trained after the check) are built on torch as the process had it."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import torch, torch.nn as nn\n"
        "def probe(num_classes=10, in_channels=1):\n"
        "    m = nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 16, num_classes))\n"
        "    m.seen = (torch.backends.mkldnn.enabled, nn.functional.relu.__module__)\n"
        "    return m\n"
    )
    own, before = (F.relu, torch.relu), _backends()
    try:
        with noting():
            create_model(_file(tmp_path, PATCHES + BACKENDS, "factory"), in_channels=1)
            seen = create_model(f"{probe}:probe", in_channels=1).seen
    finally:
        F.relu, torch.relu = own
        torch.backends.mkldnn.enabled, torch.backends.cudnn.benchmark = before[:2]
        torch.set_float32_matmul_precision(str(before[2]))
        torch.backends.cuda.enable_flash_sdp(bool(before[3]))
        for name in ("relu", "doubled"):
            if name in vars(torch.Tensor):
                delattr(torch.Tensor, name)
    # before: (False, "dlperf_user_mods_....m_factory"), the other file's
    assert seen == (True, "torch.nn.functional")


# --- C2: a layer placed twice is one row -------------------------------------------------


class UsedTwice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        lin = nn.Linear(64, 64)
        self.body = nn.Sequential(lin, nn.ReLU(), lin)  # one layer, called twice
        self.fc = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.body(x.flatten(1)))


class TwoNames(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 10)
        self.alias = self.fc  # one layer, two names

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.alias(x.flatten(1))


def _rows(model: nn.Module, train: bool = False) -> list[tuple[object, ...]]:
    a = analyze_module(model, [1, 8, 8], train=train)
    return [(r.name, r.output_shape, r.params, r.macs, r.activations) for r in a.layers]


def test_a_layer_called_twice_is_one_row_of_both_calls() -> None:
    """Before: `body.2` with the params, output and 128 activations and 0 MACs, then `body.0`
    with the 8,192 MACs, 0 params and no output (the totals were right)."""
    assert _rows(UsedTwice()) == [
        ("body.0", [1, 64], 64 * 64 + 64, 2 * 64 * 64, 2 * 64),
        ("body.1", [1, 64], 0, 0, 64),
        ("fc", [1, 10], 650, 640, 10),
    ]


def test_a_layer_under_two_names_is_one_row_under_its_first() -> None:
    """Before: `alias` with the params and output and 0 MACs, then `fc` with the MACs."""
    assert _rows(TwoNames()) == [("fc", [1, 10], 650, 640, 10)]


class Halving(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 1, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(self.conv(x))  # 8x8, 4x4, 2x2


def test_a_layer_called_on_two_sizes_shows_its_first_output() -> None:
    """Its row stands where it first ran: that call's output, the activations of both."""
    assert _rows(Halving()) == [("conv", [1, 1, 4, 4], 10, 9 * (16 + 4), 16 + 4)]


@pytest.mark.parametrize("model", [UsedTwice, TwoNames])
def test_the_rows_of_a_shared_layer_add_up_as_torchs_flop_counter(
    model: type[nn.Module],
) -> None:
    """Each row's MACs are torch's FlopCounterMode's for the module (every call of it, under
    the name torch's ModuleTracker gives it), and the backward's too."""
    built = model()
    with FlopCounterMode(display=False) as counter:
        built(torch.randn(1, 1, 8, 8)).sum().backward()
    by_module = counter.get_flop_counts()
    a = analyze_module(model(), [1, 8, 8], train=True)
    root = type(built).__name__
    for row in a.layers:
        flops = sum(by_module.get(f"{root}.{row.name}", {}).values())
        assert 2 * (row.macs + row.backward_macs) == flops, row.name
    assert 2 * (a.totals()["macs"] + a.totals()["backward_macs"]) == counter.get_total_flops()
