"""Break-it round 38 (T1): deployment.

C4: `infer bench MODEL.onnx --torch OTHER` raced a wholly different network without a word when
none of OTHER's parameter names is an initializer of the file (resnet20's `conv1.weight`
against smallcnn's `0.weight`): the shape check compared nothing and called them alike.
C5: a running `serve` read its weights through ONNX Runtime's memory map of MODEL.onnx.data:
the file written in place (cp, an editor) changed every answer, and emptied, it killed the
server with SIGBUS. The session now holds the weights read at start.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dlperf.deploy import bench, runtime
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.deploy.test_bench import holding_tensors_of
from tests.deploy.test_server import OPSET, tiny_classifier


def _no_store() -> RunStore:
    raise AssertionError("a registry name needs no store")


def test_c4_a_network_with_no_name_in_the_file_is_not_raced(tmp_path: Path) -> None:
    # The tiny classifier's initializers are W and B: none of smallcnn's names.
    path = tiny_classifier(tmp_path / "tiny.onnx")
    with pytest.raises(UserError) as refused:
        bench.pytorch_contender(path, "smallcnn", _no_store)
    assert refused.value.message == (
        f"cannot tell that 'smallcnn' built with no model.kwargs is the network of {path}: "
        "none of its 8 parameters and buffers is named as an initializer in the file"
    )
    assert refused.value.hint == "race the model it was exported from: --torch tiny"

    # The same file holding smallcnn's tensors by name (as its export would): raced.
    holding_tensors_of(path, "smallcnn", (3, 8, 8), 3)
    assert bench.pytorch_contender(path, "smallcnn", _no_store) is not None


def _adder(path: Path) -> Path:
    """y = x + W, W [64] in MODEL.onnx.data: an Add reads the weights where they lie (a MatMul
    packs them into its own copy), so a mapped file shows through."""
    weight = np.arange(64, dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "W"], ["y"])],
        "adder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        [numpy_helper.from_array(weight, "W")],
    )
    model = helper.make_model(graph, opset_imports=OPSET, ir_version=10)
    onnx.save(
        model, str(path), save_as_external_data=True, location=f"{path.name}.data", size_threshold=0
    )
    return path


def test_c5_weights_written_in_place_after_start_change_nothing(tmp_path: Path) -> None:
    path = _adder(tmp_path / "m.onnx")
    session = runtime.session(path, threads=1)
    x = np.zeros((1, 64), np.float32)
    before = session.run(None, {"x": x})[0]
    data = tmp_path / "m.onnx.data"
    with data.open("r+b") as f:  # cp's way: the same inode, other bytes
        f.write(bytes(255 - b for b in data.read_bytes()))
    assert np.array_equal(session.run(None, {"x": x})[0], before)
    data.write_bytes(b"")  # emptied in place: a mapped file faulted (SIGBUS)
    assert np.array_equal(session.run(None, {"x": x})[0], before)
