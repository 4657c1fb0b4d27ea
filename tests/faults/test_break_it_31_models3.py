"""Break-it round 31, reviewer R1's findings F1, F2 and F3 on C1 and C4 (the user's own models).

- F1: a model file's own function put in place of torch's through a torch helper
  (`F.relu = torch.no_grad()(my_relu)`, `F.relu = torch.compile(F.leaky_relu)`, its own
  `torch.manual_seed = torch._disable_dynamo(...)`) was kept, unsaid: anything torch's code
  had made at run time passed for torch's own change. Only torch's own one-time wraps are
  kept now (importing torch._dynamo wraps torch.manual_seed, a first compiled frame
  nn.Module.__init__ and __setstate__).
- F2: `nn.ReLU.forward = ...` (a method of one of torch.nn's layer classes) was never put back.
- F3: a timer armed in the model's forward (or by a thread its file started) still ended `dlperf
  run` with no word ("Alarm clock", exit 142), the run `lost`: dlperf arms none, and now takes
  their signals as it takes SIGXCPU, one line naming the timer, the run `killed` saying why.
"""

from __future__ import annotations

import importlib
import inspect
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dlperf import stopping
from dlperf.models.registry import create_model, noting
from dlperf.store import RunStore
from tests.faults.test_break_it_22_stops import DEADLINE_S
from tests.forked import dlperf_process


def _file(tmp_path: Path, code: str) -> str:
    """A model file running `code` in its factory; its spec."""
    path = tmp_path / "m.py"
    body = "".join(f"    {line}\n" for line in code.strip().splitlines())
    path.write_text(
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
        "def build(num_classes=10, in_channels=1):\n"
        f"{body}"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 16, num_classes))\n"
    )
    return f"{path}:build"


@pytest.fixture
def torch_as_it_was() -> Iterator[None]:
    """The namespaces a test's model file may change, as they were, whatever the fix does.
    torch._dynamo imported first: its import wraps torch.manual_seed, a change of torch's."""
    importlib.import_module("torch._dynamo")
    spaces = (torch, F, nn.Module, nn.ReLU, nn.Linear, nn.Conv2d)
    held = [(space, dict(vars(space))) for space in spaces]
    yield
    for space, was in held:
        new = [n for n in vars(space) if n not in was] if isinstance(space, type) else []
        for name in new:  # a class's own (a module's: a submodule imported meanwhile)
            delattr(space, name)
        for name, value in was.items():
            if vars(space).get(name) is not value:
                setattr(space, name, value)


# --- F1: a model file's own function made by a torch helper ----------------------------------

HELPED = {
    "no_grad": ("F.relu = torch.no_grad()(lambda x, inplace=False: x * 2)", "functional.relu"),
    "compile": ("F.relu = torch.compile(F.leaky_relu)", "functional.relu"),
    "own_wrap": ("torch.manual_seed = torch._disable_dynamo(torch.manual_seed)", "manual_seed"),
}


@pytest.mark.usefixtures("torch_as_it_was")
@pytest.mark.parametrize("kind", list(HELPED))
def test_a_function_a_model_file_made_with_a_torch_helper_is_put_back(
    tmp_path: Path, kind: str
) -> None:
    """Before: kept, no line, for every model built after it in the process. torch.compile's
    first call imports torch._dynamo, whose own wrap of torch.manual_seed stays unsaid."""
    code, replaced = HELPED[kind]
    own = (F.relu, torch.manual_seed)
    with noting() as notes:
        create_model(_file(tmp_path, code), num_classes=10, in_channels=1)
    assert F.relu is own[0]
    assert len(notes) == 1, notes
    assert f"replaced torch.{'nn.' if 'functional' in replaced else ''}{replaced} " in notes[0]
    if kind == "own_wrap":
        assert torch.manual_seed is own[1]
    else:
        assert "manual_seed" not in notes[0], notes


@pytest.mark.usefixtures("torch_as_it_was")
def test_torchs_own_first_compile_wrap_of_module_init_is_kept_unsaid(tmp_path: Path) -> None:
    """A first compiled frame wraps nn.Module.__init__ and __setstate__ (torch._dynamo's
    install_generation_tagging_init, once a process): torch's change, kept, unsaid. The
    process is set as it was before any compile for the test; the file runs torch's code."""
    tag = "___needs_generation_tag_patch"
    if tag in vars(nn.Module):  # compiled before in this process: torch's wraps undone
        for name in ("__init__", "__setstate__"):
            setattr(
                nn.Module,
                name,
                inspect.getclosurevars(getattr(nn.Module, name)).nonlocals[
                    "init" if name == "__init__" else "setstate"
                ],
            )
        delattr(nn.Module, tag)
    own = nn.Module.__init__
    code = (
        "from torch._dynamo.mutation_guard import install_generation_tagging_init\n"
        "install_generation_tagging_init()"
    )
    with noting() as notes:
        create_model(_file(tmp_path, code), num_classes=10, in_channels=1)
    assert notes == []
    assert nn.Module.__init__ is not own and tag in vars(nn.Module)


# --- F2: a method of one of torch.nn's layer classes -----------------------------------------


@pytest.mark.usefixtures("torch_as_it_was")
def test_a_layer_class_method_a_model_file_replaced_is_put_back(tmp_path: Path) -> None:
    """Before: every later model's ReLU doubled and its Linear ran the file's forward."""
    own = (nn.ReLU.forward, nn.Linear.forward)
    code = (
        "nn.ReLU.forward = lambda self, x: x * 2\n"
        "nn.Linear.forward = lambda self, x: F.linear(x, self.weight * 0, self.bias)\n"
        "nn.Conv2d.__call__ = lambda self, x: x  # hides nn.Module's"
    )
    with noting() as notes:
        create_model(_file(tmp_path, code), num_classes=10, in_channels=1)
    assert (nn.ReLU.forward, nn.Linear.forward) == own
    assert "__call__" not in vars(nn.Conv2d)
    assert nn.ReLU()(torch.tensor([-1.0, 2.0])).tolist() == [0.0, 2.0]
    assert len(notes) == 1, notes
    for name in ("torch.nn.ReLU.forward", "torch.nn.Linear.forward", "torch.nn.Conv2d.__call__"):
        assert name in notes[0], notes


# --- F3: a timer armed in the model's forward ------------------------------------------------

# Arms a SIGALRM timer in a training step's forward (a timeout guard left armed) and waits
# for it there: the signal lands in the forward, as the run trains, on no race.
ARMING = """
import signal, time, torch, torch.nn as nn

class Net(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.fc = nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.training and torch.is_grad_enabled() and self.calls > 4:
            signal.setitimer(signal.ITIMER_REAL, 0.001)
            time.sleep(60)
        return self.fc(x)

def net(num_classes=10):
    return Net(num_classes)
"""


@pytest.mark.faults  # a real process: about 11 s
def test_a_timer_the_models_forward_armed_stops_the_run_in_one_line(tmp_path: Path) -> None:
    """Before: killed by SIGALRM (the shell's "Alarm clock"), nothing printed, the run left
    `running` (read as lost)."""
    (tmp_path / "arming.py").write_text(ARMING)
    (tmp_path / "e.toml").write_text(
        '[model]\nname = "arming.py:net"\n[data]\nname = "digits"\n[train]\nepochs = 1\n'
        "batch_size = 64\n[run]\nthreads = 1\ncheckpoint = false\n"
    )
    err = tmp_path / "stderr.txt"
    with pytest.MonkeyPatch.context() as env:  # the child's directory and store
        env.chdir(tmp_path)
        env.setenv("DLPERF_DB", f"sqlite:///{tmp_path / 'dlperf.db'}")
        proc = dlperf_process(["run", "e.toml"], err)  # the timer's signal: a real process
    try:
        proc.join(timeout=DEADLINE_S)
    finally:
        proc.kill()
        proc.join()
    stderr = err.read_text()
    said = [line for line in stderr.splitlines() if "triton not found" not in line]
    assert proc.exitcode == 128 + signal.SIGALRM, stderr
    assert "Traceback" not in stderr
    timer = [line for line in said if "SIGALRM" in line]
    assert len(timer) == 1 and timer[0].startswith("error: a SIGALRM came"), said
    (stored,) = RunStore.open(f"sqlite:///{tmp_path / 'dlperf.db'}").list_runs()
    assert stored.status == "killed"
    assert (stored.error or "").startswith("a SIGALRM came"), stored.error


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="POSIX's interval timers")
def test_a_timers_signal_stops_as_a_stop_signal_and_cancels_its_timer() -> None:
    """In this process SIGPROF (pytest's SIGALRM is pytest-timeout's, left as it is): its
    interval timer is cancelled, so that it does not go off again in the stop's cleanup."""
    before = signal.getsignal(signal.SIGPROF)
    try:
        signal.signal(signal.SIGPROF, signal.SIG_DFL)  # as a new process has it
        stopping.install()
        signal.setitimer(signal.ITIMER_PROF, 1000.0, 1000.0)
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGPROF)
        assert signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0)
        assert stopping.exit_code(0) == 128 + signal.SIGPROF
        assert stopping.stopped_by().startswith("a SIGPROF came")
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0.0)
        signal.signal(signal.SIGPROF, before)
