"""The eleventh break-it round (issue 41), model files: their neighbours, their own errors, and
os._exit.

Two model files in one process shared their neighbour modules: `a/models.py` and
`b/models.py`, each with `import helper` of its own `helper.py`, trained a's network twice in
one sweep (exit 0, point 2 under b's name), and the same in distill (teacher a, student b) and
in two `dlperf.analyze` calls: the first `helper` stayed in `sys.modules`. An exception raised
in a module beside the model file (`c_helper.check` raising ValueError) was told as "the model
rejects ... images", exit 2, without frames, and so were Python's own errors in the model's
code (a NameError, an AttributeError, a ZeroDivisionError, infinite recursion) under run,
analyze and export. And `os._exit()` in a model file at import ended dlperf silently, with the
model's exit code.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import dlperf
from dlperf.errors import UserError
from dlperf.models.registry import create_model, load_factory
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_break_it_9_misc import _one_line as one_line
from tests.faults.test_break_it_10_models import _told_as_the_models as told_as_the_models

Cli = Callable[..., CliResult]

BASE = """
[model]
name = "smallcnn"
[data]
name = "digits"
limit = 96
[train]
epochs = 1
batch_size = 16
lr = 0.05
[run]
threads = 1
warmup_steps = 1
checkpoint = false
out_dir = "{out}"
"""

# Two helpers of the same name that build different networks (650 and 385 parameters), and
# the same model file beside each.
HELPER = """
import torch


def make(num_classes=10):
    print("{tag}-HELPER-BUILD")
    return {net}


def lazy_tag():
    return "{tag}"
"""
NETS = {
    "A": "torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, num_classes))",
    "B": "torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 5), torch.nn.ReLU(), "
    "torch.nn.Linear(5, num_classes))",
}
PARAMS = {"A": 64 * 10 + 10, "B": 64 * 5 + 5 + 5 * 10 + 10}
MODEL = """
import helper


def net(num_classes=10):
    return helper.make(num_classes)


def tag_now():
    import helper as lazily  # imported again when called, after other model files loaded

    return lazily.lazy_tag()
"""


@pytest.fixture
def two(tmp_path: Path) -> Path:
    for tag in NETS:
        folder = tmp_path / tag.lower()
        folder.mkdir()
        (folder / "helper.py").write_text(HELPER.format(tag=tag, net=NETS[tag]))
        (folder / "models.py").write_text(MODEL)
    (tmp_path / "base.toml").write_text(BASE.format(out=tmp_path / "runs"))
    return tmp_path


# --- 1. each model file imports its own neighbours ---------------------------------------------


def test_a_sweep_over_two_model_files_trains_each_files_own_network(
    cli: Cli, two: Path, store: RunStore
) -> None:
    sweep = two / "sw.toml"
    sweep.write_text(
        'base="base.toml"\n[zip]\n"model.name"=["a/models.py:net","b/models.py:net"]\n'
    )
    result = cli("sweep", str(sweep))
    assert result.code == 0, (result.code, result.out, result.err)
    # before: exit 0, and A's helper built point 2's network under b's name
    second = result.err.split("point 2/2 started", 1)[1].split("point 2/2 finished", 1)[0]
    assert "B-HELPER-BUILD" in second, result.err
    assert "A-HELPER-BUILD" not in second, result.err
    first = result.err.split("point 1/2 started", 1)[1].split("point 1/2 finished", 1)[0]
    assert "A-HELPER-BUILD" in first and "B-HELPER-BUILD" not in first, result.err


def test_distill_builds_the_teacher_and_the_student_from_their_own_files(
    cli: Cli, two: Path, store: RunStore
) -> None:
    exp = two / "distill.toml"
    exp.write_text(
        BASE.format(out=two / "runs").replace('"smallcnn"', '"a/models.py:net"')
        + '[distill]\nunlabeled = "digits:holdout=0.8"\ntop_k = [2]\n'
        'student = "b/models.py:net"\n'
    )
    result = cli("distill", str(exp), "--set", "data.limit=60")
    assert result.code == 0, (result.code, result.out, result.err)
    # before: both trained B's network (the student's file is checked first)
    teacher = result.err.split("teacher: training", 1)[1].split("teacher: run", 1)[0]
    assert "A-HELPER-BUILD" in teacher and "B-HELPER-BUILD" not in teacher, result.err
    baseline = result.err.split("baseline: training", 1)[1].split("baseline: run", 1)[0]
    assert "B-HELPER-BUILD" in baseline and "A-HELPER-BUILD" not in baseline, result.err
    scoring = result.err.split("teacher run 1 scoring", 1)[1].split("select K=2", 1)[0]
    assert "A-HELPER-BUILD" in scoring and "B-HELPER-BUILD" not in scoring, result.err


def test_two_api_counts_in_one_process_count_each_files_own_network(two: Path) -> None:
    first = dlperf.analyze(f"{two}/a/models.py:net", (1, 8, 8))
    second = dlperf.analyze(f"{two}/b/models.py:net", (1, 8, 8))
    # before: 650 parameters both times
    assert (first.totals["params"], second.totals["params"]) == (PARAMS["A"], PARAMS["B"])
    again = dlperf.analyze(f"{two}/a/models.py:net", (1, 8, 8))
    assert again.totals["params"] == PARAMS["A"]


def test_a_model_files_lazy_import_finds_its_own_neighbour_after_another_file_loaded(
    two: Path,
) -> None:
    tag_a = load_factory(f"{two}/a/models.py:tag_now")
    tag_b = load_factory(f"{two}/b/models.py:tag_now")
    # Each call imports `helper` anew, as a forward or factory that imports lazily does.
    assert (tag_a(), tag_b(), tag_a(), tag_b()) == ("A", "B", "A", "B")
    built = [sum(p.numel() for p in create_model(f"{two}/{t}/models.py:net").parameters())
             for t in ("a", "b", "a")]  # fmt: skip
    assert built == [PARAMS["A"], PARAMS["B"], PARAMS["A"]]


def test_a_neighbour_missing_beside_one_file_is_not_taken_from_another(two: Path) -> None:
    lone = two / "lone"
    lone.mkdir()
    (lone / "models.py").write_text(MODEL)  # `import helper`, with no helper.py beside it
    create_model(f"{two}/a/models.py:net")
    with pytest.raises(UserError, match="No module named 'helper'"):
        create_model(f"{lone}/models.py:net")


def test_a_package_beside_each_file_imports_its_own_neighbours_too(two: Path) -> None:
    for tag in ("a", "b"):
        package = two / tag / "pkg"
        package.mkdir()
        (package / "__init__.py").write_text("from . import sub\n")
        (package / "sub.py").write_text("import helper\n\nTAG = helper.lazy_tag()\n")
        (two / tag / "uses_pkg.py").write_text(
            "import pkg\n\n\ndef tag():\n    return pkg.sub.TAG\n"
        )
    tags = [load_factory(f"{two}/{t}/uses_pkg.py:tag")() for t in ("a", "b", "a")]
    assert tags == ["A", "B", "A"]


def test_a_neighbour_that_fails_to_import_is_not_left_half_imported(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("VALUE = 1\nraise RuntimeError('broken on import')\n")
    (tmp_path / "models.py").write_text("import broken\n\n\ndef net():\n    return None\n")
    for _ in range(2):  # the second time fails as the first: no half-run `broken` was kept
        with pytest.raises(UserError, match="RuntimeError: broken on import"):
            load_factory(f"{tmp_path}/models.py:net")
    assert "broken" not in sys.modules


def test_a_neighbour_named_like_a_library_still_shadows_nothing(tmp_path: Path) -> None:
    (tmp_path / "json.py").write_text("raise RuntimeError('the neighbour json.py was imported')\n")
    (tmp_path / "models.py").write_text(
        "import json\nimport torch\n\n\ndef net(num_classes=10):\n"
        "    json.dumps({})\n    return torch.nn.Linear(64, num_classes)\n"
    )
    assert isinstance(create_model(f"{tmp_path}/models.py:net"), torch.nn.Linear)


# --- 2. an exception raised in a module beside the model file -----------------------------------

C_HELPER = """
def check(x):
    if x.shape[0] > 0:
        raise ValueError("c_helper refused the batch")
    return x


class ShardLost(Exception):
    pass


def lose(x):
    raise ShardLost("shard 7 went away")
"""
C_MODELS = """
import torch
import c_helper


class N(torch.nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.l = torch.nn.Linear(64, num_classes)

    def forward(self, x):
        return self.l(c_helper.check(x).flatten(1))


class N2(N):
    def forward(self, x):
        return self.l(c_helper.lose(x).flatten(1))


def net(num_classes=10):
    return N(num_classes)


def net2(num_classes=10):
    return N2(num_classes)
"""


@pytest.fixture
def beside(tmp_path: Path) -> Path:
    (tmp_path / "c_helper.py").write_text(C_HELPER)
    (tmp_path / "models.py").write_text(C_MODELS)
    (tmp_path / "base.toml").write_text(BASE.format(out=tmp_path / "runs"))
    return tmp_path


@pytest.mark.parametrize(
    ("factory", "said"),
    [("net", "ValueError: c_helper refused the batch"), ("net2", "ShardLost: shard 7 went away")],
)
def test_an_exception_raised_beside_the_model_file_is_the_models_own(
    cli: Cli, beside: Path, store: RunStore, factory: str, said: str
) -> None:
    result = cli(
        "run", str(beside / "base.toml"), "--set", f"model.name={beside}/models.py:{factory}"
    )
    # before: "error: the model rejects digits images of shape (1, 8, 8): ValueError: ...", exit 2
    told_as_the_models(result, said)
    assert any(line.strip().startswith('File "') and "c_helper.py" in line
               for line in result.err.splitlines()), result.err  # fmt: skip
    assert store.list_runs() == []


# --- 3. Python's own errors in the model's code ------------------------------------------------

OWN_BUGS = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.fc1 = nn.Linear(in_channels * 64, 32)
        self.fc2 = nn.Linear(32, num_classes)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


class NameErr(Net):
    def forward(self, x):
        return super().forward(x) * undefined_scale


class AttrTypo(Net):
    def forward(self, x):
        return self.fc3(torch.relu(self.fc1(x.flatten(1))))


class ZeroDiv(Net):
    def forward(self, x):
        k = len(self.extra_layers) if hasattr(self, "extra_layers") else 0
        return super().forward(x) / (1 // k)


class Recursive(Net):
    def forward(self, x):
        return self.forward(x)


class WrongMatmul(Net):
    def forward(self, x):
        return torch.matmul(x.flatten(1), torch.ones(7, 10))


def name_error(num_classes=10):
    return NameErr(num_classes)


def attr_typo(num_classes=10):
    return AttrTypo(num_classes)


def zero_div(num_classes=10):
    return ZeroDiv(num_classes)


def recursive(num_classes=10):
    return Recursive(num_classes)


def wrong_matmul(num_classes=10):
    return WrongMatmul(num_classes)
"""

BUGS = [
    ("name_error", "NameError: name 'undefined_scale' is not defined"),
    ("attr_typo", "AttributeError: 'AttrTypo' object has no attribute 'fc3'"),
    ("zero_div", "ZeroDivisionError: integer division or modulo by zero"),
    ("recursive", "RecursionError: maximum recursion depth exceeded"),
]


@pytest.fixture
def bugs(tmp_path: Path) -> Path:
    path = tmp_path / "models.py"
    path.write_text(OWN_BUGS)
    (tmp_path / "base.toml").write_text(BASE.format(out=tmp_path / "runs"))
    return path


def _own_bug(result: CliResult, said: str) -> None:
    told_as_the_models(result, said)
    assert "check analyze.input" not in result.err, result.err
    assert len(result.err.splitlines()) < 40, result.err  # recursion's frames are folded


@pytest.mark.parametrize(("factory", "said"), BUGS)
def test_python_errors_in_a_forward_are_the_models_own_under_run(
    cli: Cli, bugs: Path, store: RunStore, factory: str, said: str
) -> None:
    # before: "error: the model rejects digits images of shape (1, 8, 8): ...", exit 2
    base = bugs.parent / "base.toml"
    _own_bug(cli("run", str(base), "--set", f"model.name={bugs}:{factory}"), said)
    assert store.list_runs() == []


@pytest.mark.parametrize(("factory", "said"), BUGS)
def test_python_errors_in_a_forward_are_the_models_own_under_analyze(
    cli: Cli, bugs: Path, factory: str, said: str
) -> None:
    # before: "error: ... rejects input ... (check analyze.input ...)", exit 2
    _own_bug(cli("analyze", f"{bugs}:{factory}", "--input", "1,8,8"), said)


@pytest.mark.parametrize(("factory", "said"), BUGS)
def test_python_errors_in_a_forward_are_the_models_own_under_export(
    cli: Cli, bugs: Path, factory: str, said: str
) -> None:
    out = bugs.parent / "x.onnx"
    _own_bug(cli("export", f"{bugs}:{factory}", "--input", "1,8,8", "--out", str(out)), said)
    assert not out.exists()


def test_a_torch_op_refusing_the_shape_is_still_the_inputs_one_line(
    cli: Cli, bugs: Path, store: RunStore
) -> None:
    base = bugs.parent / "base.toml"
    line = one_line(cli("run", str(base), "--set", f"model.name={bugs}:wrong_matmul"))
    assert line.startswith("error: the model rejects digits images of shape (1, 8, 8): "), line
    line = one_line(cli("analyze", f"{bugs}:wrong_matmul", "--input", "1,8,8"))
    assert "rejects input" in line, line
    assert store.list_runs() == []


# --- 5. os._exit() in a model file at import ---------------------------------------------------

_EXITS = """
import sys
from dlperf.cli import main

for path in sys.argv[1:]:
    sys.argv = ["dlperf", "analyze", path + ":make", "--input", "1,8,8"]
    try:
        main()
    except SystemExit as e:
        print(f"exit {e.code}", flush=True)
print("still here", flush=True)
"""


def test_os_exit_at_import_is_one_line_and_dlperf_goes_on(tmp_path: Path) -> None:
    for code in (0, 3):
        (tmp_path / f"ox{code}.py").write_text(f"import os\nos._exit({code})\n")
    # One process for both: before, the first ended it with exit 0 and no output.
    done = subprocess.run(
        [sys.executable, "-c", _EXITS, "ox0.py", "ox3.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    assert done.stdout.splitlines() == ["exit 2", "exit 2", "still here"], done.stdout
    lines = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(done.stderr.strip().splitlines()) == 2, done.stderr
    for code, line in zip((0, 3), lines, strict=True):
        assert line.startswith(f"error: model file ox{code}.py called os._exit({code}) while "
                               "importing"), line  # fmt: skip
    assert "Traceback" not in done.stderr
