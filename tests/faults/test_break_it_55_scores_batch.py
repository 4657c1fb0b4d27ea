"""Break-it round 55 (round 54's Left): scores whose first dimension is not the batch.

A classifier returning its scores as [classes, batch] (y.T) was exported with exit 0 at a
dynamic batch, where they are [10, 2] for a batch of 2; `dlperf infer` then ranked each
image's score among the "classes" of a row per class, and at batch 1 export refused [10, 1]
as "one score per image", which it is not. `export` now checks the scores' first dimension is
the batch it ran, and `infer` and `serve` hold an ONNX file made elsewhere to the same rule:
by the shapes the graph declares (a fixed number of rows for a named, dynamic batch too) or
by one run on zeros.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

from dlperf.deploy import meta
from dlperf.deploy.served_model import ServedModel
from dlperf.errors import UserError
from tests.cli.test_app import one_line_error
from tests.conftest import CliResult
from tests.deploy.test_server import OPSET
from tests.faults.test_break_it_9_deploy import no_files

MODELS = """
import torch.nn as nn

class Transposed(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        return self.fc(x.flatten(1)).T

def transposed(num_classes=10): return Transposed(num_classes)
"""

SAID = "an exported classifier's scores have shape [batch, classes], the batch first"


@pytest.mark.parametrize(
    ("flags", "shape"),
    [
        ((), "[10, 1] for a batch of 1 image;"),
        (("--dynamic-batch",), "[10, 2] for a batch of 2 images;"),
    ],
)
def test_export_refuses_scores_whose_first_dimension_is_not_the_batch(
    flags: tuple[str, ...], shape: str, cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    (tmp_path / "m.py").write_text(MODELS)
    r = cli("export", "m.py:transposed", "--input", "1,8,8", "--out", "s.onnx", *flags)
    # before: --dynamic-batch exit 0 (a file infer ranked by column); batch 1 "one score per image"
    one_line_error(r, f"model 'm.py:transposed' returns in eval mode scores of shape {shape}")
    assert SAID in r.err and "y.transpose(0, 1)" in r.err
    no_files(tmp_path / "s.onnx")


def _transposed(path: Path, batch: str | int, declared: bool) -> Path:
    """input [batch, 1, 8, 8] -> Flatten -> Gemm -> Transpose: scores [3, batch], declared as
    such, or reshaped to [3, -1] by a shape ONNX Runtime cannot tell before it runs (a
    Compress), so that only a run tells it; with dlperf's metadata."""
    weight = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    inits = [
        numpy_helper.from_array(weight, "W"),
        numpy_helper.from_array(np.zeros(3, np.float32), "B"),
    ]
    nodes = [
        helper.make_node("Flatten", ["input"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "W", "B"], ["scores"]),
        helper.make_node("Transpose", ["scores"], ["logits" if declared else "t"], perm=[1, 0]),
    ]
    if not declared:
        inits.append(numpy_helper.from_array(np.array([3, -1], np.int64), "C"))
        inits.append(numpy_helper.from_array(np.array(-2, np.int64), "low"))
        nodes.append(helper.make_node("Greater", ["C", "low"], ["keep"]))
        nodes.append(helper.make_node("Compress", ["C", "keep"], ["shape"], axis=0))
        nodes.append(helper.make_node("Reshape", ["t", "shape"], ["logits"]))
    graph = helper.make_graph(
        nodes,
        "m",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 1, 8, 8])],
        [
            helper.make_tensor_value_info(
                "logits", TensorProto.FLOAT, [3, batch] if declared else None
            )
        ],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=OPSET, ir_version=10), path)
    pre = meta.Preprocess((8, 8), 1, (0.5,), (0.5,))
    meta.save(path, meta.ModelMeta("classification", "m", "input", (1, 8, 8), pre))
    return path


FILES = [
    ("N", True, "[3, N] for a batch of N images"),
    (1, True, "[3, 1] for a batch of 1 image"),
    ("N", False, "[3, 1] for a batch of 1 image"),
]


@pytest.mark.parametrize(("batch", "declared", "said"), FILES)
def test_infer_and_serve_refuse_a_file_whose_scores_are_classes_by_batch(
    batch: str | int, declared: bool, said: str, cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    path = _transposed(tmp_path / "m.onnx", batch, declared)
    Image.new("L", (8, 8), 200).save(tmp_path / "a.png")
    r = cli("infer", str(path), str(tmp_path / "a.png"))
    # before: exit 0, an image's "top classes" read down a column of one class per row
    one_line_error(r, f"{path} gives scores of shape {said};")
    assert r.out == ""
    with pytest.raises(UserError) as refused:
        ServedModel(path, threads=1)  # what `dlperf serve` loads
    assert refused.value.message.startswith(f"{path} gives scores of shape {said};")


def test_scores_of_batch_by_classes_still_pass(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    (tmp_path / "m.py").write_text(MODELS.replace(".T\n", "\n"))
    r = cli("export", "m.py:transposed", "--input", "1,8,8", "--out", "s.onnx", "--dynamic-batch")
    assert r.code == 0, r.err
    Image.new("L", (8, 8), 200).save(tmp_path / "a.png")
    r = cli("infer", "s.onnx", str(tmp_path / "a.png"))
    assert r.code == 0, r.err
