"""The Open Inference Protocol (KServe v2) codec of `dlperf serve`: request bodies (JSON and
the `binary_tensor_data` extension: a JSON header of `Inference-Header-Content-Length`
bytes, then the raw little-endian tensors) to numpy arrays checked against the model's
inputs, and outputs back to a response. Everything a client got wrong is a UserError.
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Iterator
from itertools import chain
from typing import Any, TypeVar

import numpy as np
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError
from pydantic_core import ErrorDetails

from dlperf.errors import UserError

# v2 datatype -> (ONNX Runtime type, numpy type); BYTES elements are str, as ORT gives them.
DATATYPES: dict[str, tuple[str, Any]] = {
    "BOOL": ("tensor(bool)", np.bool_),
    "UINT8": ("tensor(uint8)", np.uint8),
    "UINT16": ("tensor(uint16)", np.uint16),
    "UINT32": ("tensor(uint32)", np.uint32),
    "UINT64": ("tensor(uint64)", np.uint64),
    "INT8": ("tensor(int8)", np.int8),
    "INT16": ("tensor(int16)", np.int16),
    "INT32": ("tensor(int32)", np.int32),
    "INT64": ("tensor(int64)", np.int64),
    "FP16": ("tensor(float16)", np.float16),
    "FP32": ("tensor(float)", np.float32),
    "FP64": ("tensor(double)", np.float64),
    "BYTES": ("tensor(string)", np.object_),
}
ORT_TYPES = {ort: name for name, (ort, _) in DATATYPES.items()}
V2_TYPES = {np.dtype(t): name for name, (_, t) in DATATYPES.items()}
# The JSON values each datatype takes, as Python reads them (true is a bool, not an int), and
# what to call them; the integer datatypes, not listed, take integers only.
JSON_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "BOOL": ((bool,), "true or false"),
    "BYTES": ((str,), "strings"),
    **{name: ((int, float), "numbers") for name in ("FP16", "FP32", "FP64")},
}
SHOWN_CHARS = 40  # of a wrong value, in its error
SHOWN_DIGITS = 20  # of a header length past the body; a longer one is told by its digit count
MODEL_VERSION = "1"
HEADER_LENGTH = "Inference-Header-Content-Length"
# jiter's words (pydantic's JSON parser) for a JSON value followed by more than white space.
TRAILING = re.compile(r"trailing characters at line (\d+) column (\d+)")


def dims(arg: Any) -> list[int]:
    """A tensor's shape with dynamic dimensions as -1, as the v2 protocol writes them."""
    return [d if isinstance(d, int) else -1 for d in arg.shape]


def config_type(ort_type: str) -> str:
    """Triton's name of a datatype in a model configuration: TYPE_ and the v2 name, except
    that BYTES is TYPE_STRING there. A served model has no other types (served_model refuses
    them as it starts)."""
    name = ORT_TYPES[ort_type]
    return "TYPE_STRING" if name == "BYTES" else f"TYPE_{name}"


# --- requests --------------------------------------------------------------------------------


class Parameters(BaseModel):
    """The parameters this server reads; the protocol allows any others, which are ignored,
    except those of extensions it does not have (refused rather than silently dropped)."""

    model_config = ConfigDict(extra="allow")
    binary_data_size: StrictInt | None = Field(None, ge=0)  # on an input
    binary_data: StrictBool | None = None  # on a requested output
    binary_data_output: StrictBool = False  # on the request
    shared_memory_region: Any = None
    classification: Any = None


# Unknown fields are ignored, pydantic's default.
class OutputIn(BaseModel):
    name: str
    parameters: Parameters = Field(default_factory=Parameters)


class TensorIn(OutputIn):
    shape: list[StrictInt]
    datatype: str
    data: list[Any] | None = None


class InferRequest(BaseModel):
    id: str | None = None
    parameters: Parameters = Field(default_factory=Parameters)
    inputs: list[TensorIn] = Field(min_length=1)
    outputs: list[OutputIn] | None = None


class IndexRequest(BaseModel):
    ready: StrictBool = False  # list only the models ready for inference


Parsed = TypeVar("Parsed", bound=BaseModel)


def parse(model: type[Parsed], text: bytes) -> Parsed:
    try:
        return model.model_validate_json(text)
    except ValidationError as e:
        raise malformed(e.errors()[0]) from None


def malformed(first: ErrorDetails) -> UserError:
    where = ".".join(str(p) for p in first["loc"])
    return UserError(f"malformed request: {where + ': ' if where else ''}{first['msg']}")


def infer_request(body: bytes, header_length: str | None) -> tuple[InferRequest, memoryview | None]:
    """An inference request's JSON, parsed, and its binary data (None: it has none). Bytes
    after the JSON are binary data only where Inference-Header-Content-Length says where the
    JSON ends: without the header (the easy mistake with a hand-written request) or with one
    past the JSON, that is the mistake told, not the JSON parser's "trailing characters"."""
    header, binary = split(body, header_length)
    try:
        return InferRequest.model_validate_json(header), binary
    except ValidationError as e:
        first = e.errors()[0]
        if binary is not None and len(binary) and _cut_short(first):
            # The JSON runs on into what the header length calls binary data: it was told by
            # the parser, as the JSON's own fault ("EOF while parsing a string").
            whole = _json_end_in(body)
            said = f"but the JSON is {whole} bytes long" if whole else "and the JSON runs past it"
            raise UserError(
                f"{HEADER_LENGTH} is {len(header)} {said}; it gives the JSON's length in bytes"
            ) from None
        end = json_end(header, first)
        if end is None:
            raise malformed(first) from None
        if header_length is None:
            raise UserError(
                f"the body has {len(header) - end:,} bytes after its JSON; binary tensors need "
                f"the {HEADER_LENGTH} header (the JSON's length in bytes)"
            ) from None
        raise UserError(
            f"{HEADER_LENGTH} is {len(header)} but the JSON is {end} bytes long; it gives the "
            "JSON's length in bytes"
        ) from None


def _json_end_in(body: bytes) -> int | None:
    """Where the JSON at the start of `body` ends, where binary data follow it."""
    try:
        InferRequest.model_validate_json(body)
    except ValidationError as e:
        return json_end(body, e.errors()[0])
    return None


def _cut_short(error: ErrorDetails) -> bool:
    """Whether a parse failed at the end of its text, the JSON not yet ended."""
    said = str(error.get("ctx", {}).get("error", ""))
    return error["type"] == "json_invalid" and said.startswith("EOF while parsing")


def json_end(text: bytes, error: ErrorDetails) -> int | None:
    """Where the JSON value at the start of `text` ends, for a parse that failed on bytes after
    it; None for any other failure. jiter (pydantic's parser) gives the line and column (1-based,
    in bytes) of the first byte after the value that is not white space."""
    found = TRAILING.fullmatch(str(error.get("ctx", {}).get("error", "")))
    if error["type"] != "json_invalid" or found is None:
        return None
    start = 0
    for _ in range(int(found[1]) - 1):
        start = text.find(b"\n", start) + 1
        if start == 0:
            return None
    # The white space between the value and that byte is after the JSON too.
    return len(text[: start + int(found[2]) - 1].rstrip(b" \t\r\n"))


def split(body: bytes, header_length: str | None) -> tuple[bytes, memoryview | None]:
    """The JSON header and the binary data after it (None: the request has no binary part)."""
    if header_length is None:
        return body, None
    if not (header_length.isascii() and header_length.isdigit()):
        raise UserError(f"{HEADER_LENGTH} is {header_length!r}; expected a byte count")
    # Compared as text before int(): Python refuses to convert over 4,300 digits (a 500).
    digits = header_length.lstrip("0") or "0"
    if len(digits) > len(str(len(body))):
        # The value itself, unless too long to show (then its digit count, in the one line).
        said = digits if len(digits) <= SHOWN_DIGITS else f"{len(digits)} digits long"
        raise UserError(f"{HEADER_LENGTH} is {said} but the body has only {len(body)} bytes")
    length = int(digits)
    if length > len(body):
        raise UserError(f"{HEADER_LENGTH} is {length} but the body has only {len(body)} bytes")
    return body[:length], memoryview(body)[length:]


def refuse_unsupported(parameters: Parameters, what: str) -> None:
    if parameters.shared_memory_region is not None:
        raise UserError(f"{what}: this server has no shared-memory extension; send the data")
    if parameters.classification is not None:
        raise UserError(f"{what}: this server has no classification extension")


def binary_parts(inputs: list[TensorIn], binary: memoryview | None) -> list[memoryview | None]:
    """Each input's slice of the binary data (in the order of the inputs), or None for an
    input sent as JSON; every byte must belong to an input."""
    parts: list[memoryview | None] = []
    offset = 0
    for spec in inputs:
        refuse_unsupported(spec.parameters, f"input '{spec.name}'")
        size = spec.parameters.binary_data_size
        if size is None:
            parts.append(None)
            continue
        if binary is None:
            raise UserError(
                f"input '{spec.name}' has binary_data_size but the request has no "
                f"{HEADER_LENGTH} header"
            )
        if offset + size > len(binary):
            raise UserError(
                f"input '{spec.name}': binary_data_size {size} runs past the end of the body "
                f"({len(binary) - offset} bytes left)"
            )
        parts.append(binary[offset : offset + size])
        offset += size
    if binary is not None and offset != len(binary):
        raise UserError(
            f"{len(binary) - offset} bytes after the JSON header belong to no input; the "
            "inputs' binary_data_size must add up to the binary data"
        )
    return parts


def decode_tensor(spec: TensorIn, arg: Any, raw: memoryview | None) -> np.ndarray:
    datatype = ORT_TYPES[arg.type]  # served_model refuses other types as it starts
    if spec.datatype != datatype:
        raise UserError(f"input '{spec.name}' has datatype {spec.datatype}; expected {datatype}")
    expected = dims(arg)
    _check_sizes(spec)
    fits = len(spec.shape) == len(expected) and all(
        d in (-1, s) for s, d in zip(spec.shape, expected, strict=True)
    )
    if not fits:
        raise UserError(f"input '{spec.name}' has shape {spec.shape}; expected {expected}")
    count = math.prod(spec.shape)
    if raw is not None:
        if spec.data is not None:
            raise UserError(f"input '{spec.name}' has both data and binary_data_size")
        array = _from_binary(raw, datatype, count, spec.name)
    elif spec.data is not None:
        array = _from_json(spec.data, datatype, spec.name)
    else:
        raise UserError(f"input '{spec.name}' has no data and no binary_data_size")
    if array.size != count:
        raise UserError(
            f"input '{spec.name}' has {array.size} values; shape {spec.shape} needs {count}"
        )
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        # NaN, Infinity, 1e400, or 3.5e38 cast to FP32: the model would answer NaN or inf
        limit = float(np.finfo(array.dtype).max)
        raise UserError(
            f"input '{spec.name}' ({datatype}): values must be finite and within ±{limit:.4g}"
        )
    return array.reshape(spec.shape)


def _check_sizes(spec: TensorIn) -> None:
    """Refuse a request dimension below 1, by name: the model's -1 (dynamic) allows any size,
    so the comparison with its shape blamed a matching one ("has shape [-1, 1, 8, 8];
    expected [-1, 1, 8, 8]"). An empty batch is refused as Triton refuses it."""
    for i, size in enumerate(spec.shape):
        if size >= 1:
            continue
        said = f"input '{spec.name}' has shape {spec.shape}"
        if i == 0 and size == 0:
            raise UserError(
                f"{said}: a batch of 0 rows, which this server refuses as Triton does; send "
                "at least one row"
            )
        raise UserError(
            f"{said}: dimension {i} is {size}; a request gives each dimension's size, 1 or "
            "more (-1 marks a dynamic dimension in the model's metadata, not in a request)"
        )


def _from_json(data: list[Any], datatype: str, name: str) -> np.ndarray:
    """JSON numbers, booleans or strings (flat or nested) to the datatype, refusing values
    it cannot hold rather than wrapping or truncating them."""
    dtype = np.dtype(DATATYPES[datatype][1])
    try:
        values = np.asarray(data)
    except ValueError:  # ragged nesting, or deeper than numpy's 64 dimensions
        raise UserError(f"input '{name}': data is not a flat or evenly nested list") from None
    _check_kinds(data, values.shape, datatype, name)
    # Integers numpy holds in no integer type (past int64: UINT64's upper half, 1e20 written
    # without a point) come out as Python objects, or as float64 beside smaller integers.
    if values.dtype == object or (dtype.kind in "iu" and values.dtype.kind == "f"):
        return _big_integers(np.asarray(data, dtype=object), dtype, datatype, name)
    if dtype.kind in "iu" and values.size:
        info = np.iinfo(dtype)
        if values.min() < info.min or values.max() > info.max:
            raise UserError(
                f"input '{name}' ({datatype}): values must lie in [{info.min}, {info.max}]"
            )
    with np.errstate(over="ignore"):  # a float beyond the datatype's range: inf, refused after
        return values.astype(dtype)


def _check_kinds(data: list[Any], shape: tuple[int, ...], datatype: str, name: str) -> None:
    """Refuse data holding a value of the wrong kind, naming the first, as Triton does. The
    kind of np.asarray(data) cannot tell: numpy promotes `["abc", 5]` to strings ("5"), and
    `[true, 2]` and `[true, 0.5]` to numbers."""
    allowed, wanted = JSON_TYPES.get(datatype, ((int,), "integers"))
    if set(map(type, _leaves(data, len(shape)))) <= set(allowed):
        return
    position, value = next(
        (i, v) for i, v in enumerate(_leaves(data, len(shape))) if type(v) not in allowed
    )
    where = "".join(f"[{i}]" for i in np.unravel_index(position, shape))
    shown = json.dumps(value)
    if len(shown) > SHOWN_CHARS:
        shown = shown[: SHOWN_CHARS - 3] + "..."
    raise UserError(f"input '{name}' ({datatype}): data must be {wanted}; data{where} is {shown}")


def _leaves(data: list[Any], depth: int) -> Iterator[Any]:
    """The values of evenly nested lists `depth` deep, in row-major order (iterated in C:
    this runs over every value of every JSON tensor)."""
    leaves: Iterator[Any] = iter(data)
    for _ in range(depth - 1):
        leaves = chain.from_iterable(leaves)
    return leaves


def _big_integers(values: np.ndarray, dtype: np.dtype, datatype: str, name: str) -> np.ndarray:
    """JSON integers some of which lie past int64, which numpy keeps as Python ints: checked
    against an integer datatype's range, or made floats, as the other numbers are."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if min(values.flat) < info.min or max(values.flat) > info.max:
            raise UserError(
                f"input '{name}' ({datatype}): values must lie in [{info.min}, {info.max}]"
            )
        return values.astype(dtype)
    try:
        floats = values.astype(np.float64)
    except OverflowError:  # past float64: refused as the float reading's inf would be
        floats = np.full(values.shape, np.inf)
    with np.errstate(over="ignore"):
        return floats.astype(dtype)


def _from_binary(raw: memoryview, datatype: str, count: int, name: str) -> np.ndarray:
    """Row-major little-endian elements; BOOL one byte each, BYTES a uint32 length and
    the bytes (UTF-8 text, as ONNX Runtime's strings are) each."""
    if datatype == "BYTES":
        return _bytes_elements(raw, name)
    dtype = np.dtype(DATATYPES[datatype][1])
    if len(raw) != count * dtype.itemsize:
        raise UserError(
            f"input '{name}': binary_data_size is {len(raw)} bytes; {count} {datatype} "
            f"values take {count * dtype.itemsize}"
        )
    if datatype == "BOOL":
        return np.asarray(np.frombuffer(raw, np.uint8) != 0)
    return np.frombuffer(raw, dtype.newbyteorder("<")).astype(dtype, copy=False)


def _bytes_elements(raw: memoryview, name: str) -> np.ndarray:
    items = []
    offset = 0
    while offset < len(raw):
        if offset + 4 > len(raw):
            raise UserError(f"input '{name}': BYTES data ends inside an element's length")
        (size,) = struct.unpack_from("<I", raw, offset)
        offset += 4
        if offset + size > len(raw):
            raise UserError(f"input '{name}': a BYTES element runs past binary_data_size")
        try:
            items.append(bytes(raw[offset : offset + size]).decode())
        except UnicodeDecodeError:
            raise UserError(f"input '{name}': BYTES elements must be UTF-8 text") from None
        offset += size
    return np.array(items, dtype=object)


# --- responses -------------------------------------------------------------------------------


def infer_response(
    model_name: str,
    request_id: str | None,
    wanted: list[tuple[str, bool]],
    outputs: dict[str, np.ndarray],
) -> Response:
    """The v2 inference response; outputs asked for as binary follow the JSON header."""
    doc: dict[str, Any] = {"model_name": model_name, "model_version": MODEL_VERSION}
    if request_id is not None:
        doc["id"] = request_id
    doc["outputs"] = []
    binary = []
    for name, as_binary in wanted:
        array = outputs[name]
        out: dict[str, Any] = {
            "name": name,
            "datatype": V2_TYPES.get(array.dtype, str(array.dtype)),
            "shape": list(array.shape),
        }
        if as_binary:
            binary.append(_to_binary(array))
            out["parameters"] = {"binary_data_size": len(binary[-1])}
        else:
            out["data"] = array.ravel().tolist()
        doc["outputs"].append(out)
    # NaN and infinities come out as Python's json writes them (NaN, Infinity), which
    # Python clients, tritonclient among them, read back; binary outputs avoid the question.
    header = json.dumps(doc).encode()
    if not binary:
        return Response(header, media_type="application/json")
    return Response(
        b"".join([header, *binary]),
        media_type="application/octet-stream",
        headers={HEADER_LENGTH: str(len(header))},
    )


def _to_binary(array: np.ndarray) -> bytes:
    if array.dtype == object:  # BYTES
        encoded = [str(item).encode() for item in array.ravel()]
        return b"".join(struct.pack("<I", len(e)) + e for e in encoded)
    return np.ascontiguousarray(array, array.dtype.newbyteorder("<")).tobytes()
