"""Break-it round 5 (issue 41): users' model files and model.kwargs, each reproduced first
through the real entry point.

F1: num_classes or in_channels in model.kwargs collided with the values dlperf takes from the
data (a TypeError traceback, exit 1). F3: model files that Python imports were refused: one
importing a module beside it, a dataclass under `from __future__ import annotations`, a
package's `__init__.py` with a relative import. F12: a positional-only num_classes, an
nn.Module instance named as a factory, and a forward that branches on values under analyze
got hints that pointed the wrong way."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

# 64 images in batches of 32: two training steps, one thread.
TINY_RUN = ("--set", "run.threads=1", "--set", "data.limit=64")

NET = (
    "class Net(nn.Module):\n"
    "    def __init__(self, num_classes=10, in_channels=1):\n"
    "        super().__init__()\n"
    "        self.f = nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, num_classes))\n"
    "    def forward(self, x):\n"
    "        return self.f(x)\n"
)


def _write(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("from torch import nn\n" + body)


@pytest.fixture(autouse=True)
def import_state(tmp_path: Path) -> Iterator[None]:
    """sys.path as it was and no module of this test's files left: the CLI runs in this
    process and a model file's import now leaves its module and directory there, as Python's
    own import would. (torch's own lazily imported modules stay: torch cannot import twice.)"""
    path = list(sys.path)
    yield
    sys.path[:] = path
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(tmp_path)):
            del sys.modules[name]


def _analyze(cli: Cli, spec: str, *sets: str) -> CliResult:
    args = [item for s in sets for item in ("--set", s)]
    return cli("analyze", spec, "--input", "1,8,8", "--json", *args)


# --- F1: model.kwargs.num_classes / in_channels ------------------------------------------------


def test_in_channels_in_kwargs_that_disagrees_with_the_data_is_one_line(
    cli: Cli, tiny_exp: Callable[..., Path]
) -> None:
    # m57: smallcnn, no model file; before: TypeError 'multiple values for keyword argument'
    result = cli("run", str(tiny_exp(epochs=1)), *TINY_RUN, "--set", "model.kwargs.in_channels=3")
    one_line(result, 2, "model.kwargs.in_channels=3", "digits images have 1 channel")
    assert "drop model.kwargs.in_channels" in result.err
    assert json.loads(cli("runs", "list", "--json").out) == []


def test_num_classes_in_kwargs_that_disagrees_with_the_data_is_one_line(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    _write(tmp_path / "net.py", NET)  # m52
    result = cli(
        "run", str(tiny_exp(epochs=1)), *TINY_RUN,
        "--set", 'model.name="net.py:Net"', "--set", "model.kwargs.num_classes=3",
    )  # fmt: skip
    one_line(result, 2, "model.kwargs.num_classes=3", "digits has 10 classes")


def test_kwargs_that_agree_with_the_data_are_accepted(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    _write(tmp_path / "net.py", NET)
    result = cli(
        "run", str(tiny_exp(epochs=1)), *TINY_RUN, "--set", 'model.name="net.py:Net"',
        "--set", "model.kwargs.num_classes=10", "--set", "model.kwargs.in_channels=1",
    )  # fmt: skip
    assert result.code == 0, result.err
    [run] = json.loads(cli("runs", "list", "--json").out)
    assert run["status"] == "finished"


def test_analyze_takes_num_classes_from_kwargs_and_refuses_other_channels(
    cli: Cli, tmp_path: Path
) -> None:
    _write(tmp_path / "net.py", NET)  # m58
    result = _analyze(cli, "net.py:Net", "model.kwargs.num_classes=3")
    assert result.code == 0, result.err
    assert json.loads(result.out)["classes"] == 3
    result = _analyze(cli, "net.py:Net", "model.kwargs.in_channels=3")
    one_line(result, 2, "model.kwargs.in_channels=3", "the input [1, 8, 8] has 1 channel")
    result = cli(
        "analyze", "net.py:Net", "--input", "1,8,8", "--classes", "5",
        "--set", "model.kwargs.num_classes=3",
    )  # fmt: skip
    one_line(result, 2, "model.kwargs.num_classes=3", "analyze.classes is 5")


def test_a_positional_only_num_classes_is_given_the_datas(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    _write(
        tmp_path / "posonly.py",
        "class Net(nn.Module):\n"
        "    def __init__(self, num_classes, /):\n"
        "        super().__init__()\n"
        "        self.f = nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))\n"
        "    def forward(self, x):\n"
        "        return self.f(x)\n",
    )
    # m68: before, 'positional-only arguments passed as keyword', whose hint led into F1 (m71)
    result = cli("run", str(tiny_exp(epochs=1)), *TINY_RUN, "--set", 'model.name="posonly.py:Net"')
    assert result.code == 0, result.err
    # analyze has no data: the hint's [model] kwargs is where the number goes, and it works
    result = _analyze(cli, "posonly.py:Net")
    one_line(result, 2, "missing 1 required positional argument", "its value in [model] kwargs")
    result = _analyze(cli, "posonly.py:Net", "model.kwargs.num_classes=4")
    assert result.code == 0, result.err
    assert json.loads(result.out)["classes"] == 4


# --- F3: model files imported as Python imports them ------------------------------------------


def test_a_model_file_imports_a_module_beside_it(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "helper_sib.py").write_text("WIDTH = 8\n")
    _write(tmp_path / "models" / "usesib.py", "from helper_sib import WIDTH\n" + NET)
    result = _analyze(cli, "models/usesib.py:Net")  # m12: No module named 'helper_sib'
    assert result.code == 0, result.err


def test_a_model_files_neighbour_does_not_replace_an_installed_module(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The directory made importable for siblings must not shadow what dlperf or torch import
    # later: a model beside a file named like a module of the standard library.
    monkeypatch.delitem(sys.modules, "tabnanny", raising=False)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tabnanny.py").write_text("raise ImportError('the model dir won')\n")
    _write(tmp_path / "models" / "net.py", NET)
    assert _analyze(cli, "models/net.py:Net").code == 0
    assert hasattr(importlib.import_module("tabnanny"), "check")


def test_a_model_file_with_a_dataclass_under_postponed_annotations(
    cli: Cli, tmp_path: Path
) -> None:
    (tmp_path / "dcfg.py").write_text(
        "from __future__ import annotations\n"
        "from dataclasses import dataclass\n"
        "from torch import nn\n"
        "@dataclass\n"
        "class Cfg:\n"
        "    width: int = 32\n" + NET,
    )
    result = _analyze(cli, "dcfg.py:Net")  # m54: 'NoneType' object has no attribute '__dict__'
    assert result.code == 0, result.err


def test_a_packages_init_with_a_relative_import(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "layers.py").write_text("WIDTH = 16\n")
    _write(tmp_path / "pkg" / "__init__.py", "from .layers import WIDTH\n" + NET)
    result = _analyze(cli, "pkg/__init__.py:Net")  # m97: No module named 'dlperf_user___init__'
    assert result.code == 0, result.err


def test_a_model_file_that_fails_to_import_leaves_no_module(cli: Cli, tmp_path: Path) -> None:
    _write(tmp_path / "broken.py", "import no_such_module_here\n" + NET)
    result = _analyze(cli, "broken.py:Net")
    one_line(result, 2, "broken.py failed to import", "No module named 'no_such_module_here'")
    # no module whose name ends in the file's stem (the file is imported as
    # dlperf_user_<folder>_<hash>.broken): a half-run module would import as whole next time
    assert not [name for name in sys.modules if name.split(".")[-1] == "broken"]


# --- F12: hints that pointed the wrong way ----------------------------------------------------


def test_a_module_instance_is_named_as_one(cli: Cli, tmp_path: Path) -> None:
    _write(tmp_path / "instance.py", "Net = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))\n")
    result = _analyze(cli, "instance.py:Net")  # m87: "... unexpected keyword 'num_classes'"
    one_line(result, 2, "'Net' is an instance of nn.Sequential, not a class or factory")
    assert "def make(num_classes=10): return nn.Sequential(...)" in result.err


def test_analyze_of_a_forward_that_branches_on_values_says_so(cli: Cli, tmp_path: Path) -> None:
    _write(
        tmp_path / "branch.py",
        "class Net(nn.Module):\n"
        "    def __init__(self, num_classes=10):\n"
        "        super().__init__()\n"
        "        self.a = nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))\n"
        "    def forward(self, x):\n"
        "        if x.mean() > 0.0:\n"
        "            return self.a(x)\n"
        "        return self.a(x) * 100\n",
    )
    result = _analyze(cli, "branch.py:Net")  # m72: blamed analyze.input and analyze.batch
    one_line(result, 2, "the model's forward reads tensor values", "meta device")
    assert "analyze.input" not in result.err
