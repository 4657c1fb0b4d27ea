"""ONNX Runtime's own log lines (coloured, written by its C++ logger straight to the stderr
file descriptor) never precede or replace dlperf's: `dlperf infer` as a real process on ONNX
files that ONNX Runtime loads with a warning, and one that fails as it runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.deploy.test_server import LABELS, OPSET, png, tiny_classifier


def dlperf(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DLPERF_DB": f"sqlite:///{root / 'dlperf.db'}", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "dlperf", *args],
        cwd=root, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def with_meta(model: onnx.ModelProto, path: Path, like: Path) -> Path:
    """Save `model` at `path` with the dlperf metadata of the exported model `like`."""
    onnx.save(model, path)
    shutil.copy(f"{like}.json", f"{path}.json")
    return path


def failing_at_run(root: Path, like: Path) -> Path:
    """The classifier's logits plus the sum of a 7-element constant reshaped to 2 x 2: ONNX
    Runtime loads it (warning as its constant folding fails) and fails when it runs."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.normal(size=(192, len(LABELS))).astype(np.float32), "W"),
        numpy_helper.from_array(np.ones(7, np.float32), "seven"),
        numpy_helper.from_array(np.array([2, 2], np.int64), "shape"),
    ]
    graph = helper.make_graph(
        [
            helper.make_node("Reshape", ["seven", "shape"], ["square"]),
            helper.make_node("ReduceSum", ["square"], ["total"], keepdims=0),
            helper.make_node("Flatten", ["input"], ["flat"], axis=1),
            helper.make_node("MatMul", ["flat", "W"], ["scores"]),
            helper.make_node("Add", ["scores", "total"], ["logits"]),
        ],
        "broken",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", len(LABELS)])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=OPSET, ir_version=10)
    return with_meta(model, root / "broken.onnx", like)


def test_a_model_that_fails_as_it_runs_is_one_line_of_dlperf(tmp_path: Path) -> None:
    like = tiny_classifier(tmp_path / "tiny.onnx")
    (tmp_path / "x.png").write_bytes(png())
    result = dlperf(tmp_path, "infer", str(failing_at_run(tmp_path, like)), "x.png")
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr
    assert "ONNX Runtime cannot run" in result.stderr and "Reshape" in result.stderr
    assert result.stdout == ""


def test_onnx_runtimes_warnings_stay_out_of_the_output(tmp_path: Path) -> None:
    like = tiny_classifier(tmp_path / "tiny.onnx")
    (tmp_path / "x.png").write_bytes(png())
    # An output declared 5 wide that is 3 wide: ONNX Runtime warns and runs it all the same.
    model = onnx.load(like)
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 5
    result = dlperf(tmp_path, "infer", str(with_meta(model, tmp_path / "wide.onnx", like)), "x.png")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "cat" in result.stdout
