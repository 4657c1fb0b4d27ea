"""Break-it round 67, W1's causes C1, C8 and C7: what a model file does to the process.

C1. Before: a model file that edited sys.modules as it was imported (`sys.modules["json"] =
None`) left it so, unsaid: the run failed as "cannot load torch: import of json halted; None
in sys.modules (its installation may be broken: reinstall it)", analyze blamed the input.
Now sys.modules is put back after the import and after the factory, as the file's other
process-wide changes are, with one warning line naming what it blocked, replaced or removed.

C8. Before: a mode the file entered as it was imported (`z = Z(); z.__enter__()`) and exited in
its factory (`z.__exit__(...)`), as it runs in a process of its own, failed the factory:
dlperf had taken the mode off after the import, and the factory's exit found "empty mode
stack", told as the factory's fault. Now the import's modes are lent back on for each call
of its factory (a mode it exited not again), and put back after it.

C7. Before: exporting a STORED run whose model file changed the process printed no warning
line and "warnings": [] (docs/run.md: export prints the same lines as run). Now the rebuild's
lines are among the export's warnings, as for a model file exported by name.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from dlperf.config import Experiment
from dlperf.deploy.export import resolve
from dlperf.experiment.run import run_experiment
from dlperf.models.registry import create_model, noting
from dlperf.store import RunStore
from tests.conftest import CliResult

FACTORY = """
import torch.nn as nn
def make(num_classes=10, in_channels=1):
    return nn.Sequential(nn.Flatten(), nn.Linear(64 * in_channels, num_classes))
"""

MODES = """
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
class Z(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))
class D(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))
"""


def _file(tmp_path: Path, text: str, name: str = "m.py") -> str:
    path = tmp_path / name
    path.write_text(text)
    return f"{path}:make"


def _modes() -> tuple[int, int]:
    return torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack()


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        ('sys.modules["json"] = None', "json (set to None)"),
        ('sys.modules["json"] = types.ModuleType("json")', "json (replaced)"),
        ('del sys.modules["json"]', "json (removed)"),
        (
            'sys.modules["dlperf_never_imported_67"] = None',
            "dlperf_never_imported_67 (set to None)",
        ),
    ],
    ids=["blocked", "replaced", "removed", "blocked_not_yet_imported"],
)
@pytest.mark.parametrize("where", ["import", "factory"])
def test_a_model_files_sys_modules_edit_is_put_back_with_a_line(
    tmp_path: Path, edit: str, said: str, where: str
) -> None:
    held = dict(sys.modules)
    top, body = (f"{edit}\n", "") if where == "import" else ("", f"    {edit}\n")
    spec = _file(
        tmp_path,
        "import sys, types\nimport torch.nn as nn\n"
        f"{top}def make(num_classes=10, in_channels=1):\n{body}"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(64 * in_channels, num_classes))\n",
    )
    try:
        with noting() as notes:
            model = create_model(spec, num_classes=3, in_channels=1)
        # before: json None (or the stand-in, or gone) for the rest of the process, unsaid
        assert sys.modules["json"] is held["json"]
        assert "dlperf_never_imported_67" not in sys.modules
        when = "as it was imported" if where == "import" else "in its factory"
        assert notes == [
            f"model file {tmp_path / 'm.py'} changed sys.modules {when}: {said}; put back as "
            "the process had it: left so, a later import of them (dlperf's, torch's) failed "
            "or took the file's stand-in"
        ]
        assert json.loads(json.dumps([1])) == [1]
        assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 3)
    finally:  # never left for the session, whatever failed
        sys.modules["json"] = held["json"]
        sys.modules.pop("dlperf_never_imported_67", None)


@pytest.mark.faults  # analyze's count takes seconds (20 on a busy machine)
def test_analyze_of_a_file_blocking_json_builds_and_says_it(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    held = sys.modules["json"]
    spec = _file(tmp_path, f'import sys\nsys.modules["json"] = None\n{FACTORY}')
    try:
        result = cli("analyze", spec, "--input", "1,8,8", "--json")
        # before: exit 2, "the model rejects input [1, 1, 8, 8]: ModuleNotFoundError: import
        # of json halted; None in sys.modules"
        assert result.code == 0, result.err
        assert json.loads(result.out)["model"] == spec
        assert (
            f"warning: model file {tmp_path / 'm.py'} changed sys.modules as it was imported: "
            "json (set to None); put back" in result.err
        )
    finally:
        sys.modules["json"] = held


@pytest.mark.parametrize(
    ("enter", "exit_"),
    [
        ("z = Z(); z.__enter__()", "z.__exit__(None, None, None)"),
        ("d = D(); d.__enter__()", "d.__exit__(None, None, None)"),
        (
            "z = Z(); z.__enter__(); d = D(); d.__enter__()",
            "d.__exit__(None, None, None); z.__exit__(None, None, None)",
        ),
    ],
    ids=["function_mode", "dispatch_mode", "both"],
)
def test_a_mode_entered_at_import_and_exited_in_the_factory_builds(
    tmp_path: Path, enter: str, exit_: str
) -> None:
    modes = _modes()
    spec = _file(
        tmp_path,
        f"{MODES}{enter}\nimport torch.nn as nn\n"
        "def make(num_classes=10, in_channels=1):\n"
        f"    {exit_}\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(64 * in_channels, num_classes))\n",
    )
    try:
        with noting() as notes:
            # before: UserError "factory ...:make failed: RuntimeError: trying to pop from
            # empty mode stack" (or IndexError of the dispatch mode's flags)
            model = create_model(spec, num_classes=3, in_channels=1)
        assert _modes() == modes
        # the import's line alone: the factory ended what the import began
        assert len(notes) == (2 if "d = D()" in enter and "z = Z()" in enter else 1), notes
        assert all(" as it was imported; the process's modes put back" in n for n in notes)
        assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 3)
    finally:
        while torch._C._len_torch_function_stack() > modes[0]:
            torch._C._pop_torch_function_stack()
        while torch._C._len_torch_dispatch_stack() > modes[1]:
            torch._C._pop_torch_dispatch_stack(None)


def test_a_mode_the_import_left_on_is_on_in_its_factory_and_off_after(tmp_path: Path) -> None:
    """As in a process of its own, the factory runs under the mode the import entered; its
    model's forward and the process after it do not (round 66), said once, by the import."""
    modes = _modes()
    spec = _file(
        tmp_path,
        f"{MODES}Z().__enter__()\nimport torch.nn as nn\n"
        "def make(num_classes=10, in_channels=1):\n"
        "    model = nn.Sequential(nn.Flatten(), nn.Linear(64 * in_channels, num_classes))\n"
        "    model.seen = torch._C._len_torch_function_stack()\n"
        "    return model\n",
    )
    with noting() as notes:
        model = create_model(spec, num_classes=3, in_channels=1)
    assert model.seen == modes[0] + 1
    assert _modes() == modes
    assert len(notes) == 1 and "entered a TorchFunctionMode Z as it was imported" in notes[0]


def test_export_of_a_stored_run_says_what_its_model_file_did(tmp_path: Path) -> None:
    spec = _file(tmp_path, f"import sys\nsys.modules['json'] = None\n{FACTORY}")
    exp = Experiment.model_validate(
        {
            "model": {"name": spec},
            "data": {"name": "digits"},
            "train": {"epochs": 1, "batch_size": 64, "lr": 0.05},
            "run": {"threads": 1, "warmup_steps": 1, "out_dir": str(tmp_path / "runs")},
        }
    )
    held = sys.modules["json"]
    store = RunStore.open(f"sqlite:///{tmp_path / 'dlperf.db'}")
    try:
        result = run_experiment(exp, store)
        assert result["status"] == "finished"
        source = resolve(str(result["run_id"]), lambda: store)
    finally:
        sys.modules["json"] = held
    # before: [] (the line a run of it says, and `export MODEL_FILE` too, was dropped)
    assert source.warnings == [
        f"model file {tmp_path / 'm.py'} changed sys.modules as it was imported: json (set "
        "to None); put back as the process had it: left so, a later import of them (dlperf's, "
        "torch's) failed or took the file's stand-in"
    ]
