"""Break-it round 32, P1 (the user's own models), cause C2.

- C2: a forward that moves its tensors to a device this machine lacks (`.to("cuda")`,
  `.cuda()`, `.to("mps")`, `torch.zeros(..., device="mps")`) was blamed on the images or the
  input's shape: "the model rejects digits images of shape (1, 8, 8): Found no NVIDIA driver
  on your system ...", and analyze/predict told to change what the forward takes. `run`,
  `analyze`, `predict` and `export` now say the one line of errors.missing_device: the device
  the forward asked for, and to use the input's device or leave the placing to dlperf.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from dlperf.engine.checks import dry_forward
from dlperf.errors import UserError
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

# The tester's model (bk32 P1, dev1.py), with a factory that makes a tensor on the device
MODELS = """
import torch, torch.nn as nn
class M(nn.Module):
    def __init__(s, n=10, dev="mps"): super().__init__(); s.l=nn.Linear(64, n); s.dev=dev
    def forward(s, x): return s.l(x.flatten(1).to(s.dev))
class Made(M):
    def forward(s, x): return s.l(x.flatten(1)) + torch.zeros(1, device=s.dev)
def mps(num_classes=10): return M(num_classes, "mps")
def cuda(num_classes=10): return M(num_classes, "cuda")
def xpu(num_classes=10): return M(num_classes, "xpu")
def made_mps(num_classes=10): return Made(num_classes, "mps")
"""

FIX = "(use the input's device, .to(x.device), or leave the placing to dlperf)"


def _absent(device: str) -> pytest.MarkDecorator:
    """Skip where this machine has `device` (a CUDA machine for "cuda", a Mac for "mps")."""
    has = device in ("cpu", "meta") or (
        (acc := torch.accelerator.current_accelerator(check_available=True)) is not None
        and acc.type == device
    )
    return pytest.mark.skipif(has, reason=f"this machine has {device}")


# (factory, the device its forward asks for): torch's four ways of saying it has none
# (RuntimeError "Found no NVIDIA driver" or AssertionError "Torch not compiled with CUDA
# enabled", "not linked with support for mps devices", AssertionError "Torch not compiled with
# XPU enabled", and a factory's NotImplementedError "from the 'MPS' backend")
ASKED = [
    pytest.param("cuda", "cuda", marks=_absent("cuda")),
    pytest.param("mps", "mps", marks=_absent("mps")),
    pytest.param("xpu", "xpu", marks=_absent("xpu")),
    pytest.param("made_mps", "mps", marks=_absent("mps")),
]


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dev1.py").write_text(MODELS)
    return tmp_path


def _said(result: CliResult, what: str, device: str, on: str) -> None:
    assert (result.code, result.out) == (2, ""), (result.code, result.out, result.err)
    assert result.err.strip() == (
        f"error: {what} moves tensors to {device} in its forward, and this machine has no "
        f"{device} (dlperf runs it on {on}) {FIX}"
    ), result.err


@pytest.mark.parametrize(("factory", "device"), ASKED)
def test_a_forward_asking_for_a_missing_device_is_named_by_run(
    cli: Cli, models: Path, factory: str, device: str
) -> None:
    # before: "the model rejects digits images of shape (1, 8, 8): Found no NVIDIA driver ..."
    (models / "run.toml").write_text(
        f'[model]\nname = "dev1.py:{factory}"\n[data]\nname = "digits"\nnum_workers = 0\n'
        '[train]\nepochs = 1\n[run]\nthreads = 1\ndevice = "cpu"\n'
    )
    result = cli("run", "run.toml")
    _said(result, f"model '{models / 'dev1.py'}:{factory}'", device, "cpu")


@pytest.mark.parametrize(("factory", "device"), ASKED[:2])
def test_a_forward_asking_for_a_missing_device_is_named_by_analyze_and_predict(
    cli: Cli, models: Path, factory: str, device: str
) -> None:
    # before: "the model rejects input [1, 1, 8, 8]: RuntimeError: Found no NVIDIA driver ...
    # (analyze feeds the model what a run feeds it, ...: its forward must take that)"
    _said(cli("analyze", f"dev1.py:{factory}", "--input", "1,8,8"), "the model", device, "meta")
    predicted = cli("predict", f"dev1.py:{factory}", "--input", "1,8,8", "--device", "K80")
    _said(predicted, "the model", device, "meta")


@pytest.mark.parametrize(("factory", "device"), ASKED[:2])
def test_a_forward_asking_for_a_missing_device_is_named_by_export(
    cli: Cli, models: Path, factory: str, device: str
) -> None:
    # before: "model 'dev1.py:cuda' rejects input of shape (1, 8, 8): Found no NVIDIA driver"
    result = cli("export", f"dev1.py:{factory}", "--input", "1,8,8", "--out", "m.onnx")
    _said(result, f"model 'dev1.py:{factory}'", device, "cpu")  # export names the model
    assert list(models.glob("m.onnx*")) == []


class _Cuda(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.cuda()


@_absent("cuda")
def test_dry_forward_names_the_device_not_the_shape() -> None:
    with pytest.raises(UserError) as raised:
        dry_forward(_Cuda(), (1, 8, 8), "the model rejects images of shape (1, 8, 8)")
    assert raised.value.message == (
        "the model moves tensors to cuda in its forward, and this machine has no cuda "
        "(dlperf runs it on cpu)"
    )


class _Missing(nn.Module):
    """A forward failing with an operator torch lacks for its own device: not a device the
    machine lacks, so still the input's (a quantized CPU kernel missing looks the same)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(
            "Could not run 'aten::foo' with arguments from the 'QuantizedCPU' backend."
        )


def test_an_operator_missing_on_a_present_backend_is_not_a_missing_device() -> None:
    with pytest.raises(UserError) as raised:
        dry_forward(_Missing(), (1, 8, 8), "the model rejects images of shape (1, 8, 8)")
    assert raised.value.message.startswith("the model rejects images of shape (1, 8, 8)")
