"""The fourteenth break-it round (issue 41, part A), a user's model file: imported as a
script, named as a file.

A5. A model file calling `argparse.ArgumentParser().parse_args()` at import parsed dlperf's
own command line: "usage: dlperf [-h] [--lr LR]", "dlperf: error: unrecognized arguments: run
base.toml ...", then dlperf's line. The file is imported with sys.argv = [the file], as when
run as a script (restored after), so its defaults apply; one that still refuses its (empty)
command line is one line quoting argparse's reason.

A6. A model path that exists but is not a .py file (`hw.ipynb:Net`, a package directory
`pkgdir:Net`) was "unknown model ... (see `dlperf models`)": a name naming a path is a model
file, refused as not a Python file (a notebook: `jupyter nbconvert --to script`) or as a
directory (naming its __init__.py), the same line from run, analyze and export.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]
INPUT = ("--input", "1,8,8")

ARGPARSE = """
import argparse, torch.nn as nn
p = argparse.ArgumentParser(); p.add_argument("--lr", type=float, default=0.1)
args = p.parse_args()
def Net(num_classes=10, in_channels=1):
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, num_classes))
"""

ARGPARSE_REQUIRED = """
import argparse, torch.nn as nn
p = argparse.ArgumentParser(); p.add_argument("data"); args = p.parse_args()
def Net(num_classes=10, in_channels=1):
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, num_classes))
"""

NET = """import torch.nn as nn
def Net(num_classes=10, in_channels=1):
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, num_classes))
"""

EXP = """
[model]
name = "smallcnn"
[data]
name = "digits"
limit = 64
[train]
epochs = 1
batch_size = 32
lr = 0.05
[run]
threads = 1
checkpoint = false
warmup_steps = 1
"""


def write(tmp_path: Path, name: str, text: str) -> str:
    (tmp_path / name).write_text(text)
    return name  # the CLI runs in tmp_path (the db fixture)


def counted(cli: Cli, spec: str, *extra: str) -> dict[str, Any]:
    result = cli("analyze", spec, *INPUT, "--json", *extra)
    assert result.code == 0, result.err
    assert "Traceback" not in result.err and "warning" not in result.err, result.err
    doc: dict[str, Any] = json.loads(result.out)
    return doc


def rows(doc: dict[str, Any]) -> list[tuple[str, int, int, int]]:
    return [(r["name"], r["params"], r["macs"], r["flops"]) for r in doc["layers"]]


# --- A5: argparse at import ---------------------------------------------------------------------


def test_a_model_file_parsing_arguments_at_import_gets_its_defaults(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    """Before: argparse's usage and 'unrecognized arguments: run exp.toml ...' above dlperf's
    line, exit 2."""
    path = write(tmp_path, "argparse_hw.py", ARGPARSE)
    analyzed = counted(cli, f"{path}:Net")
    assert analyzed["totals"]["params"] == 650
    exp = write(tmp_path, "exp.toml", EXP)
    result = cli("run", exp, "--set", f"model.name={path}:Net", "--json")
    assert result.code == 0, result.err
    assert "usage:" not in result.err and "unrecognized" not in result.err
    assert json.loads(result.out)["status"] == "finished"
    assert sys.argv[0] == "dlperf"  # dlperf's own, put back (the cli fixture's)


def test_a_model_file_whose_arguments_are_required_is_one_line(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    path = write(tmp_path, "needs.py", ARGPARSE_REQUIRED)
    exp = write(tmp_path, "exp.toml", EXP)
    for args in (
        ("run", exp, "--set", f"model.name={path}:Net"),
        ("analyze", f"{path}:Net", *INPUT),
        ("export", f"{path}:Net", *INPUT, "--out", "x.onnx"),
    ):
        result = cli(*args)
        one_line(
            result, 2, "model file needs.py parses the command line while importing",
            "the following arguments are required: data", "if __name__ == '__main__':",
        )  # fmt: skip
        assert "usage:" not in result.err
        assert sys.argv[:2] == ["dlperf", args[0]]
    assert store.list_runs() == []


def test_argparse_is_argparse_again_after_the_import(
    cli: Cli, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its command-line errors are taken only while a model file is imported."""
    error = argparse.ArgumentParser.error
    path = write(tmp_path, "needs.py", ARGPARSE_REQUIRED)
    one_line(cli("analyze", f"{path}:Net", *INPUT), 2, "arguments are required: data")
    assert argparse.ArgumentParser.error is error
    parser = argparse.ArgumentParser(prog="mine")
    parser.add_argument("n", type=int)
    with pytest.raises(SystemExit):
        parser.parse_args(["x"])
    assert "mine: error: argument n: invalid int value" in capsys.readouterr().err


# --- A6: a model path that is not a .py file ---------------------------------------------------


def _commands(spec: str, exp: str) -> list[tuple[str, ...]]:
    return [
        ("run", exp, "--set", f"model.name={spec}"),
        ("analyze", spec, *INPUT),
        ("export", spec, *INPUT, "--out", "x.onnx"),
    ]


def test_a_notebook_as_model_file_is_one_line_with_nbconvert(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    """Before: "unknown model 'hw.ipynb:Net' (see `dlperf models`)"."""
    cell = {"cell_type": "code", "metadata": {}, "source": NET, "outputs": []}
    (tmp_path / "m").mkdir()
    write(tmp_path, "m/hw.ipynb", json.dumps({"cells": [cell], "nbformat": 4}))
    for args in _commands("m/hw.ipynb:Net", write(tmp_path, "exp.toml", EXP)):
        result = cli(*args)
        one_line(
            result, 2, "model file m/hw.ipynb is not a Python (.py) file",
            "jupyter nbconvert --to script m/hw.ipynb",
        )  # fmt: skip
        assert "unknown model" not in result.err
    assert store.list_runs() == []


def test_a_package_directory_as_model_file_names_its_init(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    (tmp_path / "pkgdir").mkdir()
    write(tmp_path, "pkgdir/__init__.py", NET)
    for args in _commands("pkgdir:Net", write(tmp_path, "exp.toml", EXP)):
        result = cli(*args)
        one_line(result, 2, "model file pkgdir is a directory", "pkgdir/__init__.py:Net")
        assert "unknown model" not in result.err
    assert store.list_runs() == []
    # the file it names is counted (as before)
    assert counted(cli, "pkgdir/__init__.py:Net")["totals"]["params"] == 650


@pytest.mark.parametrize(
    ("spec", "text"),
    [
        ("notes.txt:Net", "model file notes.txt is not a Python (.py) file"),
        ("gone/net.ipynb:Net", "model file gone/net.ipynb not found"),
        ("empty:Net", "model file empty is a directory (use path/to/file.py:factory)"),
    ],
)
def test_other_paths_that_are_not_python_files(
    cli: Cli, tmp_path: Path, spec: str, text: str
) -> None:
    write(tmp_path, "notes.txt", NET)
    (tmp_path / "empty").mkdir()
    one_line(cli("analyze", spec, *INPUT), 2, text)


def test_registry_names_are_still_names(cli: Cli) -> None:
    one_line(cli("analyze", "resnet2O"), 2, "unknown model 'resnet2O'")
