"""dlperf.deploy.protocol on its own: the KServe v2 codec against fake model inputs (objects
with ONNX Runtime's `type` and `shape`), no server and no session."""

from __future__ import annotations

import json
import struct
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from dlperf.deploy.protocol import (
    HEADER_LENGTH,
    InferRequest,
    Parameters,
    TensorIn,
    binary_parts,
    config_type,
    decode_tensor,
    dims,
    infer_response,
    parse,
    refuse_unsupported,
    split,
)
from dlperf.errors import UserError


def arg(ort_type: str = "tensor(float)", shape: list[Any] | None = None) -> Any:
    return SimpleNamespace(type=ort_type, shape=["N", 2] if shape is None else shape)


def tensor(**fields: Any) -> TensorIn:
    doc = {"name": "x", "shape": [1, 2], "datatype": "FP32", **fields}
    return TensorIn.model_validate(doc)


def test_dims_and_config_types() -> None:
    assert dims(arg(shape=["batch", 3, None, 8])) == [-1, 3, -1, 8]
    assert config_type("tensor(float)") == "TYPE_FP32"
    assert config_type("tensor(string)") == "TYPE_STRING"  # BYTES is STRING in Triton's config
    assert config_type("tensor(int64)") == "TYPE_INT64"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"inputs": []}', "malformed request: inputs: List should have at least 1 item"),
        (b"{not json", "malformed request: Invalid JSON"),
        (b'{"inputs": [{"name": "x", "shape": ["1"], "datatype": "FP32"}]}', "inputs.0.shape.0:"),
    ],
)
def test_parse_names_the_first_problem(body: bytes, message: str) -> None:
    with pytest.raises(UserError, match=message) as caught:
        parse(InferRequest, body)
    assert "\n" not in str(caught.value)


def test_split_header_and_binary() -> None:
    assert split(b"abc", None) == (b"abc", None)
    header, rest = split(b'{"a":1}XYZ', "7")
    assert header == b'{"a":1}' and rest is not None and bytes(rest) == b"XYZ"
    header, rest = split(b"{}", "0002")  # leading zeros are still a count
    assert header == b"{}" and rest is not None and bytes(rest) == b""


@pytest.mark.parametrize(
    ("length", "message"),
    [
        ("-1", "is '-1'; expected a byte count"),
        ("١", "expected a byte count"),  # a non-ASCII digit
        ("4", "is 4 but the body has only 3 bytes"),
        ("9" * 5000, "is 5000 digits long but the body has only 3 bytes"),  # no int() of it
    ],
)
def test_split_refuses_a_bad_header_length(length: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        split(b"abc", length)


def test_binary_parts_slice_the_inputs_in_order() -> None:
    inputs = [
        tensor(name="a", parameters={"binary_data_size": 2}),
        tensor(name="j", data=[1, 2]),
        tensor(name="b", parameters={"binary_data_size": 3}),
    ]
    parts = binary_parts(inputs, memoryview(b"AAbbb"))
    assert [None if p is None else bytes(p) for p in parts] == [b"AA", None, b"bbb"]


@pytest.mark.parametrize(
    ("sizes", "binary", "message"),
    [
        ([2], None, f"input 'x' has binary_data_size but the request has no {HEADER_LENGTH}"),
        ([4], b"abc", "binary_data_size 4 runs past the end of the body \\(3 bytes left\\)"),
        ([1], b"abc", "2 bytes after the JSON header belong to no input"),
    ],
)
def test_binary_parts_account_for_every_byte(
    sizes: list[int], binary: bytes | None, message: str
) -> None:
    inputs = [tensor(parameters={"binary_data_size": s}) for s in sizes]
    with pytest.raises(UserError, match=message):
        binary_parts(inputs, None if binary is None else memoryview(binary))


def test_extensions_the_server_lacks_are_refused() -> None:
    with pytest.raises(UserError, match="input 'x': this server has no shared-memory extension"):
        binary_parts([tensor(data=[1, 2], parameters={"shared_memory_region": "r"})], None)
    with pytest.raises(UserError, match="out: this server has no classification extension"):
        refuse_unsupported(Parameters(classification=3), "out")


def test_decode_json_and_binary_give_the_same_array() -> None:
    values = [[1.5, -2.0], [0.25, 4.0]]
    from_json = decode_tensor(tensor(shape=[2, 2], data=values), arg(), None)
    raw = memoryview(struct.pack("<4f", 1.5, -2.0, 0.25, 4.0))
    from_binary = decode_tensor(tensor(shape=[2, 2]), arg(), raw)
    assert from_json.dtype == from_binary.dtype == np.float32
    np.testing.assert_array_equal(from_json, np.array(values, np.float32))
    np.testing.assert_array_equal(from_binary, from_json)


@pytest.mark.parametrize(
    ("spec", "model_arg", "message"),
    [
        ({"datatype": "INT64", "data": [1, 2]}, arg(), "has datatype INT64; expected FP32"),
        ({"shape": [1, 3], "data": [1, 2, 3]}, arg(), r"has shape \[1, 3\]; expected \[-1, 2\]"),
        ({"shape": [0, 2], "data": []}, arg(), r"has shape \[0, 2\]"),  # no empty batch
        ({"data": [1, 2, 3]}, arg(), "has 3 values; shape \\[1, 2\\] needs 2"),
        ({}, arg(), "has no data and no binary_data_size"),
        ({"data": [True, False]}, arg(), r"\(FP32\): data must be numbers"),
        ({"data": [1.0, float("nan")]}, arg(), "values must be finite"),
        ({"data": [1.0, 1e39]}, arg(), "finite and within ±3.403e\\+38"),  # inf once FP32
        (
            {"datatype": "INT8", "data": [1, 200]},
            arg("tensor(int8)"),
            r"\(INT8\): values must lie in \[-128, 127\]",
        ),
        ({"datatype": "INT8", "data": [1, 2.5]}, arg("tensor(int8)"), "data must be integers"),
        ({"data": [[1], [2, 3]]}, arg(), "data is not a flat or evenly nested list"),
    ],
)
def test_decode_refuses_what_the_model_cannot_take(
    spec: dict[str, Any], model_arg: Any, message: str
) -> None:
    with pytest.raises(UserError, match=message) as caught:
        decode_tensor(tensor(**spec), model_arg, None)
    assert str(caught.value).startswith("input 'x'")


def test_decode_binary_bool_bytes_and_sizes() -> None:
    flags = decode_tensor(tensor(datatype="BOOL"), arg("tensor(bool)"), memoryview(bytes([0, 7])))
    assert flags.dtype == np.bool_ and flags.tolist() == [[False, True]]
    words = b"".join(struct.pack("<I", len(w)) + w for w in (b"h\xc3\xa9", b""))
    text = decode_tensor(tensor(datatype="BYTES"), arg("tensor(string)"), memoryview(words))
    assert text.tolist() == [["hé", ""]]
    with pytest.raises(UserError, match="binary_data_size is 7 bytes; 2 FP32 values take 8"):
        decode_tensor(tensor(), arg(), memoryview(bytes(7)))
    with pytest.raises(UserError, match="has both data and binary_data_size"):
        decode_tensor(tensor(data=[1, 2]), arg(), memoryview(bytes(8)))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"\x01\x00", "ends inside an element's length"),
        (struct.pack("<I", 5) + b"ab", "a BYTES element runs past binary_data_size"),
        (struct.pack("<I", 1) + b"\xff" + struct.pack("<I", 0), "must be UTF-8 text"),
    ],
)
def test_decode_refuses_broken_bytes_elements(raw: bytes, message: str) -> None:
    with pytest.raises(UserError, match=message):
        decode_tensor(tensor(datatype="BYTES"), arg("tensor(string)"), memoryview(raw))


def test_infer_response_json_only() -> None:
    outputs = {"y": np.array([[1.0, 2.0]], np.float32), "n": np.array([1], np.int64)}
    response = infer_response("m", "req-1", [("n", False), ("y", False)], outputs)
    assert response.media_type == "application/json"
    doc = json.loads(bytes(response.body))
    assert doc == {
        "model_name": "m",
        "model_version": "1",
        "id": "req-1",
        "outputs": [
            {"name": "n", "datatype": "INT64", "shape": [1], "data": [1]},
            {"name": "y", "datatype": "FP32", "shape": [1, 2], "data": [1.0, 2.0]},
        ],
    }


def test_infer_response_binary_outputs_follow_the_header() -> None:
    outputs = {
        "y": np.array([[1.0, 2.0]], np.float32),
        "s": np.array(["ab", "é"], dtype=object),
    }
    response = infer_response("m", None, [("y", True), ("s", True)], outputs)
    body = bytes(response.body)
    length = int(response.headers[HEADER_LENGTH])
    doc = json.loads(body[:length])
    assert "id" not in doc
    assert [o["parameters"]["binary_data_size"] for o in doc["outputs"]] == [8, 4 + 2 + 4 + 2]
    assert [o["datatype"] for o in doc["outputs"]] == ["FP32", "BYTES"]
    assert body[length:] == (
        struct.pack("<2f", 1.0, 2.0)
        + struct.pack("<I", 2)
        + b"ab"
        + struct.pack("<I", 2)
        + "é".encode()
    )


def test_json_integers_beyond_int64_are_read_as_the_datatype_says() -> None:
    # numpy keeps an integer past int64 as a Python object: UINT64's upper half, or 1e20
    # written without a point, is still an integer of the datatype or a number
    top = decode_tensor(tensor(datatype="UINT64", data=[2**64 - 1, 0]), arg("tensor(uint64)"), None)
    assert top.dtype == np.uint64 and top.tolist() == [[2**64 - 1, 0]]
    big = decode_tensor(tensor(datatype="FP64", data=[10**20, 1]), arg("tensor(double)"), None)
    assert big.dtype == np.float64 and big.tolist() == [[1e20, 1.0]]


@pytest.mark.parametrize(
    ("datatype", "ort_type", "data", "message"),
    [
        ("INT64", "tensor(int64)", [2**63, 1], r"values must lie in \[-9223372036854775808, 9223"),
        ("UINT64", "tensor(uint64)", [2**64, 1], r"values must lie in \[0, 18446744073709551615\]"),
        ("UINT64", "tensor(uint64)", [-(2**63) - 1, 1], r"values must lie in \[0, "),
        ("FP32", "tensor(float)", [10**39, 1], "values must be finite and within ±3.403e"),
        ("FP64", "tensor(double)", [10**400, 1], "values must be finite and within ±1.798e"),
        ("BOOL", "tensor(bool)", [2**64, 1], "data must be true or false"),
    ],
)
def test_json_integers_beyond_int64_out_of_range_say_so(
    datatype: str, ort_type: str, data: list[int], message: str
) -> None:
    with pytest.raises(UserError, match=message):
        decode_tensor(tensor(datatype=datatype, data=data), arg(ort_type), None)
