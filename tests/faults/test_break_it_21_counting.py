"""The twenty-first break-it round (P1: the user's own models), the faults analyze, predict and
run blamed on the input:

- C2. A forward that makes a tensor without device= (`x + torch.arange(8)`, `torch.ones(...)`,
  a plain tensor attribute made in __init__) trains, but analyze and predict said "the model
  rejects input [1, 1, 8, 8]: RuntimeError: Tensor on device cpu is not on the expected device
  meta! (check analyze.input (C,H,W) and analyze.batch ...)": no input fixes it. It is now
  counted on real CPU tensors, as a forward that torch's own code cannot run on meta is, with a
  warning naming the cause; the counts are FlopCounterMode's on real tensors.
- C4. A forward that needs a second argument (`forward(self, x, mask)`) was blamed on the
  images (run) or the input shape (analyze): now one line saying that dlperf feeds the forward
  one tensor and it needs more, with the fix.
- C5. A model whose parameters are all frozen was told "has no parameters to train (give it at
  least one layer with weights ...)": now one line saying they are all frozen, with the fix.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from dlperf.analytic import counting
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

MODELS = """
import torch, torch.nn as nn


class Bad(nn.Module):
    # the tester's: torch.arange made without device= (meta input, CPU tensor)
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.fc = nn.Linear(in_channels * 64, num_classes)

    def forward(self, x):
        return self.fc((x + torch.arange(8).float()).flatten(1))


class Positional(nn.Module):
    # a convolution whose input needs no gradient, then a second one whose input does, a mask
    # of ones made in forward and a plain tensor attribute (which .to() does not move)
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.a = nn.Conv2d(in_channels, 4, 3, padding=1)
        self.b = nn.Conv2d(4, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 64, num_classes)
        self.table = torch.randn(8, 8)

    def forward(self, x):
        h = torch.relu(self.a(x)) * torch.ones(4, 8, 8) + self.table
        return self.fc(torch.relu(self.b(h)).flatten(1))


class TwoArg(nn.Module):
    # the tester's: a forward that needs a mask beside the images
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.fc = nn.Linear(in_channels * 64, num_classes)

    def forward(self, x, mask):
        return self.fc(x.flatten(1)) * mask


class KeywordMask(TwoArg):
    def forward(self, x, *, mask):
        return self.fc(x.flatten(1)) * mask


class DefaultMask(TwoArg):
    # the fix: the mask has a default
    def forward(self, x, mask=None):
        y = self.fc(x.flatten(1))
        return y if mask is None else y * mask


def frozen(num_classes=10, in_channels=1):
    m = nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, num_classes))
    for p in m.parameters():
        p.requires_grad_(False)
    return m


class BuffersOnly(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.register_buffer("w", torch.randn(num_classes, in_channels))

    def forward(self, x):
        return x.mean((2, 3)) @ self.w.t()
"""


@pytest.fixture
def models(tmp_path: Path) -> Path:
    path = tmp_path / "mine.py"
    path.write_text(MODELS)
    return path


def _built(path: Path, name: str) -> nn.Module:
    """The model `name` of the file at `path`, built here on the CPU (not through dlperf)."""
    spec = importlib.util.spec_from_file_location("fxi_models", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    built: nn.Module = getattr(module, name)(10, 1)
    return built


def _fcm(model: nn.Module, batch: int) -> tuple[int, int]:
    """FlopCounterMode's FLOPs of a forward and of its backward (the sum of the outputs) on real
    CPU tensors of `batch` 1x8x8 images."""
    x = torch.rand(batch, 1, 8, 8)
    with FlopCounterMode(display=False) as forward:
        out = model(x)
    with FlopCounterMode(display=False) as backward:
        out.sum().backward()
    return forward.get_total_flops(), backward.get_total_flops()


def _counted(cli: Cli, *args: str) -> tuple[dict[str, Any], str]:
    result = cli(*args, "--json")
    assert result.code == 0, result.err
    assert "Traceback" not in result.err
    doc: dict[str, Any] = json.loads(result.out)
    return doc, result.err


# --- C2: a tensor made in forward without device= --------------------------------------------


@pytest.mark.parametrize("name", ["Bad", "Positional"])
def test_analyze_counts_a_forward_making_cpu_tensors_as_flop_counter_mode(
    cli: Cli, models: Path, name: str
) -> None:
    """Before: 'the model rejects input [1, 1, 8, 8]: RuntimeError: Tensor on device cpu is not
    on the expected device meta! (check analyze.input (C,H,W) and analyze.batch ...)', exit 2."""
    doc, err = _counted(cli, "analyze", f"{models}:{name}", "--input", "1,8,8", "--batch", "3")
    model = _built(models, name)
    forward, backward = _fcm(model, 3)
    totals = doc["totals"]
    assert totals["params"] == sum(p.numel() for p in model.parameters())
    assert 2 * totals["macs"] == forward
    # one warning says why, and what the model needs on a GPU (wrapped to the terminal's width)
    (warning,) = " ".join(err.split()).split("warning: ")[1:]
    assert "counted on real CPU tensors" in warning
    assert f"{name}.forward uses a tensor made on the CPU" in warning
    assert "device=x.device" in warning
    assert "rejects input" not in err
    assert "real CPU tensors" in doc["conventions"]["tensors"]
    # the training step too: FlopCounterMode's backward is dlperf's backward MACs
    trained, _ = _counted(
        cli, "analyze", f"{models}:{name}", "--input", "1,8,8", "--batch", "3", "--train"
    )
    assert 2 * trained["totals"]["macs"] == forward
    assert 2 * trained["totals"]["backward_macs"] == backward


def test_predict_counts_a_forward_making_cpu_tensors(cli: Cli, models: Path) -> None:
    """Before: the same 'the model rejects input' line from predict."""
    doc, err = _counted(cli, "predict", f"{models}:Bad", "--input", "1,8,8", "--device", "V100")
    forward, _ = _fcm(_built(models, "Bad"), 1)
    assert 2 * doc["flops_over_peak"]["counted_macs_per_image"] == forward
    assert doc["totals"]["time_s"] > 0
    said = " ".join(err.split())  # wrapped to the terminal's width
    assert "warning: counted on real CPU tensors" in said and "made on the CPU" in said


def test_a_model_too_large_for_real_tensors_names_the_cpu_tensor_and_the_fix(
    cli: Cli, models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over the bytes counted on real tensors: one line naming the cause and device=x.device,
    not the input, for analyze and predict alike."""
    monkeypatch.setattr(counting, "REAL_TENSORS_MAX_BYTES", 100)
    for command, device in (("analyze", []), ("predict", ["--device", "V100"])):
        result = cli(command, f"{models}:Bad", "--input", "1,8,8", *device)
        one_line(result, 2, "made on the CPU", "device=x.device", command)
        assert "rejects input" not in result.err and "analyze.input" not in result.err


# --- C4: a forward that needs more than the images --------------------------------------------


@pytest.mark.parametrize(
    ("name", "shown"), [("TwoArg", "forward(x, mask)"), ("KeywordMask", "forward(x, *, mask)")]
)
def test_analyze_and_predict_say_the_forward_needs_more_than_one_tensor(
    cli: Cli, models: Path, name: str, shown: str
) -> None:
    """Before: 'the model rejects input [1, 1, 8, 8]: TypeError: TwoArg.forward() missing 1
    required positional argument: 'mask' (check analyze.input (C,H,W) ...)', exit 2."""
    for command, device in (("analyze", []), ("predict", ["--device", "V100"])):
        result = cli(command, f"{models}:{name}", "--input", "1,8,8", *device)
        one_line(result, 2, shown, "2 arguments", f"{command} feeds it one", "give mask a default")
        assert "rejects input" not in result.err and "analyze.input (C,H,W)" not in result.err


def test_analyze_counts_a_forward_whose_second_argument_has_a_default(
    cli: Cli, models: Path
) -> None:
    doc, _ = _counted(cli, "analyze", f"{models}:DefaultMask", "--input", "1,8,8")
    assert doc["totals"]["params"] == 650 and doc["totals"]["macs"] == 640


def test_run_says_the_forward_needs_more_than_the_images(
    cli: Cli, models: Path, tiny_exp: Callable[..., Path]
) -> None:
    """Before: 'the model rejects digits images of shape (1, 8, 8): TypeError: TwoArg.forward()
    missing 1 required positional argument: 'mask'', exit 2."""
    result = cli("run", str(tiny_exp(epochs=1)), "--set", f"model.name={models}:TwoArg")
    one_line(result, 2, "forward(x, mask)", "2 arguments", "one tensor, a batch of images")
    assert "give mask a default" in result.err and "rejects" not in result.err
    assert cli("runs", "list", "--json").out.strip() in ("[]", "")  # nothing recorded


# --- C5: every parameter frozen ---------------------------------------------------------------


def test_run_says_a_model_whose_parameters_are_all_frozen_is_frozen(
    cli: Cli, models: Path, tiny_exp: Callable[..., Path]
) -> None:
    """Before: "model '...:frozen' has no parameters to train (give it at least one layer with
    weights (nn.Linear, nn.Conv2d ...))": the model has 650 of them, frozen."""
    result = cli("run", str(tiny_exp(epochs=1)), "--set", f"model.name={models}:frozen")
    one_line(result, 2, "650 parameters", "all frozen", "requires_grad_(True)")
    # feature extraction keeps a new head to train, from model.weights (which it needs)
    assert 'model.weights, leave them unfrozen and set model.transfer = "feature-extract"' in (
        result.err
    )
    assert "at least one layer with weights" not in result.err


def test_run_still_says_a_model_without_parameters_has_none(
    cli: Cli, models: Path, tiny_exp: Callable[..., Path]
) -> None:
    result = cli("run", str(tiny_exp(epochs=1)), "--set", f"model.name={models}:BuffersOnly")
    assert result.code == 2, result.err
    assert "frozen" not in result.err
