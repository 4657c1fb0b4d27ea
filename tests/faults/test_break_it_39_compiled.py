"""Break-it round 39, fixer F2: models whose factory returns `torch.compile(module)`.

T1 C2: `dlperf export --dynamic-batch` of such a model (a run's or a model file's) failed in
both exporters, in torch's words (the dynamo exporter: "Detected mismatch between the structure
of `inputs` and `dynamic_shapes`"; the TorchScript one: "Detected that you are using FX to
torch.jit.trace a dynamo-optimized function"), exit 2, though the same network uncompiled
exports; its fixed-batch export worked, with initializers named `_orig_mod.1.weight`. Export
now exports the module inside (`_orig_mod`): the file the module uncompiled gives, with either
batch, and `infer bench` races that module as "torch eager".
T1 C3: `dlperf analyze` of it printed torch's raw UserWarning about global module hooks (the
counting's own, which the user never registered), naming contextlib.py; it now counts the
module inside: no warning, its rows named as uncompiled (`0`, `1`, not `_orig_mod.0`).
`dlperf infer bench` of a fixed-batch file built (and compiled) the PyTorch model before its
batch check, so torch's inductor log line came before the one error line; the file's batch is
now checked first, and nothing is built.

The model files compile with backend="eager": an `OptimizedModule` all the same, without
inductor's C++ build.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper
from torch import nn

import dlperf
from tests.conftest import CliResult

MODEL = """
import torch
from torch import nn


def make(num_classes=10, in_channels=1):
    with open({builds!r}, "a") as f:  # each build, for the tests to count
        f.write("built\\n")
    plain = nn.Sequential(nn.Flatten(), nn.Linear(64 * in_channels, num_classes))
    return {wrap}
"""

Cli = Callable[..., CliResult]


def _files(root: Path) -> tuple[str, str, Path]:
    """compiled.py:make and plain.py:make (the same network, the same weights: export seeds
    the factory), and the file each build appends a line to."""
    builds = root / "builds.txt"
    for name, wrap in (("compiled", 'torch.compile(plain, backend="eager")'), ("plain", "plain")):
        (root / f"{name}.py").write_text(MODEL.format(builds=str(builds), wrap=wrap))
    return "compiled.py:make", "plain.py:make", builds


def _graph(path: Path) -> tuple[list[str], dict[str, np.ndarray], list[list[int | str]]]:
    """What makes two exports the same network: the operators, the initializers (names and
    values), and the input's and output's dimensions (a name where dynamic)."""
    proto = onnx.load(str(path))
    ops = [node.op_type for node in proto.graph.node]
    weights = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    dims = [
        [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in (*proto.graph.input, *proto.graph.output)
    ]
    return ops, weights, dims


def _same_graph(a: Path, b: Path) -> None:
    ops_a, weights_a, dims_a = _graph(a)
    ops_b, weights_b, dims_b = _graph(b)
    assert (ops_a, dims_a) == (ops_b, dims_b)
    assert weights_a.keys() == weights_b.keys()
    assert all(np.array_equal(weights_a[k], weights_b[k]) for k in weights_a)


@pytest.mark.parametrize("dynamic", [True, False], ids=["dynamic-batch", "fixed-batch"])
def test_c2_a_compiled_model_file_exports_as_the_module_inside(
    cli: Cli, tmp_path: Path, dynamic: bool
) -> None:
    compiled, plain, _ = _files(tmp_path)
    flags = ["--input", "1,8,8", *(["--dynamic-batch"] if dynamic else [])]
    result = cli("export", compiled, "--out", "compiled.onnx", *flags)
    assert result.code == 0, result.err
    assert "error" not in result.err and "falling back" not in result.err, result.err
    assert cli("export", plain, "--out", "plain.onnx", *flags).code == 0
    _same_graph(tmp_path / "compiled.onnx", tmp_path / "plain.onnx")
    names = set(_graph(tmp_path / "compiled.onnx")[1])
    assert {"1.weight", "1.bias"} <= names, names  # not _orig_mod.1.weight


@pytest.mark.faults  # a run, then its export: about 10 s on a busy machine
def test_c2_a_compiled_runs_export_with_a_dynamic_batch(cli: Cli, tmp_path: Path) -> None:
    """The tester's case: run 1 trained from the compiled file, exported with --dynamic-batch."""
    compiled, _, _ = _files(tmp_path)
    exp = tmp_path / "exp.toml"
    exp.write_text(
        f'[model]\nname = "{compiled}"\n[data]\nname = "digits"\nlimit = 64\n'
        "[train]\nepochs = 1\nbatch_size = 32\nlr = 0.05\n[run]\nthreads = 1\nwarmup_steps = 1\n"
    )
    assert cli("run", str(exp)).code == 0
    result = cli("export", "1", "--out", "dyn.onnx", "--dynamic-batch", "--json")
    assert result.code == 0, result.err
    assert "error" not in result.err and "falling back" not in result.err, result.err
    _, weights, dims = _graph(tmp_path / "dyn.onnx")
    assert {"1.weight", "1.bias"} <= weights.keys(), weights.keys()
    assert isinstance(dims[0][0], str), dims  # the batch is symbolic


def test_c3_analyze_counts_a_compiled_model_without_torchs_hook_warning(
    cli: Cli, tmp_path: Path
) -> None:
    compiled, plain, _ = _files(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # seen again, though shown earlier in this process
        counted = cli("analyze", compiled, "--input", "1,8,8")
    assert counted.code == 0, counted.err
    hooks = [str(w.message) for w in caught if "global hooks" in str(w.message)]
    assert hooks == []
    assert "global hooks" not in counted.err
    # The module inside, counted as uncompiled: the same rows, named as its own
    expected = cli("analyze", plain, "--input", "1,8,8")
    assert counted.out.replace(compiled, plain) == expected.out
    assert "_orig_mod" not in counted.out


def test_c3_the_api_counts_a_compiled_module_without_torchs_hook_warning() -> None:
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        counted = dlperf.analyze(torch.compile(net, backend="eager"), input_size=(1, 8, 8))
    assert [str(w.message) for w in caught if "global hooks" in str(w.message)] == []
    assert counted.layers == dlperf.analyze(net, input_size=(1, 8, 8)).layers


def test_c3_infer_bench_refuses_a_fixed_batch_before_building_the_model(
    cli: Cli, tmp_path: Path
) -> None:
    compiled, _, builds = _files(tmp_path)
    assert cli("export", compiled, "--input", "1,8,8", "--out", "c.onnx").code == 0
    builds.unlink()
    result = cli("infer", "bench", "c.onnx", "--batch", "1,8")
    assert result.code == 2
    assert result.err.splitlines() == [
        "error: c.onnx was exported with a fixed batch of 1 and cannot be measured at batch 8 "
        "(measure it with --batch 1, or export it again with --dynamic-batch to measure other "
        "batch sizes)"
    ], result.err
    assert not builds.exists()  # neither built nor compiled: the file's batch came first
