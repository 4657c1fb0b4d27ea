"""Break-it round 66, Z1's cause D: a model file's process-wide torch hooks and modes.

Before: a model file that registered one of torch's global module hooks at import
(`torch.nn.modules.module.register_module_forward_hook`, the pre, backward and registration
ones alike) or entered a TorchFunctionMode or TorchDispatchMode (`Zero().__enter__()`) left it
on for the rest of the process, unsaid: every model built after it (a `--jobs 1` sweep's other
points, even the first, since a sweep builds every point first; distill's student baseline)
trained through it and was stored at chance (test accuracy 0.1114, exit 0).

Now they are put back after the file's import and after its factory, with one warning line
each kind, as the file's own versions of torch's functions are (`F.relu = ...`): its own model
runs without them too. Hooks a model puts on its own modules (`self.fc.register_forward_hook`)
are its own and run as before, in its training too.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as module_hooks
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from dlperf.models.registry import create_model, noting
from dlperf.store import RunStore
from tests.conftest import CliResult

HOOK = """
import torch.nn as nn
from torch.nn.modules.module import register_module_forward_hook
def _zero(mod, inp, out):
    if isinstance(mod, nn.Linear):
        return out * 0.0
register_module_forward_hook(_zero)
"""

PRE_HOOK = """
import torch.nn as nn
from torch.nn.modules.module import register_module_forward_pre_hook
def _zero_in(mod, args):
    if isinstance(mod, nn.Linear):
        return (args[0] * 0.0,)
register_module_forward_pre_hook(_zero_in)
"""

BACKWARD_AND_REGISTRATION = """
from torch.nn.modules import module as m
m.register_module_full_backward_hook(lambda mod, gi, go: None)
m.register_module_parameter_registration_hook(lambda mod, name, p: None)
m.register_module_forward_hook(lambda mod, args, kwargs, out: None, with_kwargs=True)
"""

FUNCTION_MODE = """
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
class Zero(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out * 0.0 if func is F.linear else out
Zero().__enter__()
"""

DISPATCH_MODE = """
import torch
from torch.utils._python_dispatch import TorchDispatchMode
class ZeroMm(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out * 0.0 if func is torch.ops.aten.addmm.default else out
ZeroMm().__enter__()
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


def _hook_dicts() -> dict[str, dict[int, object]]:
    """torch.nn.modules.module's dicts of global hooks and their flags, by name."""
    held = vars(module_hooks)
    return {n: v for n, v in held.items() if n.startswith("_global_") and isinstance(v, dict)}


def _global_hooks() -> list[int]:
    return [len(hooks) for _, hooks in sorted(_hook_dicts().items())]


def _modes() -> tuple[int, int]:
    return torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack()


@pytest.fixture
def clean() -> object:
    """Whatever a failing test leaves on is taken off, never left for the session."""
    hooks, full = _global_hooks(), module_hooks._global_is_full_backward_hook
    dicts = {name: dict(hooks) for name, hooks in _hook_dicts().items()}
    yield
    for name, held in dicts.items():
        getattr(module_hooks, name).clear()
        getattr(module_hooks, name).update(held)
    module_hooks._global_is_full_backward_hook = full
    while torch._C._len_torch_function_stack():
        torch._C._pop_torch_function_stack()
    while torch._C._len_torch_dispatch_stack():
        torch._C._pop_torch_dispatch_stack(None)
    assert _global_hooks() == hooks


def _plain_output() -> list[float]:
    """What a model that has nothing to do with the file computes (a sweep's other point)."""
    torch.manual_seed(0)
    layer = nn.Linear(4, 2)
    with torch.no_grad():
        layer.weight.fill_(1.0)
        layer.bias.fill_(0.5)
    return layer(torch.ones(1, 4)).flatten().tolist()


@pytest.mark.parametrize("where", ["import", "factory"])
@pytest.mark.parametrize(
    ("code", "said"),
    [
        (HOOK, "registered torch's global module hook {in_}_zero (register_module_forward_hook)"),
        (
            PRE_HOOK,
            "registered torch's global module hook {in_}_zero_in "
            "(register_module_forward_pre_hook)",
        ),
        (FUNCTION_MODE, "entered a TorchFunctionMode Zero"),
        (DISPATCH_MODE, "entered a TorchDispatchMode ZeroMm"),
    ],
    ids=["forward_hook", "forward_pre_hook", "function_mode", "dispatch_mode"],
)
def test_a_model_files_global_hook_or_mode_is_put_back_with_a_line(
    tmp_path: Path, clean: object, code: str, said: str, where: str
) -> None:
    hooks, modes = _global_hooks(), _modes()
    with noting() as notes:
        model = create_model(_file(tmp_path, code, where), num_classes=2, in_channels=1)
    # before: [0.0, 0.0] (the file's hook or mode on every model after it), unsaid
    assert _plain_output() == [4.5, 4.5]
    assert (_global_hooks(), _modes()) == (hooks, modes)
    when = "as it was imported" if where == "import" else "in its factory"
    assert len(notes) == 1, notes
    in_ = "" if where == "import" else "build.<locals>."  # a hook by its qualified name
    assert f"{said.format(in_=in_)} {when}" in notes[0], notes
    assert "this model" in notes[0] and "runs without it too" in notes[0], notes
    # its own model runs without it too, as with the file's own F.relu
    assert model(torch.ones(1, 1, 4, 4)).abs().sum().item() > 0


def test_backward_and_registration_hooks_and_their_flags_go_too(
    tmp_path: Path, clean: object
) -> None:
    hooks = _global_hooks()
    full = module_hooks._global_is_full_backward_hook
    with noting() as notes:
        create_model(_file(tmp_path, BACKWARD_AND_REGISTRATION, "import"), in_channels=1)
    # before: three hooks more, the with_kwargs flag with them, and torch's backward kind set
    assert _global_hooks() == hooks
    assert module_hooks._global_is_full_backward_hook is full
    assert len(notes) == 1, notes
    for registered in (
        "register_module_full_backward_hook",
        "register_module_parameter_registration_hook",
        "register_module_forward_hook",
    ):
        assert registered in notes[0], notes


def test_a_models_own_hooks_on_its_modules_still_run_in_training(tmp_path: Path) -> None:
    """Not torch's global hooks: the model's own, on its own modules, are kept and called."""
    path = tmp_path / "m_own.py"
    path.write_text(
        "import torch, torch.nn as nn\n"
        "SEEN = []\n"
        "def build(num_classes=10, in_channels=1):\n"
        "    m = nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 16, num_classes))\n"
        "    m[1].register_forward_hook(lambda mod, i, o: SEEN.append('fwd') or o * 2)\n"
        "    m[1].register_full_backward_hook(lambda mod, gi, go: SEEN.append('bwd'))\n"
        "    m.seen = SEEN\n"
        "    return m\n"
    )
    with noting() as notes:
        model = create_model(f"{path}:build", num_classes=2, in_channels=1)
    x = torch.ones(3, 1, 4, 4, requires_grad=True)
    out = model(x)
    F.cross_entropy(out, torch.tensor([0, 1, 0])).backward()
    assert notes == []
    assert model.seen == ["fwd", "bwd"]
    assert torch.allclose(out, 2 * F.linear(x.flatten(1), model[1].weight, model[1].bias))


def test_a_callers_own_mode_and_hook_are_kept(tmp_path: Path, clean: object) -> None:
    """What the process had before the file (an API caller's mode, its global hook) stays."""

    class Count(TorchFunctionMode):
        calls = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            Count.calls += 1
            return func(*args, **(kwargs or {}))

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    seen: list[str] = []
    handle = module_hooks.register_module_forward_hook(lambda m, i, o: seen.append("caller"))
    try:
        with Count(), Watch():
            with noting() as notes:
                create_model(_file(tmp_path, HOOK + FUNCTION_MODE, "import"), in_channels=1)
            stack = [torch._C._get_function_stack_at(i) for i in range(_modes()[0])]
            assert [type(m) for m in stack] == [Count]
            assert _modes()[1] == 1
            before = Count.calls
            assert _plain_output() == [4.5, 4.5]
            assert Count.calls > before
        assert seen  # the caller's hook ran on the plain model
    finally:
        handle.remove()
    assert len(notes) == 2, notes


def test_a_device_context_entered_at_import_is_left(tmp_path: Path, clean: object) -> None:
    """`torch.device("meta").__enter__()` is a TorchFunctionMode too (a DeviceContext, which
    set_default_device does not hold): before, it stayed on, and dlperf's own checks after the
    import failed on it, "failed to import: RuntimeError: Tensor.item() cannot be called on
    meta tensors". Now it is left, told as the default device put back (one line)."""
    code = 'import torch\ntorch.device("meta").__enter__()\n'
    with noting() as notes:
        create_model(_file(tmp_path, code, "import"), num_classes=2, in_channels=1)
    assert torch.get_default_device() == torch.device("cpu")
    assert _modes() == (0, 0)
    assert _plain_output() == [4.5, 4.5]
    assert len(notes) == 1, notes
    assert "set torch's default device to meta as it was imported; put back to cpu" in notes[0]


# --- end to end: a --jobs 1 sweep, as the tester ran it --------------------------------------

OWN_HOOK_MODEL = """\
import torch.nn as nn
CALLS = []
def make(num_classes=10, in_channels=1):
    m = nn.Sequential(nn.Flatten(), nn.Linear(64 * in_channels, num_classes))
    def count(mod, inp, out):  # its own hook, on its own layer: kept, in training too
        CALLS.append(1)
        with open("calls.txt", "w") as f:
            f.write(str(len(CALLS)))
    m[1].register_forward_hook(count)
    return m
"""

HOOK_MODEL = HOOK + (
    "def make(num_classes=10, in_channels=1):\n"
    "    return nn.Sequential(nn.Flatten(), nn.Linear(64 * in_channels, num_classes))\n"
)

SWEEP_BASE = """\
[model]
name = "m.py:make"
[data]
name = "digits"
[train]
epochs = 1
batch_size = 64
lr = 0.05
[run]
threads = 1
"""


@pytest.mark.faults
def test_a_jobs_1_sweeps_plain_point_trains_its_own_model(
    cli: Callable[..., CliResult],
    store: RunStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    clean: object,
) -> None:
    """Z1's case 105: before, point 1 (m.py, built before m_hook.py's import but trained
    after it) was stored at chance, test accuracy 0.1114, train loss 2.3026, exit 0."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.py").write_text(OWN_HOOK_MODEL)
    (tmp_path / "m_hook.py").write_text(HOOK_MODEL)
    (tmp_path / "base.toml").write_text(SWEEP_BASE)
    (tmp_path / "sw.toml").write_text(
        'base = "base.toml"\n[grid]\n"model.name" = ["m.py:make", "m_hook.py:make"]\n'
    )
    done = cli("sweep", "sw.toml", "--jobs", "1")
    assert done.code == 0, done.err
    accuracy = {
        Path(run.config["model"]["name"]).name: run.summary["test_accuracy"]
        for run in store.list_runs()
    }
    assert set(accuracy) == {"m.py:make", "m_hook.py:make"}
    assert min(accuracy.values()) > 0.8, accuracy
    assert "registered torch's global module hook _zero (register_module_forward_hook) " in (
        done.err
    )
    # the model's own hook ran at every forward of its training (dry checks, steps, evaluation)
    assert int((tmp_path / "calls.txt").read_text()) > 1797 // 64
