"""Break-it round 52, fixer F1: memory that ran out building a model, or in run's dry checks.

- T3 C1: a `FILE.py:factory` whose weights did not fit (under `ulimit -v 4000000`, or bigger
  than the machine) was "factory F failed: RuntimeError: [enforce fail at alloc_cpu.cpp:127]
  err == 0. DefaultCPUAllocator: can't allocate memory: you tried to allocate N bytes ...",
  exit 2, as if the factory were wrong; a registry or torchvision model's, torch's allocator
  line in the CLI's catch-all. Now "out of memory building model 'F': an allocation of 1.5 GiB
  failed", exit 1, the limit named as the other memory-limit paths name it where one is set
  (a model file's import that runs out alike). run's dry forward (and backward) out of memory
  said "(a smaller model or input, or a device with more memory)" under a limit, exit 2; it
  names the limit now, exit 1, with the allocation's size in place of the allocator's line.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from dlperf import errors
from dlperf.engine.checks import dry_backward, dry_forward
from dlperf.errors import UserError
from tests.conftest import CliResult

# More than x86-64's 128 TiB of user address space: refused at once, whatever the machine
# and its overcommit setting (nn.Linear(10**7, 10**7) is 400 TB of fp32 weights)
NO_MACHINE = 10**7
LIMIT_KIB = 4_000_000  # torch and dlperf load under it; 16 GiB of weights do not fit
ALLOCATOR = (
    "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
    "you tried to allocate 1600000000 bytes. Error code 12 (Cannot allocate memory)"
)


def _told(result: CliResult, line: str) -> None:
    assert result.code == 1, result.err
    assert result.err == f"error: {line}\n", result.err


def test_c1_a_factory_too_big_for_any_machine_is_out_of_memory(
    cli: Callable[..., CliResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: 'error: factory huge.py:build failed: RuntimeError: [enforce fail at ...', 2."""
    monkeypatch.setattr(errors, "address_limit", lambda: None)  # as the suite may run limited
    (tmp_path / "huge.py").write_text(
        "import torch.nn as nn\n\n\n"
        "def build(width: int = 8):\n    return nn.Linear(width, width)\n"
    )
    own = f"{NO_MACHINE}"
    _told(
        cli("analyze", "huge.py:build", "--input", "8", "--set", f"model.kwargs.width={own}"),
        "out of memory building model 'huge.py:build': an allocation of 363.8 TiB failed "
        f"(a smaller model (its [model] kwargs: width={own}), or a machine with more memory)",
    )
    (tmp_path / "top.py").write_text(
        f"import torch.nn as nn\n\nNET = nn.Linear({NO_MACHINE}, {NO_MACHINE})\n\n\n"
        "def build():\n    return NET\n"
    )
    _told(
        cli("analyze", "top.py:build", "--input", "8"),
        "out of memory importing model file top.py (top.py, line 3): an allocation of 363.8 TiB "
        "failed (a smaller model, or a machine with more memory)",
    )


def test_c1_registry_and_torchvision_models_too_big_are_out_of_memory(
    cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the CLI's catch-all, torch's allocator line and 'ask for less: a smaller data
    set, batch or model'."""
    monkeypatch.setattr(errors, "address_limit", lambda: None)
    wide = f"model.kwargs.channels={2 * 10**12}"
    _told(
        cli("analyze", "conv_stack", "--set", "model.kwargs.n=1", "--set", wide),
        "out of memory building model 'conv_stack': an allocation of 196.5 TiB failed "
        f"(a smaller model (its [model] kwargs: n=1, channels={2 * 10**12}), or a machine "
        "with more memory)",
    )
    # its first block's first convolution: Conv2d(64, 10**12, 1)
    wide = f"model.kwargs.width_per_group={10**12}"
    _told(
        cli("analyze", "resnet50", "--input", "3,64,64", "--set", wide),
        "out of memory building model 'resnet50': an allocation of 232.8 TiB failed "
        f"(a smaller model (its [model] kwargs: width_per_group={10**12}), or a machine with "
        "more memory)",
    )


def test_c1_a_factory_over_a_memory_limit_names_it(tmp_path: Path) -> None:
    """Under `ulimit -v`, in a process of its own: the limit is what to raise."""
    (tmp_path / "mymod.py").write_text(
        "import torch.nn as nn\n\n\nclass Big(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.fc = nn.Linear(65536, 65536)\n\n"
        "    def forward(self, x):\n        return self.fc(x.flatten(1))\n"
    )

    def limit() -> None:  # in the child, between fork and exec
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT_KIB * 1024, LIMIT_KIB * 1024))

    done = subprocess.run(
        [sys.executable, "-m", "dlperf", "analyze", "mymod.py:Big", "--input", "65536"],
        cwd=tmp_path,
        env={**os.environ, "DLPERF_DB": str(tmp_path / "dlperf.db"), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=limit,
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        "error: out of memory building model 'mymod.py:Big': an allocation of 16.0 GiB failed "
        f"(a memory limit, ulimit -v {LIMIT_KIB} may be too low)\n"
    ), done.stderr


class _Hungry(nn.Module):
    """Its forward runs out of memory as torch's CPU allocator says it; with gradients only,
    where `training` (the forward with gradients of the dry backward)."""

    def __init__(self, training: bool = False) -> None:
        super().__init__()
        self.fc = nn.Linear(192, 3)
        self.only_with_gradients = training

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() or not self.only_with_gradients:
            raise RuntimeError(ALLOCATOR)
        return self.fc(x.flatten(1))


@pytest.mark.parametrize("limit", [None, LIMIT_KIB * 1024])
def test_c1_the_dry_forward_and_backward_name_a_memory_limit(
    monkeypatch: pytest.MonkeyPatch, limit: int | None
) -> None:
    """Before: '... on cpu: [enforce fail at ...] (a smaller model or input, or a device with
    more memory)', exit 2, under a limit as without."""
    monkeypatch.setattr(errors, "address_limit", lambda: limit)
    hint = (
        "a smaller model or input, or a device with more memory"
        if limit is None
        else f"a memory limit, ulimit -v {LIMIT_KIB} may be too low"
    )
    with pytest.raises(UserError) as forward:
        dry_forward(_Hungry(), (3, 8, 8), "the model rejects 3x8x8 images")
    assert forward.value.exit_code == 1
    assert str(forward.value) == (
        f"out of memory in a forward of two (3, 8, 8) images on cpu: an allocation of 1.5 GiB "
        f"failed ({hint})"
    )
    with pytest.raises(UserError) as backward:
        dry_backward(_Hungry(training=True), (3, 8, 8), "'hungry'")
    assert backward.value.exit_code == 1
    assert str(backward.value) == (
        f"out of memory in a backward of two (3, 8, 8) images on cpu: an allocation of 1.5 GiB "
        f"failed ({hint})"
    )
