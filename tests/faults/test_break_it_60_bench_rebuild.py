"""Break-it round 60 (T1 cause 2), fixer G5: `infer bench` and a model whose exporter folded
every parameter.

Before: a model file's network with a complex parameter (`w`, cfloat), exported a moment
before from the unchanged file, was not raced: the dynamo exporter makes `w` real constants
(`val_18`, `val_19`), so no initializer has its name, and the check before a race (each torch
parameter's shape against the initializer of its name) refused it with "cannot tell that
'...' built with no model.kwargs is the network of c.onnx: none of its 1 parameters and
buffers is named as an initializer in the file" and the advice "export it again from its
model file as it is now", which gave the same warning after each new export.

Now: where no name is in common, the exported network (a registry export, which holds the
factory's seeded weights, drawn again by the rebuild) is compared by its outputs with the
file's on one seeded input: the same answers race it; other answers (the model file edited
since export) are refused as before, saying so. A run's export, whose trained weights the
rebuild cannot draw, is still refused, with the advice to bench it with the run's store
instead of a new export (which folds the same tensors).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import onnx
from onnx import TensorProto, helper, numpy_helper

from dlperf.deploy import meta
from dlperf.deploy.export import from_registry
from dlperf.parsing import absolute_model_name
from tests.conftest import CliResult
from tests.deploy.test_server import OPSET

Cli = Callable[..., CliResult]
COMPLEX = """
import torch
from torch import nn


class M(nn.Module):
    def __init__(self, num_classes=3):
        super().__init__()
        self.w = nn.Parameter(torch.randn(64, num_classes, dtype=torch.cfloat) * SCALE)

    def forward(self, x):
        return (x.flatten(1).to(torch.cfloat) @ self.w).real


def make(num_classes=3):
    return M(num_classes)
"""


def _model_file(tmp_path: Path, scale: float) -> str:
    (tmp_path / "complexp.py").write_text(COMPLEX.replace("SCALE", str(scale)))
    return absolute_model_name(f"{tmp_path / 'complexp.py'}:make")


def _exported(tmp_path: Path, run_id: int | None = None) -> Path:
    """complexp.py:make as the dynamo exporter writes it: its seeded `w`'s real part (all that
    a real input reaches) in a constant of another name, plus export's metadata."""
    spec = _model_file(tmp_path, 0.1)
    w = from_registry(spec, (1, 8, 8), 3, {}).model.state_dict()["w"]
    graph = helper.make_graph(
        [
            helper.make_node("Flatten", ["input"], ["flat"], axis=1),
            helper.make_node("MatMul", ["flat", "val_18"], ["logits"]),
        ],
        "complexp",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(w.real.numpy(), "val_18")],
    )
    path = tmp_path / "c.onnx"
    onnx.save(helper.make_model(graph, opset_imports=OPSET, ir_version=10), path)
    pre = meta.Preprocess((8, 8), 1, (0.5,), (0.5,))
    kept = meta.ModelMeta("classification", "complexp.py:make", "input", (1, 8, 8), pre)
    kept.model_kwargs, kept.model_path, kept.run_id = {}, spec, run_id
    meta.save(path, kept)
    return path


def _bench(cli: Cli, path: Path) -> CliResult:
    return cli("infer", "bench", str(path), "--batch", "1", "--threads", "1", "--repeats", "2",
               "--json")  # fmt: skip


def test_the_unchanged_model_file_is_raced(cli: Cli, tmp_path: Path) -> None:
    result = _bench(cli, _exported(tmp_path))
    assert (result.code, result.err) == (0, "")
    contenders = [row["contender"] for row in json.loads(result.out)["rows"]]
    assert contenders == ["onnxruntime", "torch eager", "torch channels_last"]


def test_a_model_file_edited_since_export_is_not_raced(cli: Cli, tmp_path: Path) -> None:
    path = _exported(tmp_path)
    _model_file(tmp_path, 0.2)  # other weights: the same names, the same shapes
    result = _bench(cli, path)
    assert result.code == 0
    message, hint = result.err.split(" (export it again")
    assert message.startswith(
        "warning: cannot rebuild the PyTorch model ('complexp.py:make' built with no "
        f"model.kwargs is not the network of {path}: none of its 1 parameters and buffers is "
        "named as an initializer in the file, and on the same input its outputs differ from "
        "the file's by up to "
    )
    assert hint == " from its model file as it is now)); timing ONNX Runtime only\n"
    assert [row["contender"] for row in json.loads(result.out)["rows"]] == ["onnxruntime"]


def test_a_runs_export_is_not_told_to_export_again(cli: Cli, tmp_path: Path) -> None:
    # Run 7's trained weights are not the factory's seeded ones: nothing to compare by output.
    path = _exported(tmp_path, run_id=7)
    result = _bench(cli, path)
    assert result.code == 0
    assert result.err.splitlines()[-1] == (
        "warning: cannot rebuild the PyTorch model (cannot tell that 'complexp.py:make' built "
        f"with no model.kwargs is the network of {path}: none of its 1 parameters and buffers "
        "is named as an initializer in the file (bench it with the store that holds run 7)); "
        "timing ONNX Runtime only"
    )
