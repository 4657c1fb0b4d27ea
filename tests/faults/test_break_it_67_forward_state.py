"""Break-it round 67, fixer G3: what a model's forward changes mid-run, past the dry checks.

W1 C3: a forward that called self.double() at a training step (past every dry check) trained on
in float64: torch swaps each parameter's data in place, the same tensor, so the epoch-end check
that refuses a model grown mid-run (engine.checks.Held) saw nothing. The run was stored
`finished` at run.precision fp32 with float64 weights in its checkpoint, rc 0, no word. Now
Held keeps the parameters' dtypes too, and the run fails at that epoch's end, before its
checkpoint, in one line naming the parameters and the dtype change, as a model that grows
parameters mid-run fails.

W1 C9: a forward that turned on torch.autograd.set_detect_anomaly(True) or
torch.use_deterministic_algorithms(True) left them on for the rest of the run (every later
step's backward under anomaly mode, many times slower, timed as the run's) and for a --jobs 1
sweep's later points, unsaid. Now they are put back after every forward, as the forward's
default dtype, device and thread count are (engine.checks.Kept), and said once per model.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from tests.conftest import CliResult

Cli = Callable[..., CliResult]

# 128 images in batches of 32, one thread, one epoch: a few training steps.
SMALL_RUN = ("--set", "run.threads=1", "--set", "data.limit=128", "--set", "run.warmup_steps=0")


@pytest.fixture
def process_settings() -> Iterator[None]:
    """The test process's anomaly mode and deterministic algorithms back, whatever a model did."""
    anomaly = torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()
    deterministic = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    yield
    torch.autograd.set_detect_anomaly(*anomaly)
    torch.use_deterministic_algorithms(deterministic[0], warn_only=deterministic[1])


def _model(tmp_path: Path, name: str, forward: str) -> str:
    """A model file in tmp_path whose forward runs `forward` (indented lines) first, counting
    its training steps' forwards (a batch of 32, gradients on) in self.steps: its model.name
    setting."""
    (tmp_path / name).write_text(
        "import torch\nfrom torch import nn\n"
        "class Net(nn.Module):\n"
        "    def __init__(self, num_classes=10):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(64, num_classes)\n"
        "        self.steps = 0\n"
        "    def forward(self, x):\n"
        "        if self.training and torch.is_grad_enabled() and x.shape[0] == 32:\n"
        "            self.steps += 1\n"
        + forward
        + "        return self.fc(x.flatten(1).to(self.fc.weight.dtype)).float()\n"
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


def test_a_forward_converting_the_model_to_float64_mid_run_fails_the_run_in_one_line(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    spec = _model(
        tmp_path, "double.py", "            if self.steps == 2:\n                self.double()\n"
    )
    result = cli("run", str(tiny_exp(epochs=1)), *SMALL_RUN, "--set", spec)
    # before: rc 0, the run `finished` at precision fp32 with a float64 checkpoint, no word
    said = (
        "model Net's forward changed the dtype of parameters (fc.weight torch.float32 -> "
        "torch.float64, fc.bias torch.float32 -> torch.float64) during training, after the "
        "optimizer was built: it trained on in that dtype, stored at its run.precision; leave "
        "the parameters' dtype to dlperf"
    )
    assert result.code == 1, result.err
    assert said in _words(result.err) and "Traceback" not in result.err, result.err
    [run] = _runs(cli)
    assert run["status"] == "failed"
    assert said in str(run["error"])


def test_a_forward_converting_the_model_in_the_dry_checks_is_refused_as_a_dtype_change(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    # Its second forward, the dry checks' training-mode one, before anything is recorded
    spec = _model(tmp_path, "double2.py", "        if self.training:\n            self.double()\n")
    result = cli("run", str(tiny_exp(epochs=1)), *SMALL_RUN, "--set", spec)
    # before: rc 0, the run stored as fp32 trained in float64 from its dry checks on, no word
    assert (result.code, _runs(cli)) == (2, []), result.err
    assert _words(result.err) == (
        f"error: the forward of model '{tmp_path / 'double2.py'}:Net' changed the dtype of "
        "parameters (fc.weight torch.float32 -> torch.float64, fc.bias torch.float32 -> "
        "torch.float64) after its first call: a run trains the model as its factory builds "
        "it, in float32, and is stored at its run.precision, which such a model's weights and "
        "timings are not "
        "(leave the parameters' dtype to dlperf: no .double(), .half() or .to(dtype) on the "
        "model in forward (cast the input to the layer's instead); set run.precision for half "
        "precision)"
    ), result.err


def test_a_forward_turning_on_anomaly_mode_and_deterministic_algorithms_is_put_back_and_said(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path, process_settings: None
) -> None:
    seen = tmp_path / "seen.txt"
    spec = _model(
        tmp_path,
        "switches.py",
        "            with open(" + repr(str(seen)) + ", 'a') as f:\n"
        "                f.write(f'{torch.is_anomaly_enabled()} "
        "{torch.are_deterministic_algorithms_enabled()}\\n')\n"
        "        torch.autograd.set_detect_anomaly(True)\n"
        "        torch.use_deterministic_algorithms(True)\n",
    )
    result = cli("run", str(tiny_exp(epochs=1)), *SMALL_RUN, "--set", spec)
    assert result.code == 0, result.err
    # before: no line, and every training step's forward (and backward) after the first ran
    # under both: "True True"
    words = _words(result.err)
    for said in (
        "warning: the model turned torch's anomaly detection on in its forward; put back off "
        "after each forward: it slows every training step, and the run's timings with it (to "
        "debug a NaN, use it in a script of your own) ",
        "warning: the model turned torch's deterministic algorithms on in its forward; put "
        "back off after each forward, as the process had them ",
    ):
        assert words.count(said) == 1, result.err
    steps = seen.read_text().splitlines()
    assert len(steps) >= 2 and set(steps) == {"False False"}, steps
    assert not torch.is_anomaly_enabled()  # the caller's, as the command returns
    assert not torch.are_deterministic_algorithms_enabled()
    [run] = _runs(cli)
    assert run["status"] == "finished"
