"""Break-it round 38 (T1): deployment.

C4: `infer bench MODEL.onnx --torch OTHER` raced a wholly different network without a word when
none of OTHER's parameter names is an initializer of the file (resnet20's `conv1.weight`
against smallcnn's `0.weight`): the shape check compared nothing and called them alike.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf.deploy import bench
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.deploy.test_bench import holding_tensors_of
from tests.deploy.test_server import tiny_classifier


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
