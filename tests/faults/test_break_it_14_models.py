"""The fourteenth break-it round (issue 41, part A), a user's model file: counted whatever its
`__call__`, built whatever its factory reads, imported as a script, named as a file.

A3. A model overriding `__call__` (`def __call__(self, x): return self.forward(x)`) runs no
module hook: `dlperf analyze` counted params 0, MACs 0, FLOPs 0, exit 0, and listed the whole
model under "modules that never ran". Work no module claims during the forward (and, with
--train, its backward) is the model's own row, as the work of a forward that calls no layer
is, and layers it calls get their own rows: the counts are those of the same model without
the override.

A4. A factory that reads a weight's value (`fc.weight.abs().max().item()`, torch.ao's
quantize_dynamic) failed analyze and predict with "factory ... failed: RuntimeError:
Tensor.item() cannot be called on meta tensors", while run and export built it. analyze builds
such a model on real CPU tensors (seeded, the global generator left as it was), then counts
it on the meta device as any other. A dynamically quantized model, which has no meta kernels
(and no parameters: its weights are packed), is refused in one line naming the module and
the fix, not blamed on the input.

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
import torch

from dlperf.analytic import counting
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]
INPUT = ("--input", "1,8,8")

CALLS = """
import torch.nn as nn, torch.nn.functional as F

class Plain(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.l1 = nn.Linear(in_channels * 64, 32); self.l2 = nn.Linear(32, num_classes)
    def forward(self, x):
        h = F.relu(F.linear(x.flatten(1), self.l1.weight, self.l1.bias))
        return F.linear(h, self.l2.weight, self.l2.bias)

class CallOverride(Plain):
    \"\"\"__call__ overridden: module hooks never fire\"\"\"
    def __call__(self, x): return self.forward(x)

class Layers(Plain):
    def forward(self, x): return self.l2(F.relu(self.l1(x.flatten(1))))

class LayersCallOverride(Layers):
    def __call__(self, x): return self.forward(x)
"""

# The tester's readsval.py, and mm.py's dyn_quant and HalfQuant (/tmp/bk14/A/new/w/m/)
READS = """
import torch, torch.nn as nn, torch.nn.functional as F

def Net(num_classes=10, in_channels=1):
    fc = nn.Linear(in_channels * 64, num_classes)
    with torch.no_grad():  # homework: rescale the init so the largest weight is 0.1
        fc.weight.mul_(0.1 / fc.weight.abs().max().item())
    return nn.Sequential(nn.Flatten(), fc)

def dyn_quant(num_classes=10, in_channels=1):
    m = nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, num_classes)).eval()
    return torch.ao.quantization.quantize_dynamic(m, {nn.Linear}, dtype=torch.qint8)

class HalfQuant(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.c = nn.Conv2d(in_channels, 4, 3, padding=1)
        self.q = torch.ao.quantization.quantize_dynamic(
            nn.Sequential(nn.Linear(4 * 64, num_classes)), {nn.Linear})
    def forward(self, x): return self.q(F.relu(self.c(x)).flatten(1))
"""

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


# --- A3: a model overriding __call__ -----------------------------------------------------------


def test_a_model_overriding_call_is_counted_as_the_same_model_without_the_override(
    cli: Cli, tmp_path: Path
) -> None:
    """Before: params 0, MACs 0, FLOPs 0, and (model) CallOverride 2,410 under 'never ran'."""
    path = write(tmp_path, "calls.py", CALLS)
    doc = counted(cli, f"{path}:CallOverride")
    assert doc["totals"]["params"] == 64 * 32 + 32 + 32 * 10 + 10 == 2410
    assert doc["totals"]["macs"] == 64 * 32 + 32 * 10 == 2368
    assert doc["not_run"] == [] and doc["totals"]["params_not_run"] == 0
    plain = counted(cli, f"{path}:Plain")
    assert rows(doc) == rows(plain) and rows(doc)[0][0] == "(model)"
    assert doc["totals"] == plain["totals"]


def test_layers_under_an_overridden_call_keep_their_rows_forward_and_backward(
    cli: Cli, tmp_path: Path
) -> None:
    """The layers it calls are counted in their own rows, each with its own work (not the
    model's), and the backward of a training step is counted too (before: 0)."""
    path = write(tmp_path, "calls.py", CALLS)
    for extra in ((), ("--train",)):
        doc = counted(cli, f"{path}:LayersCallOverride", *extra)
        plain = counted(cli, f"{path}:Layers", *extra)
        assert [r[0] for r in rows(doc)] == ["l1", "(model)", "l2"]  # relu is the model's
        assert rows(doc) == rows(plain)
        assert doc["totals"]["macs"] == 2368 and doc["totals"]["params"] == 2410
        assert doc["totals"] == plain["totals"]
    # the backward of a model calling no layer at all: weight and input gradients of both
    # products, as the model without the override counts them
    trained = counted(cli, f"{path}:CallOverride", "--train")
    plain = counted(cli, f"{path}:Plain", "--train")
    assert rows(trained) == rows(plain)
    # l1's weight gradient (its input needs none), l2's weight and input gradients
    assert trained["totals"]["backward_macs"] == 64 * 32 + 32 * 10 + 32 * 10
    assert trained["totals"]["backward_flops"] == plain["totals"]["backward_flops"] > 0


def test_predict_times_a_model_overriding_call(cli: Cli, tmp_path: Path) -> None:
    path = write(tmp_path, "calls.py", CALLS)
    result = cli("predict", f"{path}:CallOverride", *INPUT, "--device", "K80", "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["flops_over_peak"]["counted_macs_per_image"] == 2368


# --- A4: a factory that reads weight values ----------------------------------------------------


def test_a_factory_reading_a_weight_value_is_counted(cli: Cli, tmp_path: Path) -> None:
    """Before: 'factory readsval.py:Net failed: RuntimeError: Tensor.item() cannot be called
    on meta tensors', exit 2, from analyze and predict."""
    path = write(tmp_path, "readsval.py", READS)
    doc = counted(cli, f"{path}:Net")
    assert doc["totals"]["params"] == 64 * 10 + 10 and doc["totals"]["macs"] == 640
    assert "tensors" not in doc["conventions"]  # counted on the meta device, as any model
    predicted = cli("predict", f"{path}:Net", *INPUT, "--device", "K80", "--json")
    assert predicted.code == 0, predicted.err
    assert json.loads(predicted.out)["flops_over_peak"]["counted_macs_per_image"] == 640


def test_building_on_real_tensors_leaves_the_global_generator_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "readsval.py"
    path.write_text(READS)
    state = torch.random.get_rng_state()
    model, *_ = counting.build_model(f"{path}:Net", [1, 8, 8])
    assert torch.equal(torch.random.get_rng_state(), state)
    assert sum(p.numel() for p in model.parameters()) == 650
    # the factory's own arithmetic ran on values: its largest weight is 0.1
    assert abs(float(model[1].weight.detach().abs().max()) - 0.1) < 1e-6
    # seeded: the same weights each time
    again, *_ = counting.build_model(f"{path}:Net", [1, 8, 8])
    assert torch.equal(model[1].weight, again[1].weight)


@pytest.mark.parametrize(("factory", "module"), [("dyn_quant", "1"), ("HalfQuant", "q.0")])
@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")  # torch.ao's own
def test_a_quantized_model_is_one_line_naming_the_module_and_the_fix(
    cli: Cli, tmp_path: Path, factory: str, module: str
) -> None:
    """Before: the meta-tensor line blaming the factory; once built, 'the model rejects input
    [1, 1, 8, 8]: NotImplementedError: quantized::linear_dynamic ...', blaming the input."""
    path = write(tmp_path, "readsval.py", READS)
    for command, device in (("analyze", []), ("predict", ["--device", "K80"])):
        result = cli(command, f"{path}:{factory}", *INPUT, *device)
        one_line(result, 2, f"{module} (", "quantized", command, "before quantize")
        assert "rejects input" not in result.err


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
            result, 2, f"model file {_shown(args, tmp_path, path)} parses the command line while",
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


def _shown(args: tuple[str, ...], tmp_path: Path, path: str) -> str:
    """How a command names the model file `path` (relative to tmp_path) it was given: run by
    its absolute path, as model.name is stored (break-it 16); a MODEL argument as typed."""
    return f"{tmp_path}/{path}" if args[0] == "run" else path


def test_a_notebook_as_model_file_is_one_line_with_nbconvert(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    """Before: "unknown model 'hw.ipynb:Net' (see `dlperf models`)"."""
    cell = {"cell_type": "code", "metadata": {}, "source": NET, "outputs": []}
    (tmp_path / "m").mkdir()
    write(tmp_path, "m/hw.ipynb", json.dumps({"cells": [cell], "nbformat": 4}))
    for args in _commands("m/hw.ipynb:Net", write(tmp_path, "exp.toml", EXP)):
        result = cli(*args)
        shown = _shown(args, tmp_path, "m/hw.ipynb")
        one_line(
            result, 2, f"model file {shown} is not a Python (.py) file",
            f"jupyter nbconvert --to script {shown}",
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
        shown = _shown(args, tmp_path, "pkgdir")
        one_line(result, 2, f"model file {shown} is a directory", f"{shown}/__init__.py:Net")
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
