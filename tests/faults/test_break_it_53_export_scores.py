"""Break-it round 53, fixer G3: a classifier whose scores are not [batch, classes].

T2 C3: `dlperf export` took a model whose scores in eval mode are [batch, 10, 1] or [batch]
without a word (check_scores refused a 0-d output only), exit 0; `dlperf infer` on the file
then failed in `runtime.topk` (TypeError: only 0-dimensional arrays can be converted to Python
scalars; IndexError: too many indices for array), a traceback, exit 1, and `serve`'s /predict
answered 500 with the traceback on its stderr. Now export refuses such a model in one line,
exit 2, naming the shape and the fix (flatten them; a single logit as two classes' scores), a
[batch, 1] one too (a softmax over one score is 1.0 for every image); and `infer` and `serve`
given such an ONNX file made elsewhere refuse it in one line before any image: by the shape the
graph declares, or, where ONNX Runtime can tell none, by one run of the model on zeros.
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

class Lin(nn.Module):
    def __init__(self, k, shape):
        super().__init__()
        self.fc = nn.Linear(64, k)
        self.shape = shape

    def forward(self, x):
        y = self.fc(x.flatten(1))
        return y.unsqueeze(-1) if self.shape == "3d" else y.squeeze(1) if self.shape == "1d" else y

def out3d(num_classes=10): return Lin(num_classes, "3d")
def rank1(num_classes=10): return Lin(1, "1d")
def one_column(num_classes=10): return Lin(1, "2d")
"""


@pytest.mark.parametrize(
    ("name", "said", "fix"),
    [
        ("out3d", "scores of shape [1, 10, 1]; an exported classifier", "y.flatten(1)"),
        ("rank1", "scores of shape [1]; an exported classifier", "torch.zeros_like(y)"),
        ("one_column", "scores of shape [1, 1]: one score per image", "torch.zeros_like(y)"),
    ],
)
def test_c3_export_refuses_scores_that_are_not_batch_by_classes(
    name: str, said: str, fix: str, cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    (tmp_path / "m.py").write_text(MODELS)
    r = cli("export", f"m.py:{name}", "--input", "1,8,8", "--out", "s.onnx")
    # before: exit 0, a file that infer failed on with a traceback
    one_line_error(r, f"model 'm.py:{name}' returns in eval mode {said}")
    assert "[batch, classes]" in r.err or "two or more" in r.err
    assert fix in r.err
    no_files(tmp_path / "s.onnx")


def _classifier(path: Path, tail: str) -> Path:
    """input [N, 1, 8, 8] -> Flatten -> Gemm -> scores, then `tail`: "3d" [N, 3, 1], "1d" [N]
    (one class, squeezed), "unknown" [1, 3, 1] by a Reshape whose shape ONNX Runtime cannot
    tell before it runs (a Compress); with dlperf's metadata, as an ONNX file made elsewhere."""
    classes = 1 if tail == "1d" else 3
    weight = np.random.default_rng(0).normal(size=(64, classes)).astype(np.float32)
    inits = [
        numpy_helper.from_array(weight, "W"),
        numpy_helper.from_array(np.zeros(classes, np.float32), "B"),
    ]
    nodes = [
        helper.make_node("Flatten", ["input"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "W", "B"], ["scores"]),
    ]
    if tail == "3d":
        inits.append(numpy_helper.from_array(np.array([2], np.int64), "axes"))
        nodes.append(helper.make_node("Unsqueeze", ["scores", "axes"], ["logits"]))
    elif tail == "1d":
        inits.append(numpy_helper.from_array(np.array([1], np.int64), "axes"))
        nodes.append(helper.make_node("Squeeze", ["scores", "axes"], ["logits"]))
    else:
        inits.append(numpy_helper.from_array(np.array([1, classes, 1], np.int64), "C"))
        inits.append(numpy_helper.from_array(np.array(0, np.int64), "zero"))
        nodes.append(helper.make_node("Greater", ["C", "zero"], ["keep"]))
        nodes.append(helper.make_node("Compress", ["C", "keep"], ["shape"], axis=0))
        nodes.append(helper.make_node("Reshape", ["scores", "shape"], ["logits"]))
    graph = helper.make_graph(
        nodes,
        "m",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=OPSET, ir_version=10), path)
    pre = meta.Preprocess((8, 8), 1, (0.5,), (0.5,))
    meta.save(path, meta.ModelMeta("classification", "m", "input", (1, 8, 8), pre))
    return path


SHAPES = [("3d", "[N, 3, 1]"), ("1d", "[N]"), ("unknown", "[1, 3, 1]")]


@pytest.mark.parametrize(("tail", "shape"), SHAPES)
def test_c3_infer_refuses_a_file_whose_scores_are_not_batch_by_classes(
    tail: str, shape: str, cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    path = _classifier(tmp_path / "m.onnx", tail)
    Image.new("L", (8, 8), 200).save(tmp_path / "a.png")
    r = cli("infer", str(path), str(tmp_path / "a.png"))
    # before: TypeError / IndexError in runtime.topk, a traceback, exit 1
    one_line_error(r, f"{path} gives scores of shape {shape}")
    assert ("torch.zeros_like(y)" if tail == "1d" else "y.flatten(1)") in r.err
    assert r.out == ""


@pytest.mark.parametrize(("tail", "shape"), SHAPES)
def test_c3_serve_refuses_at_start_a_file_whose_scores_are_not_batch_by_classes(
    tail: str, shape: str, tmp_path: Path
) -> None:
    path = _classifier(tmp_path / "m.onnx", tail)
    with pytest.raises(UserError) as refused:
        ServedModel(path, threads=1)  # what `dlperf serve` loads; before: /predict 500
    assert refused.value.message.startswith(f"{path} gives scores of shape {shape}")
