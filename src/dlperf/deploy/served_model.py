"""The model behind `dlperf serve`: one ONNX Runtime session, the dlperf metadata if the file
has any, whether its requests may be batched, and its description in the protocol's
shapes (v2 metadata, Triton's model configuration).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument, RuntimeException

from dlperf.blas import address_limit
from dlperf.deploy import meta as meta_io
from dlperf.deploy import runtime
from dlperf.deploy.protocol import (
    DATATYPES,
    MODEL_VERSION,
    ORT_TYPES,
    InferRequest,
    binary_parts,
    config_type,
    decode_tensor,
    dims,
    refuse_unsupported,
)
from dlperf.errors import UserError

# How ONNX Runtime says an allocation failed, its arena's (BFCArena) or the CPU allocator's, in
# a Fail or a RuntimeException; a std::bad_alloc reaches Python as a MemoryError.
ORT_OUT_OF_MEMORY = "Failed to allocate memory"


class OutOfMemory(UserError):
    """The server had no memory for a request: answered 507 (Insufficient Storage), as
    TorchServe and DJL Serving answer theirs; not the client's fault, but one line all the same."""


def out_of_memory(said: str, less: str | None) -> OutOfMemory:
    """The error whose message is `said` ("the model ran out of memory on ..."), with what to
    do: `less` ("send fewer rows per request"; None: a request as small as one can be), or more
    memory for the server, its address-space limit named when it has one."""
    limit = address_limit()
    more = (
        "give the server more memory"
        if limit is None
        else f"raise the server's memory limit, ulimit -v {limit // 1024}"
    )
    return OutOfMemory(said, f"{less}, or {more}" if less else more)


def _check_types(path: Path, inputs: list[Any], outputs: list[Any]) -> None:
    """Refuse, as the server starts, a model with an input or output no v2 datatype carries:
    a sequence or a map (skl2onnx's ZipMap), or a bfloat16 tensor, for which ONNX Runtime takes
    and gives no numpy array. Served, every request failed (a 500 with a traceback). And one
    without inputs (a constant graph): a request names one input at least."""
    if not inputs:
        raise UserError(f"{path} takes no inputs: the v2 protocol has nothing to send it")
    for kind, args in (("input", inputs), ("output", outputs)):
        for arg in args:
            if arg.type in ORT_TYPES:
                continue
            if arg.type.startswith("tensor("):
                fix = "cast it to one of them in the graph"
            elif "map(" in arg.type and kind == "output":
                fix = "convert the model to give a tensor, as skl2onnx does with zipmap=False"
            else:
                fix = f"change the graph to {'take' if kind == 'input' else 'give'} a tensor there"
            raise UserError(
                f"{path}: {kind} '{arg.name}' is a {arg.type}, which dlperf serve cannot pass "
                "as a v2 tensor",
                f"it passes tensors of {', '.join(DATATYPES)} only; {fix}",
            )


def _not_batched(inputs: list[Any], outputs: list[Any]) -> str | None:
    """Why the requests to a model with these inputs and outputs cannot be batched, or None.
    Rows are concatenated along the inputs' first dimension and split back along the
    outputs', so all must be one dynamic dimension, by name: a plain ONNX file's output may
    well be another (a reduction over the batch, a flattened batch, a list of detections)."""
    batch = inputs[0].shape[0] if inputs[0].shape else 1
    if isinstance(batch, int):
        return "the model has no dynamic batch dimension"
    if batch is None:
        return f"input '{inputs[0].name}' has a dynamic first dimension without a name to match"
    for kind, args in (("input", inputs), ("output", outputs)):
        for arg in args:
            if not arg.shape:
                return f"{kind} '{arg.name}' is a scalar, with no batch dimension"
            if arg.shape[0] != batch:
                first = "unnamed" if arg.shape[0] is None else arg.shape[0]
                return (
                    f"{kind} '{arg.name}' has first dimension {first}, not the inputs' batch "
                    f"dimension {batch}"
                )
    return None


class ServedModel:
    """One ONNX model, its dlperf metadata if it has any, and how its requests may be batched.

    A plain ONNX file (no dlperf metadata) is served on the tensor endpoints, its inputs and
    outputs as its graph declares them; /predict, which needs the preprocessing and labels,
    refuses it."""

    def __init__(self, path: Path, threads: int | None) -> None:
        self.name = path.stem
        self.meta = meta_io.find(path)  # first: a file that is no model is told so
        if self.name == "stats":
            # Served, GET /v2/models/stats answered the statistics, and a client reading the
            # model's inputs from its metadata (tritonclient, perf_analyzer) got none.
            raise UserError(
                f"{path}: a model named 'stats' cannot be served: GET /v2/models/stats is the "
                "statistics of every model (Triton's statistics extension), not this model's "
                "metadata",
                "rename the file: the model's name is the file's name without its extension",
            )
        self.task = self.meta.task if self.meta else None
        self.session = runtime.session(path, threads)
        self.inputs = self.session.get_inputs()
        self.outputs = self.session.get_outputs()
        self.output_names = [o.name for o in self.outputs]
        _check_types(path, self.inputs, self.outputs)
        if self.meta and self.task == "classification":  # /predict ranks its scores
            runtime.check_scores(self.session, path, self.meta.input_shape)
        # What serve says once as it starts: /predict does not softmax them again.
        self.said: str | None = None
        if self.meta and self.meta.probabilities:
            self.said = f"{runtime.PROBABILITIES}: /predict shows them as they are"
        batch_dim = self.inputs[0].shape[0] if self.inputs[0].shape else None
        # /predict feeds one image: a fixed batch of more would refuse every upload.
        if self.meta and isinstance(batch_dim, int) and batch_dim != 1:
            raise UserError(
                f"{path} has a fixed batch size of {batch_dim}; the server needs 1 or a "
                "dynamic batch dimension",
                "export it with `dlperf export --dynamic-batch`",
            )
        other = _not_batched(self.inputs, self.outputs)
        # Detector outputs ([N, 4] boxes, ...) have no batch dimension to split along.
        self.batchable = self.task != "detection" and other is None
        if self.task == "detection":
            self.note = "detection models run one image at a time"
        elif other is not None:
            self.note = f"{other}: requests run one at a time"
        else:
            self.note = "requests are batched along the dynamic batch dimension"

    def described(self, endpoint: str) -> meta_io.ModelMeta:
        """The dlperf metadata that `endpoint` needs, or a UserError saying it is missing."""
        if self.meta is None:
            raise UserError(
                f"{endpoint} needs the dlperf metadata (task, preprocessing, labels) that "
                f"model '{self.name}' does not carry; send tensors to "
                f"/v2/models/{self.name}/infer, or export the model with `dlperf export`"
            )
        return self.meta

    def run(self, payloads: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """Called on the inference thread with one batch of requests' input tensors. Out of
        memory, it raises OutOfMemory naming the batch's size; the batcher then runs each of
        its requests alone, and the one that fails alone hears it."""
        try:
            return self._run(payloads)
        except MemoryError:
            raise self._starved(payloads) from None
        except (Fail, RuntimeException) as e:
            if ORT_OUT_OF_MEMORY not in str(e):
                raise
            raise self._starved(payloads) from None

    def _starved(self, payloads: list[dict[str, np.ndarray]]) -> OutOfMemory:
        size = f"{sum(x.nbytes for p in payloads for x in p.values()) / 2**20:.1f} MiB of input"
        if not self.batchable:
            return out_of_memory(f"the model ran out of memory on a request of {size}", None)
        rows = sum(len(p[self.inputs[0].name]) for p in payloads)
        said = f"the model ran out of memory on a request of {rows:,} rows ({size})"
        return out_of_memory(said, "send fewer rows per request" if rows > 1 else None)

    def _run(self, payloads: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        if not self.batchable:
            return [dict(zip(self.output_names, self._call(p), strict=True)) for p in payloads]
        feeds = {i.name: np.concatenate([p[i.name] for p in payloads]) for i in self.inputs}
        outputs = self._call(feeds)
        rows = [len(p[self.inputs[0].name]) for p in payloads]
        for name, o in zip(self.output_names, outputs, strict=True):
            if o.shape[:1] != (sum(rows),):
                # The file declares an output of the batch's rows that has not: split, each
                # client would get a slice of everyone's results. Each request runs alone, this
                # batch's and every later one's (batched, each batch would run twice).
                self.batchable = False
                had = o.shape[0] if o.shape else "no"
                self.note = (
                    f"output '{name}' had {had} rows for a batch of {sum(rows)}: requests run "
                    "one at a time"
                )
                return self._run(payloads)
        parts = [np.split(o, np.cumsum(rows)[:-1]) for o in outputs]
        return [dict(zip(self.output_names, row, strict=True)) for row in zip(*parts, strict=True)]

    def _call(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        try:
            outputs: list[np.ndarray] = self.session.run(self.output_names, feeds)
            return outputs
        except InvalidArgument as e:
            # ONNX Runtime checks values as well as shapes (an index out of range, ...).
            raise UserError(
                f"the model refused the input: {str(e).strip().splitlines()[0]}"
            ) from None

    def metadata(self, max_batch: int, max_wait_ms: float, queue: int) -> dict[str, Any]:
        """The v2 model metadata, plus preprocessing, labels, whether its scores are probabilities
        already (`probabilities`; None where not recorded) and the batching in force."""

        def tensors(args: list[Any]) -> list[dict[str, Any]]:
            return [{"name": a.name, "datatype": ORT_TYPES[a.type], "shape": dims(a)} for a in args]

        return {
            "name": self.name,
            "versions": [MODEL_VERSION],
            "platform": "onnxruntime_onnx",
            "inputs": tensors(self.inputs),
            "outputs": tensors(self.outputs),
            "task": self.task,
            "model": self.meta.model if self.meta else None,
            "preprocessing": asdict(self.meta.preprocess) if self.meta else None,
            "labels": self.meta.labels if self.meta else None,
            "probabilities": self.meta.probabilities if self.meta else None,
            "batching": {
                "dynamic": self.batchable,
                "max_batch": max_batch,
                "max_wait_ms": max_wait_ms,
                "queue": queue,
                "note": self.note,
            },
        }

    def config(self, max_batch: int, max_wait_ms: float, queue: int) -> dict[str, Any]:
        """The model configuration as Triton writes it (`get_model_config`): a batching model
        has max_batch_size over 0 and dims without the batch dimension; any other, 0 and
        its whole shape."""
        skip = 1 if self.batchable else 0

        def entry(arg: Any) -> dict[str, Any]:
            doc = {"name": arg.name, "data_type": config_type(arg.type), "dims": dims(arg)[skip:]}
            if not doc["dims"]:
                # Triton's dims are never empty: a batch of scalars is dims [1] reshaped to [].
                doc.update(dims=[1], reshape={"shape": []})
            return doc

        gpu = "CUDAExecutionProvider" in self.session.get_providers()
        doc: dict[str, Any] = {
            "name": self.name,
            "platform": "onnxruntime_onnx",
            "backend": "onnxruntime",
            "max_batch_size": max_batch if self.batchable else 0,
            "input": [entry(a) for a in self.inputs],
            "output": [entry(a) for a in self.outputs],
            "instance_group": [{"count": 1, "kind": "KIND_GPU" if gpu else "KIND_CPU"}],
        }
        if self.batchable:
            doc["dynamic_batching"] = {
                "max_queue_delay_microseconds": round(max_wait_ms * 1000),
                "default_queue_policy": {"max_queue_size": queue},
            }
        return doc

    def tensors(
        self, request: InferRequest, binary: memoryview | None
    ) -> tuple[dict[str, np.ndarray], int]:
        """The request's inputs checked against the model's (names, datatypes, shapes) and
        decoded from JSON or from their share of the binary data; and the batch's rows."""
        args = {i.name: i for i in self.inputs}
        feeds: dict[str, np.ndarray] = {}
        for spec, raw in zip(request.inputs, binary_parts(request.inputs, binary), strict=True):
            if spec.name not in args:
                raise UserError(f"unknown input '{spec.name}'; the model takes {list(args)}")
            if spec.name in feeds:
                raise UserError(f"input '{spec.name}' is given twice")
            feeds[spec.name] = decode_tensor(spec, args[spec.name], raw)
        missing = [name for name in args if name not in feeds]
        if missing:
            raise UserError(f"missing input '{missing[0]}'; the model takes {list(args)}")
        if not self.batchable:
            return feeds, 1
        rows = {len(x) for x in feeds.values()}
        if len(rows) > 1:
            raise UserError(f"inputs differ in batch size: {sorted(rows)}")
        return feeds, rows.pop()

    def requested(self, request: InferRequest) -> list[tuple[str, bool]]:
        """(output name, as binary?) for each output to return, in the order asked; each once:
        one asked for again is refused, as an input given twice is (each copy was encoded into
        the answer: a request within the body cap drove an answer, and memory, of any size)."""
        default = request.parameters.binary_data_output
        if not request.outputs:
            return [(name, default) for name in self.output_names]
        wanted: list[tuple[str, bool]] = []
        for out in request.outputs:
            if out.name not in self.output_names:
                raise UserError(f"unknown output '{out.name}'; the model has {self.output_names}")
            if any(name == out.name for name, _ in wanted):
                raise UserError(f"output '{out.name}' is asked for twice")
            refuse_unsupported(out.parameters, f"output '{out.name}'")
            binary = out.parameters.binary_data
            wanted.append((out.name, default if binary is None else binary))
        return wanted
