"""Break-it round 24, fixer K: what a model's forward changes for the whole process (torch's
default dtype, its thread count, gradients turned off), and models nested deeper than Python's
recursion limit, each reproduced through the real entry point (the CLI, in-process)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from tests.conftest import CliResult

Cli = Callable[..., CliResult]

# 64 images in batches of 32: one thread, one epoch.
TINY_RUN = ("--set", "run.threads=1", "--set", "data.limit=64")


@pytest.fixture
def process_settings() -> Iterator[None]:
    """The test process's own dtype, thread count and grad mode back, whatever a model did."""
    saved = torch.get_default_dtype(), torch.get_num_threads(), torch.is_grad_enabled()
    yield
    torch.set_default_dtype(saved[0])
    torch.set_num_threads(saved[1])
    torch.set_grad_enabled(saved[2])


def _model(tmp_path: Path, name: str, forward: str) -> str:
    """A model file in tmp_path whose forward runs `forward` (indented lines) first: its
    model.name setting."""
    (tmp_path / name).write_text(
        "import torch\nfrom torch import nn\n"
        "class Net(nn.Module):\n"
        "    def __init__(self, num_classes=10):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(64, num_classes)\n"
        "        self.calls = 0\n"
        "    def forward(self, x):\n" + forward + "        return self.fc(x.flatten(1))\n"
    )
    return f'model.name="{name}:Net"'


def _words(text: str) -> str:
    """`text` with its whitespace as single spaces: the console wraps long lines."""
    return " ".join(text.split())


def _runs(cli: Cli) -> list[dict[str, object]]:
    listed = cli("runs", "list", "--json")
    assert listed.code == 0, listed.err
    runs: list[dict[str, object]] = json.loads(listed.out)
    return runs


def test_a_forward_setting_the_default_dtype_trains_with_one_line_and_it_is_put_back(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path, process_settings: None
) -> None:
    spec = _model(tmp_path, "dtype.py", "        torch.set_default_dtype(torch.float64)\n")
    result = cli("run", str(tiny_exp(epochs=1)), *TINY_RUN, "--set", spec)
    # before: exit 2, "the model rejects digits images of shape (1, 8, 8): mat1 and mat2 must
    # have the same dtype, but got Double and Float": the second dry forward's images were
    # made in the float64 the first one left
    assert result.code == 0, result.err
    said = (
        "warning: the model set torch's default dtype to torch.float64 in its forward; put "
        "back to torch.float32, in which dlperf builds and trains models "
    )
    assert _words(result.err).count(said) == 1, result.err
    assert torch.get_default_dtype() == torch.float32  # the caller's, as the command returns


def test_a_forward_setting_the_thread_count_is_said_and_steps_run_on_run_threads(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path, process_settings: None
) -> None:
    seen = tmp_path / "threads.txt"
    spec = _model(
        tmp_path,
        "threads.py",
        "        if self.training and torch.is_grad_enabled():\n"
        f"            with open({str(seen)!r}, 'a') as f:\n"
        "                f.write(f'{torch.get_num_threads()}\\n')\n"
        "        torch.set_num_threads(2)\n",
    )
    torch.set_num_threads(1)
    result = cli("run", str(tiny_exp(epochs=2)), *TINY_RUN, "--set", spec)
    assert result.code == 0, result.err
    # before: no line, and every step after the first began on the model's 2 threads
    said = (
        "warning: the model set torch's thread count to 2 in its forward; put back to 1 after "
        "each forward (which itself runs on 2): set run.threads rather than calling "
        "torch.set_num_threads in forward "
    )
    assert _words(result.err).count(said) == 1, result.err
    assert set(seen.read_text().split()) == {"1"}
    assert torch.get_num_threads() == 1
    [run] = _runs(cli)
    system = run["system"]
    assert isinstance(system, dict) and system["threads"] == 1


def test_a_forward_turning_gradients_off_mid_training_fails_the_run_in_one_line(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path, process_settings: None
) -> None:
    # The third forward with gradients on in training mode: the dry backward's, then the first
    # step's, then the second step's, which turns them off for good after its scores
    spec = _model(
        tmp_path,
        "gradoff.py",
        "        if self.training and torch.is_grad_enabled():\n"
        "            self.calls += 1\n"
        "            if self.calls == 3:\n"
        "                out = self.fc(x.flatten(1))\n"
        "                torch.set_grad_enabled(False)\n"
        "                return out\n",
    )
    result = cli("run", str(tiny_exp(epochs=1)), *TINY_RUN, "--set", spec)
    # before: a 63-line traceback from engine/step.py (loss.backward), "element 0 of tensors
    # does not require grad and does not have a grad_fn", exit 1
    said = (
        "model Net turned gradients off in its forward and left them off (torch."
        "set_grad_enabled(False), or torch.no_grad() entered outside a with-block): the loss "
        "has none to train on; turn them off only within a with-block: with torch.no_grad(): "
        "..."
    )
    assert result.code == 1, result.err
    assert "Traceback" not in result.err
    assert _words(result.err).endswith(f"run 1 failed: {said}")
    [run] = _runs(cli)
    assert (run["status"], run["error"]) == ("failed", said)
    assert torch.is_grad_enabled()


@pytest.mark.parametrize("depth", [300, 3000])
def test_a_model_nested_deeper_than_the_recursion_limit_is_one_line(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path, depth: int
) -> None:
    # 300: its forward runs out of depth (it was blamed on the images); 3000: the walk of its
    # parameters does, before any forward (a RecursionError traceback)
    (tmp_path / "deep.py").write_text(
        "from torch import nn\n"
        "def build(num_classes=10):\n"
        "    m = nn.Linear(64, 64)\n"
        f"    for _ in range({depth}):\n"
        "        m = nn.Sequential(m, nn.ReLU())\n"
        "    return nn.Sequential(nn.Flatten(), m, nn.Linear(64, num_classes))\n"
    )
    spec = f'model.name="{tmp_path}/deep.py:build"'
    result = cli("run", str(tiny_exp(epochs=1)), *TINY_RUN, "--set", spec)
    # six frames a level (registry.SUGGESTED_FRAMES_PER_LEVEL), rounded up to a thousand
    limit = (6 * (depth + 2) + 1000 + 999) // 1000 * 1000
    assert result.code == 2, result.err
    assert _words(result.err) == (
        f"error: model '{tmp_path}/deep.py:build' nests its modules {depth + 2} deep, too deep "
        "for Python's recursion limit (1000), through which torch walks and calls them (flatten "
        "the nesting: one nn.Sequential of the layers, not each inside the last; or raise the "
        f"limit in the model file: import sys; sys.setrecursionlimit({limit}))"
    )
    assert _runs(cli) == []
