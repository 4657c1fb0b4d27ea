"""The user-model defects of the fourth break-it round (issue 41), each reproduced first through
the real entry point: a model built on the meta device, a model that calls sys.exit while
training, one that changes torch's thread count, a model file given a keyword it does not take,
and one that prints while dlperf imports and builds it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from tests.conftest import CliResult

Cli = Callable[..., CliResult]

# 64 images in batches of 32: two training steps, one thread.
TINY_RUN = ("--set", "run.threads=1", "--set", "data.limit=64")


def _model(tmp_path: Path, name: str, body: str) -> str:
    """Write a model file into tmp_path (the CLI's working directory): its model.name."""
    (tmp_path / name).write_text("import sys\nimport torch\nfrom torch import nn\n" + body)
    return f'model.name="{name}:Net"'


def _runs(cli: Cli) -> list[dict[str, object]]:
    listed = cli("runs", "list", "--json")
    assert listed.code == 0, listed.err
    runs: list[dict[str, object]] = json.loads(listed.out)
    return runs


@pytest.fixture
def torch_threads() -> Iterator[None]:
    """The test process's own thread count back after a model changed it."""
    saved = torch.get_num_threads()
    yield
    torch.set_num_threads(saved)


def test_a_model_on_the_meta_device_is_one_line_and_stores_nothing(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    spec = _model(
        tmp_path,
        "meta.py",
        "class Net(nn.Module):\n"
        "    def __init__(self, num_classes=10):\n"
        "        super().__init__()\n"
        "        self.f = nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))\n"
        '        self.to("meta")\n'
        "    def forward(self, x):\n"
        "        return self.f(x)\n",
    )
    result = cli("run", str(tiny_exp(epochs=1)), *TINY_RUN, "--set", spec)
    # before: NotImplementedError from model.to(device), a 55-line traceback, exit 1
    assert result.code == 2, result.err
    assert result.err == (
        f"error: model '{tmp_path}/meta.py:Net' has its parameters on the meta device: they "
        "hold no values (materialise them in the factory, e.g. model.to_empty(device='cpu') "
        "and then initialise them)\n"
    )
    assert _runs(cli) == []


def test_sys_exit_while_training_fails_the_run_with_exit_1(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    spec = _model(
        tmp_path,
        "quits.py",
        "class Net(nn.Module):\n"
        "    def __init__(self, num_classes=10):\n"
        "        super().__init__()\n"
        "        self.f = nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))\n"
        "        self.steps = 0\n"
        "    def forward(self, x):\n"
        "        if self.training and torch.is_grad_enabled():\n"
        "            self.steps += 1\n"
        "            if self.steps == 2:\n"
        "                sys.exit(0)\n"
        "        return self.f(x)\n",
    )
    result = cli("run", str(tiny_exp(epochs=1)), *TINY_RUN, "--set", spec)
    said = (
        "the model called sys.exit(0) during training (a model that cannot go on should raise "
        "an exception)"
    )
    # before: exit 0 and nothing on stderr, the run stored failed with 'SystemExit: 0'
    assert result.code == 1, result.err
    assert result.err.splitlines()[-1] == f"run 1 failed: {said}"
    assert "Traceback" not in result.err
    [run] = _runs(cli)
    assert (run["status"], run["error"]) == ("failed", said)


def test_a_model_that_changes_the_thread_count_is_set_back(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path, torch_threads: None
) -> None:
    seen = tmp_path / "threads.txt"
    spec = _model(
        tmp_path,
        "threads.py",
        "class Net(nn.Module):\n"
        "    def __init__(self, num_classes=10):\n"
        "        super().__init__()\n"
        "        torch.set_num_threads(5)\n"
        "        self.f = nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))\n"
        "    def forward(self, x):\n"
        "        if self.training and torch.is_grad_enabled():\n"
        f"            with open({str(seen)!r}, 'a') as f:\n"
        "                f.write(f'{torch.get_num_threads()}\\n')\n"
        "        return self.f(x)\n",
    )
    result = cli("run", str(tiny_exp(epochs=1)), *TINY_RUN, "--set", spec)
    assert result.code == 0, result.err
    # before: every training step ran on 5 threads while the run stored 1
    assert set(seen.read_text().split()) == {"1"}
    assert (
        "warning: the model set torch's thread count to 5; set back to run.threads (1)\n"
        in result.err
    )
    [run] = _runs(cli)
    system = run["system"]
    assert isinstance(system, dict) and system["threads"] == 1


BASE = (
    "class Net(nn.Module):\n"
    "    def __init__(self, num_classes: int = 10, in_channels: int = 3) -> None:\n"
    "        super().__init__()\n"
    "        self.f = nn.Sequential(nn.Flatten(), nn.LazyLinear(num_classes))\n"
    "    def forward(self, x):\n"
    "        return self.f(x)\n"
)


def test_a_model_file_given_a_keyword_it_does_not_take_is_refused(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    spec = _model(tmp_path, "base.py", BASE)
    typo = ("--set", "model.kwargs.num_clases=3")
    result = cli("run", str(tiny_exp(epochs=1)), *TINY_RUN, "--set", spec, *typo)
    # before: num_clases dropped without a word, trained with the defaults, exit 0
    assert result.code == 2, result.err
    assert result.err == (
        f"error: model '{tmp_path}/base.py:Net' does not accept num_clases "
        "(accepted: num_classes, in_channels)\n"
    )
    assert _runs(cli) == []


def test_a_model_file_whose_factory_takes_only_some_automatic_keywords_still_trains(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    # in_channels is dlperf's to give, not the user's: a factory without it is given none
    spec = _model(tmp_path, "few.py", BASE.replace(", in_channels: int = 3", ""))
    result = cli("run", str(tiny_exp(epochs=1)), *TINY_RUN, "--set", spec)
    assert result.code == 0, result.err


PRINTER = (
    'print("HELLO FROM IMPORT")\n'
    "class Net(nn.Module):\n"
    "    def __init__(self, num_classes=10):\n"
    "        super().__init__()\n"
    '        print("building", num_classes)\n'
    "        self.f = nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))\n"
    "    def forward(self, x):\n"
    "        return self.f(x)\n"
)


def test_a_model_file_that_prints_leaves_run_json_parseable(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    spec = _model(tmp_path, "printer.py", PRINTER)
    result = cli("run", str(tiny_exp(epochs=1)), *TINY_RUN, "--set", spec, "--json")
    assert result.code == 0, result.err
    # before: HELLO FROM IMPORT and building 10 ahead of the document on stdout
    assert json.loads(result.out)["status"] == "finished"
    assert "HELLO FROM IMPORT\n" in result.err and "building 10\n" in result.err


def test_a_model_file_that_prints_leaves_analyze_json_parseable(cli: Cli, tmp_path: Path) -> None:
    _model(tmp_path, "printer.py", PRINTER)
    result = cli("analyze", "printer.py:Net", "--input", "1,8,8", "--json")
    assert result.code == 0, result.err
    assert isinstance(json.loads(result.out), dict)
    assert "HELLO FROM IMPORT\n" in result.err


def test_a_model_that_prints_in_forward_leaves_run_json_parseable(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    spec = _model(
        tmp_path,
        "chatty.py",
        PRINTER.replace("return self.f(x)", 'print("step")\n        return self.f(x)'),
    )
    result = cli("run", str(tiny_exp(epochs=1)), *TINY_RUN, "--set", spec, "--json")
    assert result.code == 0, result.err
    # before: a "step" line per batch ahead of the document on stdout
    assert json.loads(result.out)["status"] == "finished"
    assert "step\n" in result.err


def test_sys_exit_in_forward_while_counting_is_one_line_with_exit_1(
    cli: Cli, tmp_path: Path
) -> None:
    _model(
        tmp_path,
        "quits.py",
        "class Net(nn.Module):\n"
        "    def __init__(self, num_classes=10):\n"
        "        super().__init__()\n"
        "        self.f = nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))\n"
        "    def forward(self, x):\n"
        "        sys.exit(0)\n",
    )
    result = cli("analyze", "quits.py:Net", "--input", "1,8,8", "--json")
    # before: exit 0, nothing on stdout or stderr
    assert result.code == 1
    assert result.err == (
        "error: quits.py:9 called sys.exit(0) (code that cannot go on should raise an exception)\n"
    )
    assert result.out == ""
