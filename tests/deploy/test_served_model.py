"""dlperf.deploy.served_model on its own: tiny ONNX graphs (test_server's helpers) behind one
ServedModel, called directly: no server, no batcher."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

from dlperf.deploy import meta
from dlperf.deploy.protocol import DATATYPES, InferRequest
from dlperf.deploy.served_model import ServedModel
from dlperf.errors import UserError
from tests.deploy.test_kserve import mixed_model
from tests.deploy.test_server import OPSET, plain_model, tiny_classifier, tiny_detector
from tests.faults.test_break_it_35_serve import REQUESTS, UNSERVABLE, flattening


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("served")
    return {
        "plain": plain_model(root / "plain.onnx"),
        "fixed": plain_model(root / "fixed.onnx", batch=2),
        "tiny": tiny_classifier(root / "tiny.onnx"),
        "det": tiny_detector(root / "det.onnx"),
    }


@pytest.fixture(scope="module")
def plain(paths: dict[str, Path]) -> ServedModel:
    return ServedModel(paths["plain"], threads=1)


def request(**doc: Any) -> InferRequest:
    return InferRequest.model_validate(doc)


def x_input(rows: list[list[float]], **extra: Any) -> dict[str, Any]:
    return {"name": "x", "shape": [len(rows), 4], "datatype": "FP32", "data": rows, **extra}


def test_a_plain_onnx_file_batches_but_has_no_predict(plain: ServedModel) -> None:
    assert (plain.name, plain.meta, plain.task) == ("plain", None, None)
    assert plain.batchable and plain.output_names == ["y", "n"]
    assert plain.note == "requests are batched along the dynamic batch dimension"
    with pytest.raises(
        UserError, match=r"^/predict needs the dlperf metadata .* /v2/models/plain/infer"
    ):
        plain.described("/predict")


def test_batching_depends_on_the_task_and_the_first_dimension(paths: dict[str, Path]) -> None:
    fixed = ServedModel(paths["fixed"], threads=1)  # someone else's file: served one at a time
    assert not fixed.batchable and "no dynamic batch dimension" in fixed.note
    det = ServedModel(paths["det"], threads=1)
    assert det.task == "detection" and not det.batchable
    assert det.note == "detection models run one image at a time"
    assert ServedModel(paths["tiny"], threads=1).described("/predict").labels == [
        "cat",
        "dog",
        "bird",
    ]


def test_dlperf_metadata_with_a_fixed_batch_over_one_is_refused(tmp_path: Path) -> None:
    path = plain_model(tmp_path / "two.onnx", batch=2)
    pre = meta.Preprocess((2, 2), 1, (0.0,), (1.0,))
    meta.save(path, meta.ModelMeta("classification", "m", "x", (4,), pre))
    with pytest.raises(UserError, match=r"fixed batch size of 2.*--dynamic-batch"):
        ServedModel(path, threads=1)


def test_run_splits_a_batch_back_into_its_requests(plain: ServedModel) -> None:
    a = {"x": np.arange(8, dtype=np.float32).reshape(2, 4)}
    b = {"x": np.ones((1, 4), np.float32)}
    together = plain.run([a, b])
    apart = [plain.run([a])[0], plain.run([b])[0]]
    assert [r["y"].shape for r in together] == [(2, 2), (1, 2)]
    for got, want in zip(together, apart, strict=True):
        np.testing.assert_allclose(got["y"], want["y"], rtol=1e-6)
        np.testing.assert_array_equal(got["n"], want["n"])
    # y = x @ W with W = arange(8).reshape(4, 2) / 8: row [1, 1, 1, 1] gives [12, 16] / 8
    np.testing.assert_allclose(together[1]["y"], [[1.5, 2.0]])


def test_a_value_onnx_runtime_refuses_is_a_user_error(plain: ServedModel) -> None:
    with pytest.raises(UserError, match=r"^the model refused the input: ") as caught:
        plain.run([{"x": np.ones((1, 4), np.float64)}])  # the graph takes float32
    assert "\n" not in str(caught.value)


def test_tensors_check_names_and_count_rows(plain: ServedModel) -> None:
    feeds, rows = plain.tensors(request(inputs=[x_input([[1, 2, 3, 4]] * 3)]), None)
    assert rows == 3 and feeds["x"].shape == (3, 4) and feeds["x"].dtype == np.float32
    with pytest.raises(UserError, match=r"unknown input 'z'; the model takes \['x'\]"):
        plain.tensors(request(inputs=[{**x_input([[1, 2, 3, 4]]), "name": "z"}]), None)
    twice = [x_input([[1, 2, 3, 4]]), x_input([[1, 2, 3, 4]])]
    with pytest.raises(UserError, match="input 'x' is given twice"):
        plain.tensors(request(inputs=twice), None)


def test_requested_outputs_default_to_all_in_the_requests_binary_mode(plain: ServedModel) -> None:
    inputs = [x_input([[1, 2, 3, 4]])]
    assert plain.requested(request(inputs=inputs)) == [("y", False), ("n", False)]
    everything = request(inputs=inputs, parameters={"binary_data_output": True})
    assert plain.requested(everything) == [("y", True), ("n", True)]
    chosen = request(
        inputs=inputs,
        parameters={"binary_data_output": True},
        outputs=[{"name": "n"}, {"name": "y", "parameters": {"binary_data": False}}],
    )
    assert plain.requested(chosen) == [("n", True), ("y", False)]
    with pytest.raises(UserError, match=r"unknown output 'p'; the model has \['y', 'n'\]"):
        plain.requested(request(inputs=inputs, outputs=[{"name": "p"}]))


def test_metadata_and_triton_config_of_a_batching_model(plain: ServedModel) -> None:
    doc = plain.metadata(max_batch=8, max_wait_ms=2.5, queue=16)
    assert doc["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]
    assert doc["outputs"][1] == {"name": "n", "datatype": "INT64", "shape": [-1]}
    assert doc["batching"]["dynamic"] and doc["preprocessing"] is None
    config = plain.config(max_batch=8, max_wait_ms=2.5, queue=16)
    assert config["max_batch_size"] == 8
    assert config["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": [4]}]
    # n is [batch]: without the batch dimension nothing is left, which Triton writes so
    assert config["output"][1] == {
        "name": "n",
        "data_type": "TYPE_INT64",
        "dims": [1],
        "reshape": {"shape": []},
    }
    assert config["dynamic_batching"] == {
        "max_queue_delay_microseconds": 2500,
        "default_queue_policy": {"max_queue_size": 16},
    }
    assert config["instance_group"] == [{"count": 1, "kind": "KIND_CPU"}]


def test_config_of_a_model_that_does_not_batch(paths: dict[str, Path]) -> None:
    det = ServedModel(paths["det"], threads=1)
    config = det.config(max_batch=8, max_wait_ms=2.5, queue=16)
    assert config["max_batch_size"] == 0 and "dynamic_batching" not in config
    assert config["input"][0]["dims"] == [1, 3, 20, 40]  # the whole shape, batch included
    feeds, rows = det.tensors(
        request(
            inputs=[
                {"name": "image", "shape": [1, 3, 20, 40], "datatype": "FP32", "data": [0.0] * 2400}
            ]
        ),
        None,
    )
    assert rows == 1 and feeds["image"].shape == (1, 3, 20, 40)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> ServedModel:
    return ServedModel(mixed_model(tmp_path_factory.mktemp("mixed") / "mixed.onnx"), threads=1)


def mixed_inputs(rows: dict[str, int]) -> list[dict[str, Any]]:
    types = {"a": "FP16", "b": "INT32", "u": "UINT8", "flag": "BOOL", "text": "BYTES"}
    inputs = []
    for name, n in rows.items():
        shape = [n] if name == "text" else [n, 2]
        count = n if name == "text" else 2 * n
        value: Any = {"BOOL": True, "BYTES": "t"}.get(types[name], 1)
        inputs.append(
            {"name": name, "shape": shape, "datatype": types[name], "data": [value] * count}
        )
    return inputs


def test_every_input_is_needed_and_all_share_the_batch(mixed: ServedModel) -> None:
    with pytest.raises(UserError) as caught:
        mixed.tensors(request(inputs=mixed_inputs({"a": 1, "u": 1})), None)
    assert str(caught.value) == "missing input 'b'; the model takes ['a', 'b', 'u', 'flag', 'text']"
    uneven = mixed_inputs({"a": 2, "b": 1, "u": 1, "flag": 1, "text": 3})
    with pytest.raises(UserError, match=r"^inputs differ in batch size: \[1, 2, 3\]$"):
        mixed.tensors(request(inputs=uneven), None)
    feeds, rows = mixed.tensors(
        request(inputs=mixed_inputs(dict.fromkeys(["a", "b", "u", "flag", "text"], 2))), None
    )
    assert rows == 2 and feeds["text"].tolist() == ["t", "t"] and feeds["a"].dtype == np.float16
    (out,) = mixed.run([feeds])
    assert out["total"].tolist() == [[3.0, 3.0], [3.0, 3.0]]  # 1 + 1 + 1 where flag holds
    assert out["text_out"].tolist() == ["t", "t"]


def test_a_batch_whose_output_lacks_its_rows_stops_the_batching(tmp_path: Path) -> None:
    """y is declared [N] but is 3 N long: the first batch finds it out and runs each request
    alone; later requests run alone from the start (not batched and run again every time),
    and metadata and config stop advertising batching."""
    served = ServedModel(flattening(tmp_path / "lies.onnx", ["N"]), threads=1)
    assert served.batchable
    assert [a["y"].tolist() for a in served.run(REQUESTS)] == [[1, 2, 3], [4, -5, 6]]
    assert not served.batchable
    assert served.note == ("output 'y' had 6 rows for a batch of 2: requests run one at a time")
    assert served.config(8, 5, 16)["max_batch_size"] == 0


@pytest.mark.parametrize(
    ("kind", "fix"),
    [
        ("seq", "change the graph to give a tensor there"),
        ("zipmap", "convert the model to give a tensor, as skl2onnx does with zipmap=False"),
        ("bf16_in", "cast it to one of them in the graph"),
    ],
)
def test_an_unservable_tensor_is_told_the_fix_that_fits_it(
    tmp_path: Path, kind: str, fix: str
) -> None:
    """An input is not "given", and zipmap=False mends skl2onnx's map, not a bfloat16."""
    nodes, x, y, _ = UNSERVABLE[kind]
    opsets = [*OPSET, helper.make_opsetid("ai.onnx.ml", 1)]
    path = tmp_path / f"{kind}.onnx"
    graph = helper.make_graph(nodes, kind, [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=opsets, ir_version=10), path)
    with pytest.raises(UserError) as e:
        ServedModel(path, threads=1)
    assert e.value.hint == f"it passes tensors of {', '.join(DATATYPES)} only; {fix}"
